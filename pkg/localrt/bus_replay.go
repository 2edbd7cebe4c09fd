package localrt

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/google/uuid"
)

// Replay limits (API_StartReplay, eb-replay-archived-event).
const (
	// MaxActiveReplays is the number of replays that may be STARTING,
	// RUNNING or CANCELLING at once: 10 per account and Region on AWS,
	// per bus locally; one more fails with LimitExceededException.
	MaxActiveReplays = 10
	// MaxReplayNameLength: 1..64 characters of [.\-_A-Za-z0-9].
	MaxReplayNameLength = 64
	// ReplayInterval is the slice of event time a replay processes at a
	// time: "replays them on one minute intervals"; EventLastReplayedTime
	// advances per interval.
	ReplayInterval = time.Minute
	// ReplayNameField is the top-level field EventBridge adds to every
	// replayed event, holding the replay's name (eb-archive: the managed
	// rule that keeps replayed events out of archives matches
	// {"replay-name":[{"exists":false}]}).
	ReplayNameField = "replay-name"
)

var replayNameRE = regexp.MustCompile(`^[.\-_A-Za-z0-9]+$`)

// replay is one replay of the bus, in any state.
type replay struct {
	name, description, source string
	filter                    []string // rule ARNs; empty: every rule
	start, end                time.Time
	state                     ebtypes.ReplayState
	reason                    string
	began, ended, last        time.Time
	cancel                    bool
}

func (b *Bus) replayARN(name string) string {
	return fmt.Sprintf("arn:aws:events:%s:%s:replay/%s", b.cfg.Region, b.cfg.Account, name)
}

func (r *replay) active() bool {
	return r.state == ebtypes.ReplayStateStarting || r.state == ebtypes.ReplayStateRunning || r.state == ebtypes.ReplayStateCancelling
}

// StartReplay starts replaying an archive of this bus to its rules, as
// EventBridge StartReplay does (API_StartReplay, eb-replay-archived-event):
//   - the events of the archive whose own "time" is in [EventStartTime,
//     EventEndTime) and that reached the archive (the archive delay,
//     BusConfig.ArchiveDelay) are put on the bus again, interval by
//     interval of ReplayInterval (one minute) of event time, in no order
//     within an interval (shuffled), each with a new id and the
//     ReplayNameField ("replay-name") set to the replay's name; they are
//     not archived again;
//   - Destination.Arn must be this bus's ARN (replays go to the bus that
//     emitted the events); with Destination.FilterArns (rule ARNs of this
//     bus) only those rules get them, each only when its pattern matches;
//     without, every rule;
//   - the replay is STARTING, then RUNNING, then COMPLETED (or CANCELLED
//     after CancelReplay, FAILED when its events cannot be kept);
//     DescribeReplay's EventLastReplayedTime tells how far it got.
//
// Errors (smithy API errors, by Code): ValidationException for a missing
// or malformed name, times out of order, a destination other than this
// bus or a filter ARN that is not a rule of it; ResourceNotFoundException
// for an unknown archive; ResourceAlreadyExistsException for a name in
// use; LimitExceededException past MaxActiveReplays.
func (b *Bus) StartReplay(ctx context.Context, in *eventbridge.StartReplayInput, _ ...func(*eventbridge.Options)) (*eventbridge.StartReplayOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if in == nil {
		in = &eventbridge.StartReplayInput{}
	}
	name := aws.ToString(in.ReplayName)
	switch {
	case name == "" || len(name) > MaxReplayNameLength || !replayNameRE.MatchString(name):
		return nil, apiErr("ValidationException", "ReplayName %q: 1 to %d characters of [.-_A-Za-z0-9]", name, MaxReplayNameLength)
	case in.EventStartTime == nil || in.EventEndTime == nil:
		return nil, apiErr("ValidationException", "EventStartTime and EventEndTime are required")
	case !in.EventStartTime.Before(*in.EventEndTime):
		return nil, apiErr("ValidationException", "EventStartTime (%s) must be before EventEndTime (%s)", in.EventStartTime.UTC().Format(time.RFC3339), in.EventEndTime.UTC().Format(time.RFC3339))
	case in.Destination == nil || !b.isThisBus(aws.ToString(in.Destination.Arn)) || !strings.HasPrefix(aws.ToString(in.Destination.Arn), "arn:"):
		dest := ""
		if in.Destination != nil {
			dest = aws.ToString(in.Destination.Arn)
		}
		return nil, apiErr("ValidationException", "Destination.Arn %q: a replay goes to the event bus its archive belongs to, %s", dest, b.ARN())
	}
	for _, err := range []error{validateReplayTime("EventStartTime", *in.EventStartTime), validateReplayTime("EventEndTime", *in.EventEndTime),
		validateDescription("StartReplay", aws.ToString(in.Description))} {
		if err != nil {
			return nil, err
		}
	}
	src := aws.ToString(in.EventSourceArn)
	b.mu.Lock()
	defer b.mu.Unlock()
	archiveName := strings.TrimPrefix(src, fmt.Sprintf("arn:aws:events:%s:%s:archive/", b.cfg.Region, b.cfg.Account))
	if _, ok := b.archives[archiveName]; !ok || archiveName == src {
		return nil, apiErr("ResourceNotFoundException", "Archive %s does not exist.", src)
	}
	for _, f := range in.Destination.FilterArns {
		found := false
		for _, r := range b.rules {
			found = found || b.RuleARN(r.rule.Name) == f
		}
		if !found {
			return nil, apiErr("ValidationException", "FilterArns: %s is not a rule of event bus %s", f, b.ARN())
		}
	}
	if _, dup := b.replays[name]; dup {
		return nil, apiErr("ResourceAlreadyExistsException", "Replay %s already exists.", name)
	}
	active := 0
	for _, r := range b.replays {
		if r.active() {
			active++
		}
	}
	if active >= MaxActiveReplays {
		return nil, apiErr("LimitExceededException", "at most %d replays may be active at once", MaxActiveReplays)
	}
	r := &replay{name: name, description: aws.ToString(in.Description), source: src, filter: append([]string(nil), in.Destination.FilterArns...),
		start: in.EventStartTime.UTC(), end: in.EventEndTime.UTC(), state: ebtypes.ReplayStateStarting, began: b.cfg.Now().UTC()}
	b.replays[name] = r
	b.inflight++
	go b.runReplay(r, archiveName)
	return &eventbridge.StartReplayOutput{ReplayArn: aws.String(b.replayARN(name)), ReplayStartTime: aws.Time(r.began), State: r.state}, nil
}

