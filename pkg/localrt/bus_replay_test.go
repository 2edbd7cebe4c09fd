package localrt

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
)

// bodyLog is a queue target that records every message body.
type bodyLog struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (l *bodyLog) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	var m map[string]any
	if err := json.Unmarshal([]byte(aws.ToString(in.MessageBody)), &m); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bodies = append(l.bodies, m)
	return &sqs.SendMessageOutput{MessageId: aws.String("m")}, nil
}

// replayed returns the bodies carrying replay-name = name, and the count
// of the others.
func (l *bodyLog) replayed(name string) (replayed []map[string]any, live int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.bodies {
		if b[ReplayNameField] == name {
			replayed = append(replayed, b)
		} else if _, ok := b[ReplayNameField]; !ok {
			live++
		}
	}
	return replayed, live
}

const testArchive = "orders-archive"

func archiveBus(t *testing.T, delay time.Duration, mut func(*BusConfig)) (*Bus, map[string]*bodyLog) {
	t.Helper()
	b := newTestBus(t, func(c *BusConfig) {
		c.Archives = []ArchiveConfig{{Name: testArchive, Pattern: map[string]any{"source": []any{testSource}}, RetentionDays: 30}}
		c.ArchiveDelay = delay
		if mut != nil {
			mut(c)
		}
	})
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	logs := map[string]*bodyLog{}
	for _, c := range []string{testLedger, testNotifier, testFulfilment} {
		logs[c] = &bodyLog{}
		b.SubscribeQueue(c, logs[c], "https://sqs.us-east-1.amazonaws.com/000000000000/"+c)
	}
	return b, logs
}

func putN(t *testing.T, b *Bus, n int, at time.Time) {
	t.Helper()
	for i := range n {
		e := entry(testPaid, fmt.Sprintf(`{"event_id":"e%d"}`, i))
		e.Time = aws.Time(at.Add(time.Duration(i) * 20 * time.Second))
		out, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{e}})
		if err != nil || out.FailedEntryCount != 0 {
			t.Fatalf("PutEvents: %v %+v", err, out)
		}
	}
	waitIdle(t, b)
}

