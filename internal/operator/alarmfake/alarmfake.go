// Package alarmfake is an in-memory stand-in for the three CloudWatch
// operations outboxctl alarms test calls (DescribeAlarms, SetAlarmState,
// DescribeAlarmHistory), with the SDK's exact signatures, for tests. It
// keeps AWS's documented rules rather than being kinder:
//
//   - SetAlarmState (API_SetAlarmState): AlarmName 1..255 characters,
//     StateValue OK | ALARM | INSUFFICIENT_DATA, StateReason required and at
//     most 1,023 characters, StateReasonData (when given) JSON of at most
//     4,000 characters (InvalidFormat); an unknown alarm is ResourceNotFound.
//     The actions of the new state run only when the state changes, and only
//     with ActionsEnabled. A metric alarm returns to its actual state "often
//     within seconds": the fake records that return (a StateUpdate and the
//     actions of the actual state) one second later, so a caller sees the
//     history AWS would show, the OK notification included.
//   - Each action on an SNS topic is recorded as an Action history item:
//     HistorySummary "Successfully executed action <arn>" or "Failed to
//     execute action <arn>. Received error: …" (as AWS re:Post shows it),
//     HistoryData {"actionState", "notificationResource",
//     "stateUpdateTimestamp" (epoch ms of the state update), "error"}; a
//     topic the fake is told refuses publishing fails with the AWS
//     authorization message.
//   - DescribeAlarmHistory (API_DescribeAlarmHistory): HistoryItemType one of
//     the SDK's values, MaxRecords 1..100 (default 100), ScanBy
//     TimestampDescending (the default) or TimestampAscending, StartDate and
//     EndDate inclusive, NextToken only as issued (else InvalidNextToken);
//     AlarmTypes default metric alarms only.
//   - History items appear Fake.VisibleAfter after their time.
//   - DescribeAlarms (API_DescribeAlarms): AlarmNamePrefix and AlarmNames
//     together are refused, AlarmNames at most 100, MaxRecords 1..100
//     (default 50), NextToken only as issued; AlarmTypes default metric
//     alarms only (the fake holds metric alarms only).
package alarmfake

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go"
)

// Alarm is a metric alarm the fake holds.
type Alarm struct {
	Name string
	// Actual is the state the alarm's metric puts it in (OK by default);
	// after a SetAlarmState to another state the alarm returns to it.
	Actual types.StateValue
	// AlarmActions, OKActions and InsufficientDataActions are action ARNs.
	AlarmActions, OKActions, InsufficientDataActions []string
	// ActionsDisabled turns ActionsEnabled off.
	ActionsDisabled bool
}

// Fake is the in-memory CloudWatch. The zero value is not usable: New.
type Fake struct {
	mu      sync.Mutex
	now     func() time.Time
	alarms  map[string]*alarm
	refuse  map[string]bool // topic ARN -> publishing refused
	history []types.AlarmHistoryItem
	tokens  map[string]int // issued NextToken -> offset
	// Calls counts calls by operation name.
	Calls map[string]int
	// Sets records every accepted SetAlarmState request (name, state,
	// reason), in order.
	Sets []cloudwatch.SetAlarmStateInput
	// VisibleAfter delays history items: DescribeAlarmHistory returns an
	// item only once the clock is VisibleAfter past its time (AWS records
	// an action's result after the state change, not with it).
	VisibleAfter time.Duration
}

type alarm struct {
	Alarm
	state types.StateValue
}

// New returns a fake holding alarms (in region us-east-1, account
// 123456789012), with the clock now.
func New(now func() time.Time, alarms ...Alarm) *Fake {
	f := &Fake{now: now, alarms: map[string]*alarm{}, refuse: map[string]bool{}, tokens: map[string]int{}, Calls: map[string]int{}}
	for _, a := range alarms {
		if a.Actual == "" {
			a.Actual = types.StateValueOk
		}
		f.alarms[a.Name] = &alarm{Alarm: a, state: a.Actual}
	}
	return f
}

// RefusePublish makes every action on topic fail, as a topic policy without
// an Allow for cloudwatch.amazonaws.com does.
func (f *Fake) RefusePublish(topic string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse[topic] = true
}

// AllowPublish undoes RefusePublish (a topic policy fixed).
func (f *Fake) AllowPublish(topic string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.refuse, topic)
}

// State returns the alarm's current state.
func (f *Fake) State(name string) types.StateValue {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.alarms[name].state
}

// History returns a copy of every history item, oldest first.
func (f *Fake) History() []types.AlarmHistoryItem {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.history)
}

func validation(msg string, args ...any) error {
	return &smithy.GenericAPIError{Code: "ValidationError", Message: fmt.Sprintf(msg, args...), Fault: smithy.FaultClient}
}

const (
	account = "123456789012"
	region  = "us-east-1"
)

func (f *Fake) arn(name string) string {
	return "arn:aws:cloudwatch:" + region + ":" + account + ":alarm:" + name
}