// runReplay replays r interval by interval; it holds one inflight count
// (WaitIdle waits for the replay to end).
func (b *Bus) runReplay(r *replay, archiveName string) {
	defer b.done()
	b.setReplay(r, func() { r.state = ebtypes.ReplayStateRunning })
	// Interval by interval of event time from r.start; intervals with no
	// event are skipped (the next interval is the one of the earliest
	// event left), so a long range over a sparse archive costs its events.
	for from := r.start; from.Before(r.end); {
		if b.stopReplay(r) {
			return
		}
		b.mu.Lock()
		now := b.cfg.Now()
		live := b.archives[archiveName].live(now)
		visible := func(e archivedEvent) bool {
			return !e.VisibleAt.After(now) && !e.Time.Before(from) && e.Time.Before(r.end)
		}
		var next time.Time
		for _, e := range live {
			if visible(e) && (next.IsZero() || e.Time.Before(next)) {
				next = e.Time
			}
		}
		if next.IsZero() {
			b.mu.Unlock()
			break
		}
		from = intervalHolding(from, next)
		to := from.Add(ReplayInterval)
		if to.After(r.end) {
			to = r.end
		}
		var evs []archivedEvent
		for _, e := range live {
			if visible(e) && e.Time.Before(to) {
				evs = append(evs, e)
			}
		}
		b.mu.Unlock()
		rand.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
		for _, e := range evs {
			if b.stopReplay(r) {
				return
			}
			if err := b.replayOne(r, e.Event); err != nil {
				b.setReplay(r, func() { r.state, r.reason, r.ended = ebtypes.ReplayStateFailed, err.Error(), b.cfg.Now().UTC() })
				b.log.Error("replay failed", "replay", r.name, "error", err)
				return
			}
			b.mu.Lock()
			if e.Time.After(r.last) {
				r.last = e.Time
			}
			b.mu.Unlock()
		}
		b.setReplay(r, func() {}) // keep the progress, once per interval
		from = to
	}
	b.setReplay(r, func() { r.state, r.ended = ebtypes.ReplayStateCompleted, b.cfg.Now().UTC() })
	b.log.Info("replay completed", "replay", r.name)
}

// intervalHolding returns the start of the ReplayInterval step, counted
// from from, that holds t (t not before from). It counts in whole seconds
// of Unix time, so a range longer than time.Duration's 292 years (an
// EventStartTime far in the past) costs one step, not one per 292 years.
func intervalHolding(from, t time.Time) time.Time {
	secs := t.Unix() - from.Unix()
	if t.Nanosecond() < from.Nanosecond() {
		secs--
	}
	step := int64(ReplayInterval / time.Second)
	return time.Unix(from.Unix()+secs/step*step, int64(from.Nanosecond())).In(from.Location())
}