func waitReplay(t *testing.T, api ArchiveAPI, name string) *eventbridge.DescribeReplayOutput {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := api.DescribeReplay(context.Background(), &eventbridge.DescribeReplayInput{ReplayName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		switch d.State {
		case ebtypes.ReplayStateCompleted, ebtypes.ReplayStateCancelled, ebtypes.ReplayStateFailed:
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("replay %s still %s", name, d.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBusReplayReachesOnlyTheNamedRule: a replay with FilterArns delivers
// the archived events of its time range to that rule only, each with the
// replay-name field and a new id; the events are not archived again; the
// other rules get nothing; the replay ends COMPLETED with
// EventLastReplayedTime the last replayed event's time.
func TestBusReplayReachesOnlyTheNamedRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, logs := archiveBus(t, time.Millisecond, nil)
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	putN(t, b, 9, t0) // 9 events over 160 s: three one-minute intervals
	time.Sleep(5 * time.Millisecond)
	// [t0+20s, t0+140s): events 1..6
	_, err := b.StartReplay(ctx, &eventbridge.StartReplayInput{ReplayName: aws.String("r1"),
		EventSourceArn: aws.String(b.archiveARN(testArchive)), EventStartTime: aws.Time(t0.Add(20 * time.Second)), EventEndTime: aws.Time(t0.Add(140 * time.Second)),
		Destination: &ebtypes.ReplayDestination{Arn: aws.String(b.ARN()), FilterArns: []string{b.RuleARN("ledger-order-payments")}}})
	if err != nil {
		t.Fatal(err)
	}
	d := waitReplay(t, b, "r1")
	waitIdle(t, b)
	if d.State != ebtypes.ReplayStateCompleted {
		t.Fatalf("state %s (%s)", d.State, aws.ToString(d.StateReason))
	}
	if got, want := aws.ToTime(d.EventLastReplayedTime), t0.Add(120*time.Second); !got.Equal(want) {
		t.Errorf("EventLastReplayedTime %s, want %s", got, want)
	}
	rep, live := logs[testLedger].replayed("r1")
	if len(rep) != 6 || live != 9 {
		t.Fatalf("ledger got %d replayed, %d live; want 6 and 9", len(rep), live)
	}
	seen := map[string]bool{}
	for _, ev := range rep {
		detail := ev["detail"].(map[string]any)
		seen[detail["event_id"].(string)] = true
		if ev["id"] == "" {
			t.Errorf("replayed event without id: %v", ev)
		}
	}
	for i := 1; i <= 6; i++ {
		if !seen[fmt.Sprintf("e%d", i)] {
			t.Errorf("e%d not replayed (range [t0+20s, t0+140s))", i)
		}
	}
	for _, c := range []string{testNotifier, testFulfilment} {
		if rep, _ := logs[c].replayed("r1"); len(rep) != 0 {
			t.Errorf("%s got %d replayed events; only the ledger's rule was named", c, len(rep))
		}
	}
	a, err := b.DescribeArchive(ctx, &eventbridge.DescribeArchiveInput{ArchiveName: aws.String(testArchive)})
	if err != nil || a.EventCount != 9 || aws.ToInt32(a.RetentionDays) != 30 {
		t.Fatalf("archive after replay: %v %+v (replayed events must not be archived again)", err, a)
	}
}

// TestBusReplayMissesEventsStillOnTheirWayToTheArchive: an event reaches
// the archive after the archive delay; a replay started sooner does not
// see it (as on AWS, which advises waiting 10 minutes).
func TestBusReplayMissesEventsStillOnTheirWayToTheArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	b, logs := archiveBus(t, time.Hour, func(c *BusConfig) { c.Now = clock })
	putN(t, b, 5, now.Add(-time.Minute))
	from, to := now.Add(-time.Hour), now.Add(time.Hour)
	start := func(name string) {
		if _, err := b.StartReplay(ctx, &eventbridge.StartReplayInput{ReplayName: aws.String(name), EventSourceArn: aws.String(b.archiveARN(testArchive)),
			EventStartTime: aws.Time(from), EventEndTime: aws.Time(to),
			Destination: &ebtypes.ReplayDestination{Arn: aws.String(b.ARN())}}); err != nil {
			t.Fatal(err)
		}
		waitReplay(t, b, name)
		waitIdle(t, b)
	}
	start("early")
	rep, _ := logs[testLedger].replayed("early")
	if len(rep) == 5 {
		// possible only if all five delays were drawn as 0 of an hour
		t.Fatalf("a replay at once saw all 5 events despite a 1 h archive delay")
	}
	mu.Lock()
	now = now.Add(time.Hour + time.Second)
	mu.Unlock()
	start("late")
	for _, c := range []string{testLedger, testNotifier} { // no FilterArns: every matching rule
		if rep, _ := logs[c].replayed("late"); len(rep) != 5 {
			t.Errorf("%s: a replay after the archive delay got %d of 5", c, len(rep))
		}
	}
}

// TestBusReplayRefusesAsAWSDoes: StartReplay's errors, and CancelReplay's.
func TestBusReplayRefusesAsAWSDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := archiveBus(t, time.Millisecond, nil)
	t0 := time.Now().Add(-time.Hour)
	good := func() *eventbridge.StartReplayInput {
		return &eventbridge.StartReplayInput{ReplayName: aws.String("ok"), EventSourceArn: aws.String(b.archiveARN(testArchive)),
			EventStartTime: aws.Time(t0), EventEndTime: aws.Time(t0.Add(time.Minute)), Destination: &ebtypes.ReplayDestination{Arn: aws.String(b.ARN())}}
	}
	for name, c := range map[string]struct {
		mut  func(*eventbridge.StartReplayInput)
		code string
	}{
		"bad name":         {func(in *eventbridge.StartReplayInput) { in.ReplayName = aws.String("a b") }, "ValidationException"},
		"end before start": {func(in *eventbridge.StartReplayInput) { in.EventEndTime = aws.Time(t0) }, "ValidationException"},
		"other bus": {func(in *eventbridge.StartReplayInput) {
			in.Destination.Arn = aws.String("arn:aws:events:us-east-1:000000000000:event-bus/x")
		}, "ValidationException"},
		"unknown rule":       {func(in *eventbridge.StartReplayInput) { in.Destination.FilterArns = []string{b.RuleARN("nope")} }, "ValidationException"},
		"unknown archive":    {func(in *eventbridge.StartReplayInput) { in.EventSourceArn = aws.String(b.archiveARN("nope")) }, "ResourceNotFoundException"},
		"missing time":       {func(in *eventbridge.StartReplayInput) { in.EventStartTime = nil }, "ValidationException"},
		"missing destintion": {func(in *eventbridge.StartReplayInput) { in.Destination = nil }, "ValidationException"},
		"description of 513": {func(in *eventbridge.StartReplayInput) { in.Description = aws.String(strings.Repeat("d", 513)) }, "ValidationException"},
		"start before 1970":  {func(in *eventbridge.StartReplayInput) { in.EventStartTime = aws.Time(time.Unix(-9e15, 0)) }, "ValidationException"},
		"end after 9999": {func(in *eventbridge.StartReplayInput) {
			in.EventEndTime = aws.Time(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
		}, "ValidationException"},
	} {
		in := good()
		c.mut(in)
		if _, err := b.StartReplay(ctx, in); apiCode(err) != c.code {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
	}
	if _, err := b.StartReplay(ctx, good()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.StartReplay(ctx, good()); apiCode(err) != "ResourceAlreadyExistsException" {
		t.Errorf("same name twice: %v", err)
	}
	waitReplay(t, b, "ok")
	if _, err := b.CancelReplay(ctx, &eventbridge.CancelReplayInput{ReplayName: aws.String("ok")}); apiCode(err) != "IllegalStatusException" {
		t.Errorf("cancel a completed replay: %v", err)
	}
	if _, err := b.DescribeReplay(ctx, &eventbridge.DescribeReplayInput{ReplayName: aws.String("nope")}); apiCode(err) != "ResourceNotFoundException" {
		t.Errorf("describe unknown: %v", err)
	}
	if _, err := b.CreateArchive(ctx, &eventbridge.CreateArchiveInput{ArchiveName: aws.String(testArchive), EventSourceArn: aws.String(b.ARN())}); apiCode(err) != "ResourceAlreadyExistsException" {
		t.Errorf("archive name twice: %v", err)
	}

	// The API Reference's request limits (API_CreateArchive, API_ListArchives,
	// API_ListReplays, API_DescribeArchive/Replay, API_CancelReplay,
	// API_DescribeRule): each refused with ValidationException.
	for name, call := range map[string]func() error{
		"CreateArchive Description of 513": func() error {
			_, err := b.CreateArchive(ctx, &eventbridge.CreateArchiveInput{ArchiveName: aws.String("other"), EventSourceArn: aws.String(b.ARN()), Description: aws.String(strings.Repeat("d", 513))})
			return err
		},
		"ListArchives Limit 0": func() error {
			_, err := b.ListArchives(ctx, &eventbridge.ListArchivesInput{Limit: aws.Int32(0)})
			return err
		},
		"ListArchives Limit 101": func() error {
			_, err := b.ListArchives(ctx, &eventbridge.ListArchivesInput{Limit: aws.Int32(101)})
			return err
		},
		"ListArchives State BOGUS": func() error {
			_, err := b.ListArchives(ctx, &eventbridge.ListArchivesInput{State: ebtypes.ArchiveState("BOGUS")})
			return err
		},
		"ListArchives NamePrefix <script>": func() error {
			_, err := b.ListArchives(ctx, &eventbridge.ListArchivesInput{NamePrefix: aws.String("<script>")})
			return err
		},
		"ListReplays Limit 100000": func() error {
			_, err := b.ListReplays(ctx, &eventbridge.ListReplaysInput{Limit: aws.Int32(100000)})
			return err
		},
		"ListReplays State BOGUS": func() error {
			_, err := b.ListReplays(ctx, &eventbridge.ListReplaysInput{State: ebtypes.ReplayState("BOGUS")})
			return err
		},
		"ListReplays NamePrefix ../": func() error {
			_, err := b.ListReplays(ctx, &eventbridge.ListReplaysInput{NamePrefix: aws.String("../")})
			return err
		},
		"ListReplays NamePrefix empty": func() error {
			_, err := b.ListReplays(ctx, &eventbridge.ListReplaysInput{NamePrefix: aws.String("")})
			return err
		},
		"DescribeArchive empty name": func() error { _, err := b.DescribeArchive(ctx, &eventbridge.DescribeArchiveInput{}); return err },
		"DescribeReplay empty name":  func() error { _, err := b.DescribeReplay(ctx, &eventbridge.DescribeReplayInput{}); return err },
		"CancelReplay empty name":    func() error { _, err := b.CancelReplay(ctx, &eventbridge.CancelReplayInput{}); return err },
		"DescribeRule empty name":    func() error { _, err := b.DescribeRule(ctx, &eventbridge.DescribeRuleInput{}); return err },
		"ListRules Limit 0": func() error {
			_, err := b.ListRules(ctx, &eventbridge.ListRulesInput{EventBusName: aws.String(b.ARN()), Limit: aws.Int32(0)})
			return err
		},
	} {
		if err := call(); apiCode(err) != "ValidationException" {
			t.Errorf("%s: %v, want ValidationException", name, err)
		}
	}
	for name, call := range map[string]func() error{
		"ListArchives Limit 100, prefix, ENABLED": func() error {
			_, err := b.ListArchives(ctx, &eventbridge.ListArchivesInput{Limit: aws.Int32(100), NamePrefix: aws.String(testArchive[:1]), State: ebtypes.ArchiveStateEnabled})
			return err
		},
		"ListReplays Limit 1, COMPLETED": func() error {
			_, err := b.ListReplays(ctx, &eventbridge.ListReplaysInput{Limit: aws.Int32(1), State: ebtypes.ReplayStateCompleted})
			return err
		},
	} {
		if err := call(); err != nil {
			t.Errorf("%s: %v, want accepted", name, err)
		}
	}
	rules, err := b.ListRules(ctx, &eventbridge.ListRulesInput{EventBusName: aws.String(b.ARN())})
	if err != nil || len(rules.Rules) != len(b.rules) {
		t.Fatalf("ListRules: %v %+v, want the bus's %d rules", err, rules, len(b.rules))
	}
	for i, r := range rules.Rules {
		if d, err := b.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: r.Name, EventBusName: aws.String(b.ARN())}); err != nil || aws.ToString(d.Arn) != aws.ToString(r.Arn) {
			t.Errorf("ListRules[%d] %s: DescribeRule %v %+v", i, aws.ToString(r.Name), err, d)
		}
		if i > 0 && aws.ToString(rules.Rules[i-1].Name) >= aws.ToString(r.Name) {
			t.Errorf("ListRules not by name: %s before %s", aws.ToString(rules.Rules[i-1].Name), aws.ToString(r.Name))
		}
	}
}

// TestIntervalHoldingBeyond292Years: the replay's next interval is found in
// one step however far the next event is (time.Duration ends at 292 years;
// a walk in 292-year strides over an EventStartTime far in the past kept a
// core busy).
func TestIntervalHoldingBeyond292Years(t *testing.T) {
	t.Parallel()
	from := time.Unix(0, 500).UTC()
	for _, at := range []time.Time{
		from, from.Add(59 * time.Second), from.Add(time.Minute),
		time.Date(2026, 12, 1, 20, 30, 15, 7, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
	} {
		got := intervalHolding(from, at)
		if got.After(at) || !at.Before(got.Add(ReplayInterval)) || (got.Unix()-from.Unix())%60 != 0 || got.Nanosecond() != from.Nanosecond() {
			t.Errorf("intervalHolding(%s, %s) = %s: want the minute step from %s that holds it", from, at, got, from)
		}
	}
}

// TestBusArchiveAndReplaysAcrossRestart: with a Store, the archived events,
// an archive CreateArchive made, and the replays outlive a restart.
func TestBusArchiveAndReplaysAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state")
	j := openJournal(t, path)
	b, _ := archiveBus(t, time.Millisecond, func(c *BusConfig) { c.Store = j })
	if _, err := b.CreateArchive(ctx, &eventbridge.CreateArchiveInput{ArchiveName: aws.String("made"), EventSourceArn: aws.String(b.ARN()),
		EventPattern: aws.String(`{"detail-type":["OrderPaid"]}`)}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-10 * time.Minute).Truncate(time.Second) // the event's time has whole seconds
	putN(t, b, 4, t0)
	time.Sleep(5 * time.Millisecond)
	if _, err := b.StartReplay(ctx, &eventbridge.StartReplayInput{ReplayName: aws.String("before"), EventSourceArn: aws.String(b.archiveARN("made")),
		EventStartTime: aws.Time(t0), EventEndTime: aws.Time(time.Now()), Destination: &ebtypes.ReplayDestination{Arn: aws.String(b.ARN())}}); err != nil {
		t.Fatal(err)
	}
	waitReplay(t, b, "before")
	created := map[string]time.Time{}
	for _, name := range []string{testArchive, "made"} {
		a, err := b.DescribeArchive(ctx, &eventbridge.DescribeArchiveInput{ArchiveName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		created[name] = aws.ToTime(a.CreationTime)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_ = j.Close()
	time.Sleep(10 * time.Millisecond) // a re-created archive would get a later time

	j = openJournal(t, path)
	defer j.Close()
	b2, logs := archiveBus(t, time.Millisecond, func(c *BusConfig) { c.Store = j })
	for _, name := range []string{testArchive, "made"} {
		a, err := b2.DescribeArchive(ctx, &eventbridge.DescribeArchiveInput{ArchiveName: aws.String(name)})
		if err != nil || a.EventCount != 4 {
			t.Fatalf("archive %s after restart: %v %+v", name, err, a)
		}
		// It still holds the events of before the restart, so it began
		// then (backfill's gap check reads this time).
		if got := aws.ToTime(a.CreationTime); !got.Equal(created[name]) {
			t.Errorf("archive %s CreationTime after restart %s, want the first start's %s", name, got, created[name])
		}
	}
	rs, err := b2.ListReplays(ctx, &eventbridge.ListReplaysInput{})
	if err != nil || len(rs.Replays) != 1 || rs.Replays[0].State != ebtypes.ReplayStateCompleted {
		t.Fatalf("replays after restart: %v %+v", err, rs)
	}
	if _, err := b2.StartReplay(ctx, &eventbridge.StartReplayInput{ReplayName: aws.String("after"), EventSourceArn: aws.String(b2.archiveARN("made")),
		EventStartTime: aws.Time(t0), EventEndTime: aws.Time(time.Now()), Destination: &ebtypes.ReplayDestination{Arn: aws.String(b2.ARN())}}); err != nil {
		t.Fatal(err)
	}
	waitReplay(t, b2, "after")
	waitIdle(t, b2)
	if rep, _ := logs[testLedger].replayed("after"); len(rep) != 4 {
		t.Fatalf("replayed %d of the 4 archived before the restart", len(rep))
	}
}

// TestAWSFrontArchiveAndReplay: the SDK's EventBridge client creates an
// archive, starts, describes and lists replays and describes a rule
// through the AWS front (timestamps as awsJson epoch seconds).
func TestAWSFrontArchiveAndReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, logs := archiveBus(t, time.Millisecond, nil)
	front, err := NewAWSFront(AWSFrontConfig{EventBridge: b})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(front)
	t.Cleanup(srv.Close)
	eb := eventbridge.NewFromConfig(dynoxide.AWSConfig(srv.URL))
	var _ ArchiveAPI = eb
	rule, err := eb.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String("notifier-order-events"), EventBusName: aws.String(testBus)})
	if err != nil || aws.ToString(rule.Arn) != b.RuleARN("notifier-order-events") {
		t.Fatalf("DescribeRule: %v %+v", err, rule)
	}
	t0 := time.Now().Add(-5 * time.Minute).Truncate(time.Second)
	putN(t, b, 3, t0)
	time.Sleep(5 * time.Millisecond)
	st, err := eb.StartReplay(ctx, &eventbridge.StartReplayInput{ReplayName: aws.String("front"), EventSourceArn: aws.String(b.archiveARN(testArchive)),
		EventStartTime: aws.Time(t0), EventEndTime: aws.Time(time.Now()), Destination: &ebtypes.ReplayDestination{Arn: aws.String(b.ARN()), FilterArns: []string{aws.ToString(rule.Arn)}}})
	if err != nil || st.State != ebtypes.ReplayStateStarting {
		t.Fatalf("StartReplay: %v %+v", err, st)
	}
	d := waitReplay(t, eb, "front")
	if d.State != ebtypes.ReplayStateCompleted || !aws.ToTime(d.EventStartTime).Equal(t0) || len(d.Destination.FilterArns) != 1 {
		t.Fatalf("DescribeReplay: %+v", d)
	}
	waitIdle(t, b)
	if rep, _ := logs[testNotifier].replayed("front"); len(rep) != 3 {
		t.Errorf("notifier got %d replayed events, want 3", len(rep))
	}
	ls, err := eb.ListReplays(ctx, &eventbridge.ListReplaysInput{})
	if err != nil || len(ls.Replays) != 1 || aws.ToString(ls.Replays[0].ReplayName) != "front" {
		t.Fatalf("ListReplays: %v %+v", err, ls)
	}
	if _, err := eb.StartReplay(ctx, &eventbridge.StartReplayInput{ReplayName: aws.String("front"), EventSourceArn: aws.String(b.archiveARN(testArchive)),
		EventStartTime: aws.Time(t0), EventEndTime: aws.Time(time.Now()), Destination: &ebtypes.ReplayDestination{Arn: aws.String(b.ARN())}}); apiCode(err) != "ResourceAlreadyExistsException" {
		t.Errorf("error code through the front: %v", err)
	}
	as, err := eb.ListArchives(ctx, &eventbridge.ListArchivesInput{})
	if err != nil || len(as.Archives) != 1 || as.Archives[0].EventCount != 3 {
		t.Fatalf("ListArchives: %v %+v", err, as)
	}
}