// DescribeAlarms implements operator.AlarmsAPI.
func (f *Fake) DescribeAlarms(_ context.Context, in *cloudwatch.DescribeAlarmsInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.DescribeAlarmsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Calls["DescribeAlarms"]++
	if in.AlarmNamePrefix != nil && len(in.AlarmNames) > 0 {
		return nil, &smithy.GenericAPIError{Code: "InvalidParameterCombination", Message: "AlarmNamePrefix and AlarmNames cannot be specified together", Fault: smithy.FaultClient}
	}
	if len(in.AlarmNames) > 100 {
		return nil, validation("AlarmNames: at most 100 names")
	}
	limit, err := maxRecords(in.MaxRecords, 50)
	if err != nil {
		return nil, err
	}
	if len(in.AlarmTypes) > 0 && !slices.Contains(in.AlarmTypes, types.AlarmTypeMetricAlarm) {
		return &cloudwatch.DescribeAlarmsOutput{}, nil
	}
	names := make([]string, 0, len(f.alarms))
	for n := range f.alarms {
		switch {
		case len(in.AlarmNames) > 0 && !slices.Contains(in.AlarmNames, n):
		case in.AlarmNamePrefix != nil && !strings.HasPrefix(n, *in.AlarmNamePrefix):
		case in.StateValue != "" && f.alarms[n].state != in.StateValue:
		default:
			names = append(names, n)
		}
	}
	slices.Sort(names)
	off, err := f.offset(in.NextToken)
	if err != nil {
		return nil, err
	}
	out := &cloudwatch.DescribeAlarmsOutput{}
	for _, n := range names[min(off, len(names)):min(off+limit, len(names))] {
		a := f.alarms[n]
		out.MetricAlarms = append(out.MetricAlarms, types.MetricAlarm{
			AlarmName: aws.String(n), AlarmArn: aws.String(f.arn(n)), StateValue: a.state,
			ActionsEnabled: aws.Bool(!a.ActionsDisabled), AlarmActions: slices.Clone(a.AlarmActions),
			OKActions: slices.Clone(a.OKActions), InsufficientDataActions: slices.Clone(a.InsufficientDataActions),
		})
	}
	if off+limit < len(names) {
		out.NextToken = aws.String(f.issue(off + limit))
	}
	return out, nil
}

// SetAlarmState implements operator.AlarmsAPI.
func (f *Fake) SetAlarmState(_ context.Context, in *cloudwatch.SetAlarmStateInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.SetAlarmStateOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Calls["SetAlarmState"]++
	name := aws.ToString(in.AlarmName)
	if n := len([]rune(name)); n < 1 || n > 255 {
		return nil, validation("AlarmName: length %d, want 1..255", n)
	}
	if !slices.Contains(types.StateValue("").Values(), in.StateValue) {
		return nil, validation("StateValue %q: want OK, ALARM or INSUFFICIENT_DATA", in.StateValue)
	}
	if in.StateReason == nil {
		return nil, validation("StateReason is required")
	}
	if n := len([]rune(*in.StateReason)); n > 1023 {
		return nil, validation("StateReason: length %d, want at most 1023", n)
	}
	if d := in.StateReasonData; d != nil && (len([]rune(*d)) > 4000 || !json.Valid([]byte(*d))) {
		return nil, &types.InvalidFormatFault{Message: aws.String("StateReasonData is not JSON of at most 4000 characters")}
	}
	a, ok := f.alarms[name]
	if !ok {
		return nil, &types.ResourceNotFound{Message: aws.String("Alarm " + name + " not found")}
	}
	f.Sets = append(f.Sets, cloudwatch.SetAlarmStateInput{AlarmName: in.AlarmName, StateValue: in.StateValue, StateReason: in.StateReason})
	t := f.now()
	if !f.transition(a, in.StateValue, *in.StateReason, t) {
		return &cloudwatch.SetAlarmStateOutput{}, nil
	}
	// a metric alarm returns to its actual state within seconds
	f.transition(a, a.Actual, "Threshold Crossed: the alarm's metric evaluated again", t.Add(time.Second))
	return &cloudwatch.SetAlarmStateOutput{}, nil
}

