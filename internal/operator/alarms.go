package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
)

// AlarmsAPI is the CloudWatch subset CheckAlarmNotifies calls, with the
// SDK's exact signatures: *cloudwatch.Client implements it. (The local
// stack serves no CloudWatch: make dev has no alarms.)
type AlarmsAPI interface {
	DescribeAlarms(ctx context.Context, params *cloudwatch.DescribeAlarmsInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.DescribeAlarmsOutput, error)
	SetAlarmState(ctx context.Context, params *cloudwatch.SetAlarmStateInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.SetAlarmStateOutput, error)
	DescribeAlarmHistory(ctx context.Context, params *cloudwatch.DescribeAlarmHistoryInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.DescribeAlarmHistoryOutput, error)
}

// Alarm check defaults.
const (
	// DefaultAlarmCheckTimeout bounds how long CheckAlarmNotifies waits for
	// the SNS action's result in the alarm's history.
	DefaultAlarmCheckTimeout = 2 * time.Minute
	// DefaultAlarmCheckPoll is how often it reads the history.
	DefaultAlarmCheckPoll = 5 * time.Second
	// MaxStateReasonLength is SetAlarmState's limit on StateReason
	// (characters; API_SetAlarmState).
	MaxStateReasonLength = 1023
	// historySkew is how far before the check's start the history is
	// read, for a clock that is behind CloudWatch's.
	historySkew = 5 * time.Minute
)

// Action states in an Action history item's HistoryData ("actionState").
const (
	ActionSucceeded = "Succeeded"
	ActionFailed    = "Failed"
)

// ErrAlarmNotNotified is wrapped by CheckAlarmNotifies's error when an SNS
// action of the alarm failed or its result did not appear in time.
var ErrAlarmNotNotified = errors.New("operator: the alarm's SNS action did not succeed")

// ErrNoAlarmToCheck is wrapped when no alarm fits the options.
var ErrNoAlarmToCheck = errors.New("operator: no alarm to check")

// AlarmCheckOptions say which alarm CheckAlarmNotifies fires. Exactly one
// of Name and Prefix.
type AlarmCheckOptions struct {
	// Name is the alarm's exact name. Its state must be OK or
	// INSUFFICIENT_DATA: SetAlarmState invokes the actions only when the
	// state changes.
	Name string
	// Prefix picks, among the metric alarms whose name starts with it (a
	// stack's alarms start with its name), the first by name that is in
	// state OK, has its actions enabled and an SNS topic among its ALARM
	// actions.
	Prefix string
	// Reason is the StateReason of the test (at most
	// MaxStateReasonLength characters); default "outboxctl alarms test at
	// <RFC 3339 time>". It tells the test's state change apart in the
	// history, so it should be unique.
	Reason string
	// Timeout bounds the wait for the action's result (default
	// DefaultAlarmCheckTimeout); Poll is the history read interval
	// (default DefaultAlarmCheckPoll).
	Timeout, Poll time.Duration
	// Now and Sleep stand in for the clock in tests (default time.Now and
	// a context-aware sleep).
	Now   func() time.Time
	Sleep func(context.Context, time.Duration) error
}

// ActionOutcome is what the alarm's history says of one SNS action.
type ActionOutcome struct {
	// Topic is the SNS topic ARN (one of the alarm's AlarmActions).
	Topic string
	// State is ActionSucceeded, ActionFailed, or "" when no result
	// appeared before the timeout.
	State string
	// Summary is the history item's HistorySummary ("Successfully
	// executed action arn:aws:sns:…" or "Failed to execute action …").
	Summary string
	// Error is the failure text (HistoryData "error", else Summary).
	Error string
	// At is the history item's time.
	At time.Time
}

