package operator

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"
)

// ReplayAPI is the EventBridge subset Backfill and Replays call, with the
// SDK's signatures: *eventbridge.Client and the local bus (*localrt.Bus,
// or through the local stack's AWS front) implement it.
type ReplayAPI interface {
	DescribeArchive(ctx context.Context, params *eventbridge.DescribeArchiveInput, optFns ...func(*eventbridge.Options)) (*eventbridge.DescribeArchiveOutput, error)
	StartReplay(ctx context.Context, params *eventbridge.StartReplayInput, optFns ...func(*eventbridge.Options)) (*eventbridge.StartReplayOutput, error)
	DescribeReplay(ctx context.Context, params *eventbridge.DescribeReplayInput, optFns ...func(*eventbridge.Options)) (*eventbridge.DescribeReplayOutput, error)
	ListReplays(ctx context.Context, params *eventbridge.ListReplaysInput, optFns ...func(*eventbridge.Options)) (*eventbridge.ListReplaysOutput, error)
	DescribeRule(ctx context.Context, params *eventbridge.DescribeRuleInput, optFns ...func(*eventbridge.Options)) (*eventbridge.DescribeRuleOutput, error)
	ListRules(ctx context.Context, params *eventbridge.ListRulesInput, optFns ...func(*eventbridge.Options)) (*eventbridge.ListRulesOutput, error)
}

// ResolveRule returns the ARN and name of rule (a name on bus, the
// account's default bus when bus is empty, or an ARN, returned as is).
// When DescribeRule finds no such rule the error lists the rules the bus
// has (ListRules, first page), so the operator can pick the consumer's.
func ResolveRule(ctx context.Context, api ReplayAPI, rule, bus string) (arn, name string, err error) {
	if strings.HasPrefix(rule, "arn:") {
		return rule, rule[strings.LastIndex(rule, "/")+1:], nil
	}
	r, err := api.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(rule), EventBusName: nilIfEmpty(bus)})
	if err == nil {
		return aws.ToString(r.Arn), rule, nil
	}
	where := "-bus " + bus
	if bus == "" {
		where = "no -bus given, so it was looked up on the account's default event bus; name the outbox's bus with -bus"
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "ResourceNotFoundException" {
		if l, lerr := api.ListRules(ctx, &eventbridge.ListRulesInput{EventBusName: nilIfEmpty(bus), Limit: aws.Int32(100)}); lerr == nil {
			names := make([]string, 0, len(l.Rules))
			for _, r := range l.Rules {
				names = append(names, aws.ToString(r.Name))
			}
			return "", "", fmt.Errorf("rule %s (%s): %w; the bus's rules: %s", rule, where, err, strings.Join(names, ", "))
		}
	}
	return "", "", fmt.Errorf("rule %s (%s): %w", rule, where, err)
}

// Backfill defaults.
const (
	// DefaultArchiveSettle is how long Backfill lets the end of its range
	// age before it starts the replay: EventBridge may archive an event
	// late and advises delaying a replay by 10 minutes (eb-archive).
	DefaultArchiveSettle = 10 * time.Minute
	// DefaultReplayPoll is how often Backfill asks DescribeReplay.
	DefaultReplayPoll = 5 * time.Second
)

// BackfillOptions say what to replay to which consumer.
type BackfillOptions struct {
	// Archive is the archive's name or ARN. Required.
	Archive string
	// Rule is the consumer's rule: its ARN, or its name on Bus. Only this
	// rule receives the replayed events (StartReplay's FilterArns), so the
	// other consumers see nothing. Required.
	Rule string
	// Bus is the event bus name of Rule when Rule is a name.
	Bus string
	// From and To bound the events replayed by their own time, [From, To).
	// From zero: the archive's creation time (everything it holds); To
	// zero: now.
	From, To time.Time
	// Settle is how long after To the replay starts at the earliest
	// (events reach an archive with a delay). Default DefaultArchiveSettle;
	// negative: start at once.
	Settle time.Duration
	// Name is the replay name (1..64 of [.\-_A-Za-z0-9]); default
	// "backfill-<rule name>-<UTC yyyymmddThhmmss>".
	Name string
	// Poll is the DescribeReplay interval (default DefaultReplayPoll).
	Poll time.Duration
	// Now returns the current time (default time.Now).
	Now func() time.Time
}

