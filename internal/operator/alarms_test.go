package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/internal/operator/alarmfake"
)

// The SDK client and the fake both implement AlarmsAPI.
var (
	_ AlarmsAPI = (*cloudwatch.Client)(nil)
	_ AlarmsAPI = (*alarmfake.Fake)(nil)
)

const (
	topic      = "arn:aws:sns:us-east-1:123456789012:DdbOutbox-AlarmTopic"
	otherTopic = "arn:aws:sns:us-east-1:123456789012:ops-pager"
)

// clock is a fake clock that Sleep advances.
type clock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps int
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.sleeps++
	return ctx.Err()
}

func stackAlarm(name string, topics ...string) alarmfake.Alarm {
	return alarmfake.Alarm{Name: name, AlarmActions: topics, OKActions: topics}
}

// GIVEN a stack's alarms in the fake CloudWatch
// WHEN CheckAlarmNotifies fires one (by name or by prefix)
// THEN it sets it to ALARM with the reason, reads the history until the SNS
// action of that change has a result, reports it (success, or the failure
// text AWS records for a topic whose policy refuses CloudWatch), and sets
// the alarm back to OK in every case where it set it to ALARM; alarms that
// cannot show a notification (in ALARM already, actions disabled, no SNS
// action, unknown) are refused before anything changes.
func TestCheckAlarmNotifies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		alarms      []alarmfake.Alarm
		refuse      []string
		visible     time.Duration // history delay
		opts        AlarmCheckOptions
		want        error  // nil, ErrAlarmNotNotified or ErrNoAlarmToCheck
		alarm       string // the alarm fired ("" none)
		states      map[string]string
		errText     string
		minSleeps   int
		noSetCalled bool
	}{
		{
			name:   "prefix picks the first alarm in OK with an SNS action",
			alarms: []alarmfake.Alarm{{Name: "DdbOutbox-A-NoActions"}, {Name: "DdbOutbox-B", Actual: cwtypes.StateValueAlarm, AlarmActions: []string{topic}}, stackAlarm("DdbOutbox-C", topic), stackAlarm("DdbOutbox-D", topic), stackAlarm("Other-A", topic)},
			opts:   AlarmCheckOptions{Prefix: "DdbOutbox"}, alarm: "DdbOutbox-C", states: map[string]string{topic: ActionSucceeded},
		},
		{
			name:   "by name",
			alarms: []alarmfake.Alarm{stackAlarm("DdbOutbox-C", topic), stackAlarm("DdbOutbox-D", topic)},
			opts:   AlarmCheckOptions{Name: "DdbOutbox-D"}, alarm: "DdbOutbox-D", states: map[string]string{topic: ActionSucceeded},
		},
		{
			name:   "the topic's policy refuses CloudWatch",
			alarms: []alarmfake.Alarm{stackAlarm("DdbOutbox-C", topic)}, refuse: []string{topic},
			opts: AlarmCheckOptions{Prefix: "DdbOutbox"}, want: ErrAlarmNotNotified, alarm: "DdbOutbox-C",
			states: map[string]string{topic: ActionFailed}, errText: "is not authorized to perform: SNS:Publish",
		},
		{
			name:   "two topics, one refusing",
			alarms: []alarmfake.Alarm{stackAlarm("DdbOutbox-C", topic, otherTopic, "arn:aws:lambda:us-east-1:123456789012:function:hook")}, refuse: []string{otherTopic},
			opts: AlarmCheckOptions{Name: "DdbOutbox-C"}, want: ErrAlarmNotNotified, alarm: "DdbOutbox-C",
			states: map[string]string{topic: ActionSucceeded, otherTopic: ActionFailed}, errText: otherTopic,
		},
		{
			name:   "the result appears after a while",
			alarms: []alarmfake.Alarm{stackAlarm("DdbOutbox-C", topic)}, visible: 12 * time.Second,
			opts: AlarmCheckOptions{Prefix: "DdbOutbox", Poll: 5 * time.Second}, alarm: "DdbOutbox-C",
			states: map[string]string{topic: ActionSucceeded}, minSleeps: 3,
		},
		{
			name:   "no result before the timeout",
			alarms: []alarmfake.Alarm{stackAlarm("DdbOutbox-C", topic)}, visible: time.Hour,
			opts: AlarmCheckOptions{Prefix: "DdbOutbox", Timeout: 30 * time.Second, Poll: 5 * time.Second}, want: ErrAlarmNotNotified, alarm: "DdbOutbox-C",
			states: map[string]string{topic: ""}, errText: "no result in the alarm's history within 30s", minSleeps: 6,
		},
		{
			name:   "the named alarm is in ALARM",
			alarms: []alarmfake.Alarm{{Name: "DdbOutbox-C", Actual: cwtypes.StateValueAlarm, AlarmActions: []string{topic}}},
			opts:   AlarmCheckOptions{Name: "DdbOutbox-C"}, want: ErrNoAlarmToCheck, errText: "in ALARM already", noSetCalled: true,
		},
		{
			name:   "actions disabled",
			alarms: []alarmfake.Alarm{{Name: "DdbOutbox-C", AlarmActions: []string{topic}, ActionsDisabled: true}},
			opts:   AlarmCheckOptions{Name: "DdbOutbox-C"}, want: ErrNoAlarmToCheck, errText: "actions are disabled", noSetCalled: true,
		},
		{
			name:   "unknown name",
			alarms: []alarmfake.Alarm{stackAlarm("DdbOutbox-C", topic)},
			opts:   AlarmCheckOptions{Name: "DdbOutbox-X"}, want: ErrNoAlarmToCheck, errText: `no metric alarm named "DdbOutbox-X"`, noSetCalled: true,
		},
		{
			name:   "no alarm of the prefix fits",
			alarms: []alarmfake.Alarm{{Name: "DdbOutbox-A"}, {Name: "DdbOutbox-B", AlarmActions: []string{topic}, ActionsDisabled: true}},
			opts:   AlarmCheckOptions{Prefix: "DdbOutbox"}, want: ErrNoAlarmToCheck, errText: "none of the 2 alarms", noSetCalled: true,
		},
		{
			name: "name and prefix", alarms: []alarmfake.Alarm{stackAlarm("DdbOutbox-C", topic)},
			opts: AlarmCheckOptions{Name: "DdbOutbox-C", Prefix: "DdbOutbox"}, want: ErrNoAlarmToCheck, noSetCalled: true,
		},
		{
			name: "a reason SetAlarmState refuses", alarms: []alarmfake.Alarm{stackAlarm("DdbOutbox-C", topic)},
			opts: AlarmCheckOptions{Name: "DdbOutbox-C", Reason: strings.Repeat("x", MaxStateReasonLength+1)}, errText: "at most 1023", noSetCalled: true,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clk := &clock{t: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
			f := alarmfake.New(clk.Now, c.alarms...)
			f.VisibleAfter = c.visible
			for _, r := range c.refuse {
				f.RefusePublish(r)
			}
			opts := c.opts
			opts.Now, opts.Sleep = clk.Now, clk.Sleep
			res, err := CheckAlarmNotifies(context.Background(), f, opts)
			switch {
			case c.want == nil && c.errText == "" && err != nil:
				t.Fatalf("err = %v", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("err = %v, want %v", err, c.want)
			case c.errText != "" && (err == nil || !strings.Contains(err.Error(), c.errText)):
				t.Fatalf("err = %v, want it to say %q", err, c.errText)
			}
			if c.noSetCalled {
				if n := f.Calls["SetAlarmState"]; n != 0 {
					t.Errorf("SetAlarmState called %d times for a refused check", n)
				}
				return
			}
			if res.Alarm != c.alarm {
				t.Errorf("fired %q, want %q", res.Alarm, c.alarm)
			}
			got := map[string]string{}
			for _, a := range res.Actions {
				got[a.Topic] = a.State
				if a.State == ActionFailed && !strings.Contains(a.Error, "not authorized") {
					t.Errorf("failure of %s = %q, want AWS's text", a.Topic, a.Error)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.states) {
				t.Errorf("action states %v, want %v", got, c.states)
			}
			if res.ResetErr != nil || f.State(c.alarm) != cwtypes.StateValueOk {
				t.Errorf("after the check: reset err %v, state %s, want OK", res.ResetErr, f.State(c.alarm))
			}
			// ALARM with the reason first, OK last, nothing else
			if len(f.Sets) != 2 || f.Sets[0].StateValue != cwtypes.StateValueAlarm || aws.ToString(f.Sets[0].StateReason) != res.Reason ||
				f.Sets[1].StateValue != cwtypes.StateValueOk || aws.ToString(f.Sets[1].AlarmName) != c.alarm {
				t.Errorf("SetAlarmState calls %+v, want ALARM (the reason) then OK on %s", f.Sets, c.alarm)
			}
			// the test's own state change is in the history, with its reason
			found := false
			for _, it := range f.History() {
				if it.HistoryItemType == cwtypes.HistoryItemTypeStateUpdate && strings.Contains(aws.ToString(it.HistoryData), res.Reason) {
					found = true
				}
			}
			if !found || res.Reason == "" {
				t.Errorf("no StateUpdate with the reason %q in the history", res.Reason)
			}
			if clk.sleeps < c.minSleeps {
				t.Errorf("%d polls, want at least %d", clk.sleeps, c.minSleeps)
			}
		})
	}
}

// GIVEN more alarms than one DescribeAlarms page and more history than one
// DescribeAlarmHistory page (the alarm flapped a hundred times before)
// WHEN the check runs
// THEN it reads every page: it finds the alarm on a later page and its own
// action among the old ones, not an older action of the same topic.
func TestCheckAlarmNotifiesReadsEveryPage(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	var alarms []alarmfake.Alarm
	for i := range 60 {
		alarms = append(alarms, alarmfake.Alarm{Name: fmt.Sprintf("DdbOutbox-A%02d", i)}) // no actions: unfit
	}
	alarms = append(alarms, stackAlarm("DdbOutbox-Z", topic))
	f := alarmfake.New(clk.Now, alarms...)
	ctx := context.Background()
	for i := range 60 { // old history: failed actions of the same topic
		f.RefusePublish(topic)
		if _, err := f.SetAlarmState(ctx, &cloudwatch.SetAlarmStateInput{AlarmName: aws.String("DdbOutbox-Z"), StateValue: cwtypes.StateValueAlarm, StateReason: aws.String(fmt.Sprint("old ", i))}); err != nil {
			t.Fatal(err)
		}
		clk.t = clk.t.Add(2 * time.Second)
	}
	f = withPublish(f)
	res, err := CheckAlarmNotifies(ctx, f, AlarmCheckOptions{Prefix: "DdbOutbox", Now: clk.Now, Sleep: clk.Sleep})
	if err != nil || res.Alarm != "DdbOutbox-Z" || len(res.Actions) != 1 || res.Actions[0].State != ActionSucceeded {
		t.Fatalf("res %+v, err %v; want DdbOutbox-Z's action to succeed", res, err)
	}
	if f.Calls["DescribeAlarms"] < 2 || f.Calls["DescribeAlarmHistory"] < 3 {
		t.Errorf("calls %v: want every DescribeAlarms and DescribeAlarmHistory page read", f.Calls)
	}
}

// withPublish lets f's topic publish again (the fake has no un-refuse: a
// topic policy fixed between two checks).
func withPublish(f *alarmfake.Fake) *alarmfake.Fake { f.AllowPublish(topic); return f }

// GIVEN the fake CloudWatch
// WHEN it is called as AWS documents it must not be
// THEN it refuses as AWS does, so that the check above cannot pass on a
// fake that is kinder than CloudWatch.
func TestAlarmFakeKeepsCloudWatchsRules(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	f := alarmfake.New(clk.Now, stackAlarm("DdbOutbox-C", topic))
	ctx := context.Background()
	code := func(err error) string {
		var ae smithy.APIError
		if errors.As(err, &ae) {
			return ae.ErrorCode()
		}
		return fmt.Sprint(err)
	}
	for _, c := range []struct {
		name string
		call func() error
		want string
	}{
		{"state value", func() error {
			_, err := f.SetAlarmState(ctx, &cloudwatch.SetAlarmStateInput{AlarmName: aws.String("DdbOutbox-C"), StateValue: "FIRING", StateReason: aws.String("x")})
			return err
		}, "ValidationError"},
		{"no reason", func() error {
			_, err := f.SetAlarmState(ctx, &cloudwatch.SetAlarmStateInput{AlarmName: aws.String("DdbOutbox-C"), StateValue: cwtypes.StateValueAlarm})
			return err
		}, "ValidationError"},
		{"reason data not JSON", func() error {
			_, err := f.SetAlarmState(ctx, &cloudwatch.SetAlarmStateInput{AlarmName: aws.String("DdbOutbox-C"), StateValue: cwtypes.StateValueAlarm, StateReason: aws.String("x"), StateReasonData: aws.String("{")})
			return err
		}, "InvalidFormatFault"}, // the SDK type's code (the API reference names the error InvalidFormat)
		{"unknown alarm", func() error {
			_, err := f.SetAlarmState(ctx, &cloudwatch.SetAlarmStateInput{AlarmName: aws.String("nope"), StateValue: cwtypes.StateValueAlarm, StateReason: aws.String("x")})
			return err
		}, "ResourceNotFound"},
		{"prefix and names", func() error {
			_, err := f.DescribeAlarms(ctx, &cloudwatch.DescribeAlarmsInput{AlarmNamePrefix: aws.String("D"), AlarmNames: []string{"DdbOutbox-C"}})
			return err
		}, "InvalidParameterCombination"},
		{"history item type", func() error {
			_, err := f.DescribeAlarmHistory(ctx, &cloudwatch.DescribeAlarmHistoryInput{HistoryItemType: "Notification"})
			return err
		}, "ValidationError"},
		{"max records", func() error {
			_, err := f.DescribeAlarmHistory(ctx, &cloudwatch.DescribeAlarmHistoryInput{MaxRecords: aws.Int32(101)})
			return err
		}, "ValidationError"},
		{"next token not issued", func() error {
			_, err := f.DescribeAlarmHistory(ctx, &cloudwatch.DescribeAlarmHistoryInput{NextToken: aws.String("made-up")})
			return err
		}, "InvalidNextToken"},
	} {
		if got := code(c.call()); got != c.want {
			t.Errorf("%s: error %q, want %s", c.name, got, c.want)
		}
	}
	// no change, no action: SetAlarmState to the current state records nothing
	if _, err := f.SetAlarmState(ctx, &cloudwatch.SetAlarmStateInput{AlarmName: aws.String("DdbOutbox-C"), StateValue: cwtypes.StateValueOk, StateReason: aws.String("same")}); err != nil {
		t.Fatal(err)
	}
	if h := f.History(); len(h) != 0 {
		t.Errorf("SetAlarmState to the current state recorded %d history items", len(h))
	}
	// a change runs the new state's actions, then the alarm returns to its
	// actual state and runs the OK actions
	if _, err := f.SetAlarmState(ctx, &cloudwatch.SetAlarmStateInput{AlarmName: aws.String("DdbOutbox-C"), StateValue: cwtypes.StateValueAlarm, StateReason: aws.String("test")}); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, it := range f.History() {
		kinds = append(kinds, string(it.HistoryItemType))
	}
	if want := "[StateUpdate Action StateUpdate Action]"; fmt.Sprint(kinds) != want || f.State("DdbOutbox-C") != cwtypes.StateValueOk {
		t.Errorf("history %v, state %s; want %s and back to OK", kinds, f.State("DdbOutbox-C"), want)
	}
}