// AlarmCheck is the result of CheckAlarmNotifies.
type AlarmCheck struct {
	// Alarm is the alarm's name; Reason the StateReason the test set.
	Alarm, Reason string
	// Actions has one outcome per SNS topic among the alarm's ALARM
	// actions.
	Actions []ActionOutcome
	// ResetErr is the error of setting the alarm back to OK (nil when it
	// was set back).
	ResetErr error
}

// CheckAlarmNotifies proves, on a deployed stack, that an alarm's ALARM
// action reaches its SNS topic: it picks the alarm (DescribeAlarms:
// opts.Name, or the first fitting alarm with opts.Prefix), sets it to
// ALARM with opts.Reason (SetAlarmState, "for testing purposes": the
// action of the new state is invoked when the state changes, and a metric
// alarm returns to its actual state within seconds; API_SetAlarmState),
// then reads the alarm's history (DescribeAlarmHistory, paged, from just
// before the start) until, for every SNS topic of its ALARM actions, the
// Action item of that state change says Succeeded or Failed, or
// opts.Timeout passes. The Action item is the first for the topic after
// the StateUpdate item whose new state is ALARM with opts.Reason (matched
// by its stateUpdateTimestamp when the item carries one). Whatever
// happens, it then sets the alarm to OK (the OK action, which the stack's
// alarms have too, may notify once more). It returns the outcomes, and an
// error wrapping ErrAlarmNotNotified when an action failed or had no
// result in time, ErrNoAlarmToCheck when no alarm fits, or the API's error.
// Only metric alarms are considered: a composite alarm does not return to
// its actual state by itself.
func CheckAlarmNotifies(ctx context.Context, api AlarmsAPI, opts AlarmCheckOptions) (res AlarmCheck, err error) {
	if (opts.Name == "") == (opts.Prefix == "") {
		return AlarmCheck{}, fmt.Errorf("%w: give an alarm name or a name prefix, not both", ErrNoAlarmToCheck)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Sleep == nil {
		opts.Sleep = sleepCtx
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultAlarmCheckTimeout
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultAlarmCheckPoll
	}
	start := opts.Now()
	if opts.Reason == "" {
		opts.Reason = "outboxctl alarms test at " + start.UTC().Format(time.RFC3339Nano)
	}
	if len([]rune(opts.Reason)) > MaxStateReasonLength {
		return AlarmCheck{}, fmt.Errorf("alarms test: the reason has %d characters, SetAlarmState takes at most %d", len([]rune(opts.Reason)), MaxStateReasonLength)
	}
	alarm, err := pickAlarm(ctx, api, opts)
	if err != nil {
		return AlarmCheck{}, err
	}
	res = AlarmCheck{Alarm: aws.ToString(alarm.AlarmName), Reason: opts.Reason}
	for _, a := range alarm.AlarmActions {
		if isSNSArn(a) {
			res.Actions = append(res.Actions, ActionOutcome{Topic: a})
		}
	}
	if _, err := api.SetAlarmState(ctx, &cloudwatch.SetAlarmStateInput{
		AlarmName: alarm.AlarmName, StateValue: cwtypes.StateValueAlarm, StateReason: aws.String(opts.Reason),
	}); err != nil {
		return res, fmt.Errorf("alarms test: set %s to ALARM: %w", res.Alarm, err)
	}
	defer func() {
		// set back even when ctx ended (the wait timed out)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, res.ResetErr = api.SetAlarmState(rctx, &cloudwatch.SetAlarmStateInput{
			AlarmName: alarm.AlarmName, StateValue: cwtypes.StateValueOk,
			StateReason: aws.String("outboxctl alarms test: set back to OK after the test"),
		})
	}()
	deadline := start.Add(opts.Timeout)
	for {
		items, err := alarmHistory(ctx, api, res.Alarm, start.Add(-historySkew))
		if err != nil {
			return res, fmt.Errorf("alarms test: history of %s: %w", res.Alarm, err)
		}
		if matchActions(items, opts.Reason, res.Actions) {
			break
		}
		if !opts.Now().Before(deadline) {
			break
		}
		if err := opts.Sleep(ctx, opts.Poll); err != nil {
			break
		}
	}
	var bad []string
	for _, a := range res.Actions {
		switch a.State {
		case ActionSucceeded:
		case ActionFailed:
			bad = append(bad, fmt.Sprintf("%s: %s", a.Topic, a.Error))
		default:
			bad = append(bad, fmt.Sprintf("%s: no result in the alarm's history within %s", a.Topic, opts.Timeout))
		}
	}
	if len(bad) > 0 {
		return res, fmt.Errorf("%w: alarm %s: %s", ErrAlarmNotNotified, res.Alarm, strings.Join(bad, "; "))
	}
	return res, nil
}