// ReplayProgress is a replay's state as DescribeReplay reports it, with
// how far through its range it is.
type ReplayProgress struct {
	Name, State, Reason string
	From, To            time.Time
	// LastReplayed is the time of the last event replayed (zero: none yet).
	LastReplayed time.Time
	// Percent is LastReplayed's position in [From, To), 0..100 (100 once
	// COMPLETED).
	Percent float64
	// Started and Ended are when the replay ran (Ended zero: running).
	Started, Ended time.Time
}

// ErrReplayNotCompleted: the replay ended CANCELLED or FAILED.
var ErrReplayNotCompleted = errors.New("replay did not complete")

var nameUnsafe = regexp.MustCompile(`[^.\-_A-Za-z0-9]+`)

// Backfill replays an archive's events of [From, To) to one consumer's
// rule and waits until the replay ends, calling progress (when non-nil)
// with a note while it waits for the archive to settle and on every
// DescribeReplay. It returns the final progress, and an error wrapping
// ErrReplayNotCompleted when the replay was cancelled or failed, or the
// error of an EventBridge call (an unknown archive or rule:
// ResourceNotFoundException; without Bus the rule is looked up on the
// default bus and the error says so), or an error before any call for a To
// later than Now (a replay covers events already archived). The consumer applies the events through
// its queue as any delivery: the dedup markers absorb those it already
// applied (live traffic overlapping the range), and an ordered consumer's
// resequencer puts the replay's arbitrary order right.
func Backfill(ctx context.Context, api ReplayAPI, o BackfillOptions, progress func(ReplayProgress, string)) (ReplayProgress, error) {
	if o.Archive == "" || o.Rule == "" {
		return ReplayProgress{}, errors.New("backfill: an archive and a rule are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Poll <= 0 {
		o.Poll = DefaultReplayPoll
	}
	if o.Settle == 0 {
		o.Settle = DefaultArchiveSettle
	}
	note := func(p ReplayProgress, msg string) {
		if progress != nil {
			progress(p, msg)
		}
	}
	archiveName := archiveNameOf(o.Archive)
	a, err := api.DescribeArchive(ctx, &eventbridge.DescribeArchiveInput{ArchiveName: aws.String(archiveName)})
	if err != nil {
		return ReplayProgress{}, fmt.Errorf("backfill: archive %s: %w", archiveName, err)
	}
	ruleARN, ruleName, err := ResolveRule(ctx, api, o.Rule, o.Bus)
	if err != nil {
		return ReplayProgress{}, err
	}
	if o.From.IsZero() {
		o.From = aws.ToTime(a.CreationTime).Add(-time.Minute) // an event's time may precede its arrival
	}
	if o.To.IsZero() {
		o.To = o.Now()
	} else if now := o.Now(); o.To.After(now) {
		return ReplayProgress{}, fmt.Errorf("backfill: -to %s is in the future (now %s): a replay covers events already archived; leave -to unset to replay up to now",
			o.To.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	o.From, o.To = o.From.UTC().Truncate(time.Second), o.To.UTC().Truncate(time.Second).Add(time.Second)
	if !o.From.Before(o.To) {
		return ReplayProgress{}, fmt.Errorf("backfill: -from %s is not before -to %s", o.From.Format(time.RFC3339), o.To.Format(time.RFC3339))
	}
	if o.Name == "" {
		o.Name = "backfill-" + nameUnsafe.ReplaceAllString(ruleName, "-")
		if len(o.Name) > 48 {
			o.Name = o.Name[:48]
		}
		o.Name += "-" + o.Now().UTC().Format("20060102T150405")
	}
	p := ReplayProgress{Name: o.Name, From: o.From, To: o.To}
	if wait := o.To.Add(o.Settle).Sub(o.Now()); o.Settle > 0 && wait > 0 {
		note(p, fmt.Sprintf("waiting %s for the archive to settle (EventBridge archives an event with a delay and advises replaying 10 minutes after it; -settle)", wait.Round(time.Second)))
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(wait):
		}
	}
	if _, err := api.StartReplay(ctx, &eventbridge.StartReplayInput{
		ReplayName: aws.String(o.Name), EventSourceArn: a.ArchiveArn, EventStartTime: aws.Time(o.From), EventEndTime: aws.Time(o.To),
		Description: aws.String("outboxctl backfill of rule " + ruleName),
		Destination: &ebtypes.ReplayDestination{Arn: a.EventSourceArn, FilterArns: []string{ruleARN}},
	}); err != nil {
		return p, fmt.Errorf("backfill: start replay %s: %w", o.Name, err)
	}
	for {
		d, err := api.DescribeReplay(ctx, &eventbridge.DescribeReplayInput{ReplayName: aws.String(o.Name)})
		if err != nil {
			return p, fmt.Errorf("backfill: describe replay %s: %w", o.Name, err)
		}
		p = progressOf(d)
		note(p, "")
		switch d.State {
		case ebtypes.ReplayStateCompleted:
			return p, nil
		case ebtypes.ReplayStateCancelled, ebtypes.ReplayStateFailed:
			return p, fmt.Errorf("backfill: replay %s %s: %s: %w", o.Name, d.State, aws.ToString(d.StateReason), ErrReplayNotCompleted)
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("backfill: replay %s still %s (it goes on: outboxctl replays): %w", o.Name, d.State, ctx.Err())
		case <-time.After(o.Poll):
		}
	}
}

// archiveNameOf returns an archive's name given its name or its ARN
// ("arn:aws:events:<region>:<account>:archive/<name>").
func archiveNameOf(archive string) string {
	if i := strings.LastIndex(archive, ":archive/"); i >= 0 {
		return archive[i+len(":archive/"):]
	}
	return archive
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

func progressOf(d *eventbridge.DescribeReplayOutput) ReplayProgress {
	p := ReplayProgress{Name: aws.ToString(d.ReplayName), State: string(d.State), Reason: aws.ToString(d.StateReason),
		From: aws.ToTime(d.EventStartTime), To: aws.ToTime(d.EventEndTime), LastReplayed: aws.ToTime(d.EventLastReplayedTime),
		Started: aws.ToTime(d.ReplayStartTime), Ended: aws.ToTime(d.ReplayEndTime)}
	p.Percent = percent(p)
	return p
}

func percent(p ReplayProgress) float64 {
	if p.State == string(ebtypes.ReplayStateCompleted) {
		return 100
	}
	span := p.To.Sub(p.From)
	if p.LastReplayed.IsZero() || span <= 0 {
		return 0
	}
	return min(100, 100*float64(p.LastReplayed.Sub(p.From))/float64(span))
}

// Replays lists the replays whose name starts with prefix, newest first
// (one ListReplays page of at most 100).
func Replays(ctx context.Context, api ReplayAPI, prefix string) ([]ReplayProgress, error) {
	out, err := api.ListReplays(ctx, &eventbridge.ListReplaysInput{NamePrefix: nilIfEmpty(prefix), Limit: aws.Int32(100)})
	if err != nil {
		return nil, fmt.Errorf("list replays: %w", err)
	}
	var ps []ReplayProgress
	for _, r := range out.Replays {
		p := ReplayProgress{Name: aws.ToString(r.ReplayName), State: string(r.State), Reason: aws.ToString(r.StateReason),
			From: aws.ToTime(r.EventStartTime), To: aws.ToTime(r.EventEndTime), LastReplayed: aws.ToTime(r.EventLastReplayedTime),
			Started: aws.ToTime(r.ReplayStartTime), Ended: aws.ToTime(r.ReplayEndTime)}
		p.Percent = percent(p)
		ps = append(ps, p)
	}
	return ps, nil
}

// str is a string attribute of an item ("" when absent or not a string).
func str(it map[string]types.AttributeValue, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}