// transition moves a to state at t, recording the StateUpdate item and the
// new state's actions; it reports false (and records nothing) when the
// state does not change.
func (f *Fake) transition(a *alarm, state types.StateValue, reason string, t time.Time) bool {
	if a.state == state {
		return false
	}
	old := a.state
	a.state = state
	data, _ := json.Marshal(map[string]any{
		"version":  "1.0",
		"oldState": map[string]any{"stateValue": old},
		"newState": map[string]any{"stateValue": state, "stateReason": reason},
	})
	f.history = append(f.history, types.AlarmHistoryItem{
		AlarmName: aws.String(a.Name), AlarmType: types.AlarmTypeMetricAlarm, Timestamp: aws.Time(t),
		HistoryItemType: types.HistoryItemTypeStateUpdate,
		HistorySummary:  aws.String(fmt.Sprintf("Alarm updated from %s to %s", old, state)),
		HistoryData:     aws.String(string(data)),
	})
	if a.ActionsDisabled {
		return true
	}
	var actions []string
	switch state {
	case types.StateValueAlarm:
		actions = a.AlarmActions
	case types.StateValueOk:
		actions = a.OKActions
	case types.StateValueInsufficientData:
		actions = a.InsufficientDataActions
	}
	for i, target := range actions {
		d := map[string]any{"actionState": "Succeeded", "notificationResource": target, "stateUpdateTimestamp": t.UnixMilli(), "error": nil}
		summary := "Successfully executed action " + target
		if f.refuse[target] {
			msg := fmt.Sprintf("Resource: %s is not authorized to perform: SNS:Publish on resource: %s because no resource-based policy allows the SNS:Publish action", f.arn(a.Name), target)
			d["actionState"], d["error"] = "Failed", msg
			summary = fmt.Sprintf("Failed to execute action %s. Received error: %q", target, msg)
		}
		raw, _ := json.Marshal(d)
		f.history = append(f.history, types.AlarmHistoryItem{
			AlarmName: aws.String(a.Name), AlarmType: types.AlarmTypeMetricAlarm,
			Timestamp:       aws.Time(t.Add(time.Duration(100*(i+1)) * time.Millisecond)),
			HistoryItemType: types.HistoryItemTypeAction, HistorySummary: aws.String(summary), HistoryData: aws.String(string(raw)),
		})
	}
	return true
}

// DescribeAlarmHistory implements operator.AlarmsAPI.
func (f *Fake) DescribeAlarmHistory(_ context.Context, in *cloudwatch.DescribeAlarmHistoryInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.DescribeAlarmHistoryOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Calls["DescribeAlarmHistory"]++
	if in.HistoryItemType != "" && !slices.Contains(types.HistoryItemType("").Values(), in.HistoryItemType) {
		return nil, validation("HistoryItemType %q is not one of %v", in.HistoryItemType, types.HistoryItemType("").Values())
	}
	if in.ScanBy != "" && !slices.Contains(types.ScanBy("").Values(), in.ScanBy) {
		return nil, validation("ScanBy %q", in.ScanBy)
	}
	if n := len(aws.ToString(in.AlarmName)); in.AlarmName != nil && (n < 1 || n > 255) {
		return nil, validation("AlarmName: length %d, want 1..255", n)
	}
	limit, err := maxRecords(in.MaxRecords, 100)
	if err != nil {
		return nil, err
	}
	if len(in.AlarmTypes) > 0 && !slices.Contains(in.AlarmTypes, types.AlarmTypeMetricAlarm) {
		return &cloudwatch.DescribeAlarmHistoryOutput{}, nil
	}
	var items []types.AlarmHistoryItem
	for _, it := range f.history {
		t := aws.ToTime(it.Timestamp)
		switch {
		case in.AlarmName != nil && aws.ToString(it.AlarmName) != *in.AlarmName:
		case in.HistoryItemType != "" && it.HistoryItemType != in.HistoryItemType:
		case in.StartDate != nil && t.Before(*in.StartDate):
		case in.EndDate != nil && t.After(*in.EndDate):
		case f.now().Before(t.Add(f.VisibleAfter)):
		default:
			items = append(items, it)
		}
	}
	slices.SortStableFunc(items, func(a, b types.AlarmHistoryItem) int { return aws.ToTime(a.Timestamp).Compare(aws.ToTime(b.Timestamp)) })
	if in.ScanBy != types.ScanByTimestampAscending {
		slices.Reverse(items)
	}
	off, err := f.offset(in.NextToken)
	if err != nil {
		return nil, err
	}
	out := &cloudwatch.DescribeAlarmHistoryOutput{AlarmHistoryItems: slices.Clone(items[min(off, len(items)):min(off+limit, len(items))])}
	if off+limit < len(items) {
		out.NextToken = aws.String(f.issue(off + limit))
	}
	return out, nil
}

// maxRecords returns MaxRecords (1..100) or def when not given.
func maxRecords(v *int32, def int) (int, error) {
	if v == nil {
		return def, nil
	}
	if *v < 1 || *v > 100 {
		return 0, validation("MaxRecords %d is outside 1..100", *v)
	}
	return int(*v), nil
}

// offset returns the offset of an issued NextToken (0 without one), or
// InvalidNextToken.
func (f *Fake) offset(token *string) (int, error) {
	if token == nil {
		return 0, nil
	}
	off, ok := f.tokens[*token]
	if !ok {
		return 0, &types.InvalidNextToken{Message: aws.String("The next token specified is invalid")}
	}
	return off, nil
}

// issue returns a new NextToken for offset off.
func (f *Fake) issue(off int) string {
	tok := "t" + strconv.Itoa(len(f.tokens)+1)
	f.tokens[tok] = off
	return tok
}