// stopReplay ends a cancelled replay (CANCELLED) or one the closing bus
// interrupts (FAILED) and reports whether it ended.
func (b *Bus) stopReplay(r *replay) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case r.cancel:
		r.state, r.ended = ebtypes.ReplayStateCancelled, b.cfg.Now().UTC()
	case b.closeCtx.Err() != nil:
		r.state, r.reason, r.ended = ebtypes.ReplayStateFailed, "the local bus closed during the replay", b.cfg.Now().UTC()
	default:
		return false
	}
	b.keepReplayLocked(r)
	return true
}

func (b *Bus) setReplay(r *replay, f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
	b.keepReplayLocked(r)
}

// replayOne puts one archived event on the bus again: a new id, the
// replay-name field, only to the rules r names whose pattern matches.
func (b *Bus) replayOne(r *replay, raw json.RawMessage) error {
	var env map[string]json.RawMessage
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("archived event does not decode: %w", err)
	}
	env["id"], _ = json.Marshal(uuid.NewString())
	env[ReplayNameField], _ = json.Marshal(r.name)
	out, err := json.Marshal(env)
	if err != nil {
		return err
	}
	v, _ := decodeJSON(out)
	m, _ := v.(map[string]any)
	b.mu.Lock()
	var ds []delivery
	for _, rule := range b.rules {
		if len(r.filter) > 0 && !slices.Contains(r.filter, b.RuleARN(rule.rule.Name)) || !rule.pattern.Match(m) {
			continue
		}
		t, ok := b.handlers[rule.rule.Target]
		if !ok {
			b.stats.Unsubscribed++
			continue
		}
		ds = append(ds, delivery{id: uuid.NewString(), rule: rule.rule, target: t, raw: out})
	}
	b.mu.Unlock()
	if err := b.keepDeliveries(ds); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats.Replayed++
	for _, d := range ds {
		b.inflight++
		go b.deliver(d)
	}
	return nil
}

// describe returns r as DescribeReplay answers it; the caller holds b.mu.
func (b *Bus) describe(r *replay) *eventbridge.DescribeReplayOutput {
	out := &eventbridge.DescribeReplayOutput{
		ReplayName: aws.String(r.name), ReplayArn: aws.String(b.replayARN(r.name)), EventSourceArn: aws.String(r.source),
		Destination:    &ebtypes.ReplayDestination{Arn: aws.String(b.ARN()), FilterArns: append([]string(nil), r.filter...)},
		EventStartTime: aws.Time(r.start), EventEndTime: aws.Time(r.end), ReplayStartTime: aws.Time(r.began), State: r.state,
	}
	if r.description != "" {
		out.Description = aws.String(r.description)
	}
	if r.reason != "" {
		out.StateReason = aws.String(r.reason)
	}
	if !r.last.IsZero() {
		out.EventLastReplayedTime = aws.Time(r.last)
	}
	if !r.ended.IsZero() {
		out.ReplayEndTime = aws.Time(r.ended)
	}
	return out
}

// lockReplay validates a request's ReplayName, takes the bus's lock and
// returns the replay with the function that releases the lock, or the
// API error (the lock then released): ValidationException for a bad name,
// ResourceNotFoundException for an unknown one.
func (b *Bus) lockReplay(ctx context.Context, name *string) (*replay, func(), error) {
	n, err := requestName(ctx, "ReplayName", name, MaxReplayNameLength)
	if err != nil {
		return nil, nil, err
	}
	b.mu.Lock()
	r, ok := b.replays[n]
	if !ok {
		b.mu.Unlock()
		return nil, nil, apiErr("ResourceNotFoundException", "Replay %s does not exist.", n)
	}
	return r, b.mu.Unlock, nil
}