// pickAlarm returns the metric alarm to fire: opts.Name's, which must be
// in OK or INSUFFICIENT_DATA, with actions enabled and an SNS ALARM action;
// or the first such alarm in OK by name among opts.Prefix's.
func pickAlarm(ctx context.Context, api AlarmsAPI, opts AlarmCheckOptions) (cwtypes.MetricAlarm, error) {
	in := &cloudwatch.DescribeAlarmsInput{AlarmTypes: []cwtypes.AlarmType{cwtypes.AlarmTypeMetricAlarm}}
	if opts.Name != "" {
		in.AlarmNames = []string{opts.Name}
	} else {
		in.AlarmNamePrefix = aws.String(opts.Prefix)
	}
	var alarms []cwtypes.MetricAlarm
	for {
		out, err := api.DescribeAlarms(ctx, in)
		if err != nil {
			return cwtypes.MetricAlarm{}, fmt.Errorf("alarms test: DescribeAlarms: %w", err)
		}
		alarms = append(alarms, out.MetricAlarms...)
		if aws.ToString(out.NextToken) == "" {
			break
		}
		in.NextToken = out.NextToken
	}
	slices.SortFunc(alarms, func(a, b cwtypes.MetricAlarm) int {
		return strings.Compare(aws.ToString(a.AlarmName), aws.ToString(b.AlarmName))
	})
	unfit := func(a cwtypes.MetricAlarm) string {
		switch {
		case !aws.ToBool(a.ActionsEnabled):
			return "its actions are disabled"
		case !slices.ContainsFunc(a.AlarmActions, isSNSArn):
			return "no SNS topic among its ALARM actions"
		case a.StateValue == cwtypes.StateValueAlarm:
			return "it is in ALARM already (SetAlarmState invokes the actions only when the state changes; pick an alarm in OK, or wait)"
		}
		return ""
	}
	if opts.Name != "" {
		if len(alarms) == 0 {
			return cwtypes.MetricAlarm{}, fmt.Errorf("%w: no metric alarm named %q", ErrNoAlarmToCheck, opts.Name)
		}
		if why := unfit(alarms[0]); why != "" {
			return cwtypes.MetricAlarm{}, fmt.Errorf("%w: alarm %s: %s", ErrNoAlarmToCheck, opts.Name, why)
		}
		return alarms[0], nil
	}
	reasons := map[string]int{}
	for _, a := range alarms {
		why := unfit(a)
		if why == "" && a.StateValue == cwtypes.StateValueOk {
			return a, nil
		}
		if why == "" {
			why = "not in OK"
		}
		reasons[why]++
	}
	if len(alarms) == 0 {
		return cwtypes.MetricAlarm{}, fmt.Errorf("%w: no metric alarm whose name starts with %q (a stack's alarms start with its name, e.g. DdbOutbox)", ErrNoAlarmToCheck, opts.Prefix)
	}
	var parts []string
	for _, why := range slices.Sorted(maps.Keys(reasons)) {
		parts = append(parts, fmt.Sprintf("%d: %s", reasons[why], why))
	}
	return cwtypes.MetricAlarm{}, fmt.Errorf("%w: none of the %d alarms starting with %q fits (%s)", ErrNoAlarmToCheck, len(alarms), opts.Prefix, strings.Join(parts, "; "))
}