// DescribeReplay answers a replay's state and progress (API_DescribeReplay):
// ResourceNotFoundException for an unknown name.
func (b *Bus) DescribeReplay(ctx context.Context, in *eventbridge.DescribeReplayInput, _ ...func(*eventbridge.Options)) (*eventbridge.DescribeReplayOutput, error) {
	var name *string
	if in != nil {
		name = in.ReplayName
	}
	r, unlock, err := b.lockReplay(ctx, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return b.describe(r), nil
}

// ListReplays lists the bus's replays, newest first (API_ListReplays:
// NamePrefix, State and EventSourceArn filter; Limit at most 100; one
// page, no NextToken).
func (b *Bus) ListReplays(ctx context.Context, in *eventbridge.ListReplaysInput, _ ...func(*eventbridge.Options)) (*eventbridge.ListReplaysOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if in == nil {
		in = &eventbridge.ListReplaysInput{}
	}
	if err := validateList(in.Limit, in.NamePrefix, MaxReplayNameLength, string(in.State), stateStrings(ebtypes.ReplayState("").Values())); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var rs []*replay
	for _, r := range b.replays {
		if strings.HasPrefix(r.name, aws.ToString(in.NamePrefix)) && (in.State == "" || in.State == r.state) &&
			(aws.ToString(in.EventSourceArn) == "" || aws.ToString(in.EventSourceArn) == r.source) {
			rs = append(rs, r)
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].began.After(rs[j].began) })
	if l := int(aws.ToInt32(in.Limit)); l > 0 && l < len(rs) {
		rs = rs[:l]
	}
	out := &eventbridge.ListReplaysOutput{Replays: []ebtypes.Replay{}}
	for _, r := range rs {
		d := b.describe(r)
		out.Replays = append(out.Replays, ebtypes.Replay{ReplayName: d.ReplayName, EventSourceArn: d.EventSourceArn, State: d.State, StateReason: d.StateReason,
			EventStartTime: d.EventStartTime, EventEndTime: d.EventEndTime, EventLastReplayedTime: d.EventLastReplayedTime,
			ReplayStartTime: d.ReplayStartTime, ReplayEndTime: d.ReplayEndTime})
	}
	return out, nil
}

// CancelReplay cancels a STARTING or RUNNING replay (API_CancelReplay): it
// answers CANCELLING and the replay ends CANCELLED before its next event.
// ResourceNotFoundException for an unknown name, IllegalStatusException
// for a replay that already ended or is cancelling.
func (b *Bus) CancelReplay(ctx context.Context, in *eventbridge.CancelReplayInput, _ ...func(*eventbridge.Options)) (*eventbridge.CancelReplayOutput, error) {
	var name *string
	if in != nil {
		name = in.ReplayName
	}
	r, unlock, err := b.lockReplay(ctx, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if r.state != ebtypes.ReplayStateStarting && r.state != ebtypes.ReplayStateRunning {
		return nil, apiErr("IllegalStatusException", "Replay %s is %s and cannot be cancelled.", r.name, r.state)
	}
	r.cancel = true
	r.state = ebtypes.ReplayStateCancelling
	b.keepReplayLocked(r)
	return &eventbridge.CancelReplayOutput{ReplayArn: aws.String(b.replayARN(r.name)), State: r.state}, nil
}

// storedReplay is a replay as the Store keeps it.
type storedReplay struct {
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	Source      string    `json:"source"`
	Filter      []string  `json:"filter,omitempty"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	State       string    `json:"state"`
	Reason      string    `json:"reason,omitempty"`
	Began       time.Time `json:"began"`
	Ended       time.Time `json:"ended"`
	Last        time.Time `json:"last"`
}

func (b *Bus) replayPrefix() string { return "bus/" + b.ARN() + "/replay/" }

// keepReplayLocked writes r to the Store (best effort: a replay's record
// is for ListReplays after a restart). The caller holds b.mu.
func (b *Bus) keepReplayLocked(r *replay) {
	if b.cfg.Store == nil {
		return
	}
	v, _ := json.Marshal(storedReplay{Name: r.name, Description: r.description, Source: r.source, Filter: r.filter, Start: r.start, End: r.end,
		State: string(r.state), Reason: r.reason, Began: r.began, Ended: r.ended, Last: r.last})
	if err := b.cfg.Store.Put(b.replayPrefix()+r.name, v); err != nil {
		b.log.Warn("could not keep the replay's state", "replay", r.name, "error", err)
	}
}

// restoreReplays loads the replays of earlier runs; one that was still
// active when the stack stopped is FAILED (it is not resumed: start a new
// replay; the consumers' dedup absorbs what it had delivered).
func (b *Bus) restoreReplays() error {
	if b.cfg.Store == nil {
		return nil
	}
	for k, v := range b.cfg.Store.Records(b.replayPrefix()) {
		var s storedReplay
		if err := json.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("localrt: bus %s: stored replay %s: %w", b.cfg.Name, k, err)
		}
		r := &replay{name: s.Name, description: s.Description, source: s.Source, filter: s.Filter, start: s.Start, end: s.End,
			state: ebtypes.ReplayState(s.State), reason: s.Reason, began: s.Began, ended: s.Ended, last: s.Last}
		if r.active() {
			r.state, r.reason = ebtypes.ReplayStateFailed, "the local stack stopped during the replay; start a new one"
			if r.ended.IsZero() {
				r.ended = b.cfg.Now().UTC()
			}
			b.keepReplayLocked(r)
		}
		b.replays[r.name] = r
	}
	return nil
}