// alarmHistory returns every history item of alarm from since on, oldest
// first (all pages).
func alarmHistory(ctx context.Context, api AlarmsAPI, alarm string, since time.Time) ([]cwtypes.AlarmHistoryItem, error) {
	in := &cloudwatch.DescribeAlarmHistoryInput{
		AlarmName: aws.String(alarm), StartDate: aws.Time(since),
		ScanBy: cwtypes.ScanByTimestampAscending, MaxRecords: aws.Int32(100),
	}
	var items []cwtypes.AlarmHistoryItem
	for {
		out, err := api.DescribeAlarmHistory(ctx, in)
		if err != nil {
			return nil, err
		}
		items = append(items, out.AlarmHistoryItems...)
		if aws.ToString(out.NextToken) == "" {
			return items, nil
		}
		in.NextToken = out.NextToken
	}
}

// stateUpdateData is the part of a StateUpdate item's HistoryData used here.
type stateUpdateData struct {
	NewState struct {
		StateValue  string `json:"stateValue"`
		StateReason string `json:"stateReason"`
	} `json:"newState"`
}

// actionData is the part of an Action item's HistoryData used here (AWS
// shows "actionState", "notificationResource", "stateUpdateTimestamp" in
// epoch milliseconds and "error"; ❓ not documented field by field in the
// API reference, which calls HistoryData "machine-readable data about the
// alarm in JSON format").
type actionData struct {
	ActionState          string `json:"actionState"`
	NotificationResource string `json:"notificationResource"`
	StateUpdateTimestamp int64  `json:"stateUpdateTimestamp"`
	Error                string `json:"error"`
}

// matchActions fills each outcome of actions from items (oldest first):
// the first Action item for its topic after the StateUpdate to ALARM with
// reason. It reports whether every outcome has a result.
func matchActions(items []cwtypes.AlarmHistoryItem, reason string, actions []ActionOutcome) bool {
	var update time.Time
	found := false
	for _, it := range items {
		if it.HistoryItemType != cwtypes.HistoryItemTypeStateUpdate {
			continue
		}
		var d stateUpdateData
		if json.Unmarshal([]byte(aws.ToString(it.HistoryData)), &d) == nil &&
			d.NewState.StateValue == string(cwtypes.StateValueAlarm) && d.NewState.StateReason == reason {
			update, found = aws.ToTime(it.Timestamp), true
			break
		}
	}
	if !found {
		return false
	}
	done := true
	for i := range actions {
		a := &actions[i]
		for _, it := range items {
			if it.HistoryItemType != cwtypes.HistoryItemTypeAction || aws.ToTime(it.Timestamp).Before(update) {
				continue
			}
			var d actionData
			_ = json.Unmarshal([]byte(aws.ToString(it.HistoryData)), &d)
			summary := aws.ToString(it.HistorySummary)
			if d.NotificationResource != a.Topic && !strings.Contains(summary, a.Topic) {
				continue
			}
			if d.StateUpdateTimestamp != 0 && d.StateUpdateTimestamp != update.UnixMilli() {
				continue // the action of another state change
			}
			a.Summary, a.At = summary, aws.ToTime(it.Timestamp)
			switch {
			case d.ActionState == ActionSucceeded || d.ActionState == "" && strings.HasPrefix(summary, "Successfully executed action"):
				a.State = ActionSucceeded
			default:
				a.State, a.Error = ActionFailed, d.Error
				if a.Error == "" {
					a.Error = summary
				}
			}
			break
		}
		if a.State == "" {
			done = false
		}
	}
	return done
}

// isSNSArn reports whether arn is an SNS topic ARN.
func isSNSArn(arn string) bool {
	parts := strings.SplitN(arn, ":", 4)
	return len(parts) == 4 && parts[0] == "arn" && parts[2] == "sns"
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
