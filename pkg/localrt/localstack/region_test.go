package localstack_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt/localstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

const (
	regionA = "eu-west-1"
	regionB = "eu-central-1"
)

// putRegional writes the pending outbox record of a new event of the
// aggregate aggType/id (sequence 1) as a writer in region stamps it: the
// origin Region (outbox.AttrOriginRegion) and the Region's pending shard
// (outbox.PendingShardIn); region "" writes a single-Region record. It
// writes the item directly (PutItem): the writer's Region stamp is built in
// another piece, and a record replicated from another Region arrives the
// same way, not through this Region's writer.
func putRegional(t *testing.T, st *localstack.Stack, region, aggType, id string) outbox.Envelope {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: aggType, ID: id, Sequence: 1},
		outbox.Event{Type: aggType + "Made", Version: 1, Payload: map[string]string{"id": id}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	item := outbox.NewRecord(env, 0, st.PendingShards).Item()
	if region != "" {
		item[outbox.AttrOriginRegion] = &types.AttributeValueMemberS{Value: region}
		item[outbox.AttrPendingShard] = &types.AttributeValueMemberS{Value: outbox.PendingShardIn(region, env.EventID, st.PendingShards)}
	}
	if _, err := st.DDB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(st.OutboxTable), Item: item}); err != nil {
		t.Fatal(err)
	}
	return env
}

// settleAll settles every stack, twice round: an event forwarded by one is
// delivered by the other.
func settleAll(t *testing.T, stacks ...*localstack.Stack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		for _, st := range stacks {
			if err := st.Settle(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestStartRefusesInvalidRegionConfig(t *testing.T) {
	t.Parallel()
	h := func(context.Context, events.EventBridgeEvent) error { return nil }
	to := &localstack.ForwardTarget{}
	fwd := localstack.Forward{Name: "f", AggregateType: "A", To: to, ToBus: localstack.BusARN(regionB, "b")}
	cases := map[string]struct {
		edit func(*localstack.Config)
		want string
	}{
		"region not a Region":    {func(c *localstack.Config) { c.Region = "Europe" }, "Region"},
		"region upper case":      {func(c *localstack.Config) { c.Region = "EU-WEST-1" }, "Region"},
		"forward without a name": {func(c *localstack.Config) { f := fwd; f.Name = ""; c.Forward = []localstack.Forward{f} }, "Forward[0]: Name"},
		"forward name too long": {func(c *localstack.Config) {
			f := fwd
			f.Name = strings.Repeat("f", 57)
			c.Forward = []localstack.Forward{f}
		}, "1..56"},
		"forward without a route": {func(c *localstack.Config) { f := fwd; f.AggregateType = ""; c.Forward = []localstack.Forward{f} }, "AggregateType and Pattern"},
		"forward with two routes": {func(c *localstack.Config) { f := fwd; f.Pattern = `{}`; c.Forward = []localstack.Forward{f} }, "AggregateType and Pattern"},
		"forward without To":      {func(c *localstack.Config) { f := fwd; f.To = nil; c.Forward = []localstack.Forward{f} }, "To"},
		"forward without ToBus":   {func(c *localstack.Config) { f := fwd; f.ToBus = ""; c.Forward = []localstack.Forward{f} }, "ToBus"},
		"forward twice":           {func(c *localstack.Config) { c.Forward = []localstack.Forward{fwd, fwd} }, "already gives"},
		"forward named like a consumer's rule": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: "f-forward", AggregateType: "A", Handler: h}}
			c.Forward = []localstack.Forward{fwd}
		}, "consumer f-forward"},
		"forward retry policy over 185": {func(c *localstack.Config) {
			f := fwd
			f.RetryPolicy = &localrt.RetryPolicy{MaximumRetryAttempts: 186, MaximumEventAge: time.Hour}
			c.Forward = []localstack.Forward{f}
		}, "MaximumRetryAttempts"},
		"forward retry policy without an age": {func(c *localstack.Config) {
			f := fwd
			f.RetryPolicy = &localrt.RetryPolicy{MaximumRetryAttempts: 1}
			c.Forward = []localstack.Forward{f}
		}, "MaximumEventAge"},
	}
	for name, tc := range cases {
		cfg := localstack.Config{OutboxTable: "o", Source: "com.example.t", BusName: "b", Region: regionA}
		tc.edit(&cfg)
		// Refused before anything starts: no Dynoxide is needed.
		_, err := localstack.Start(context.Background(), cfg)
		if !errors.Is(err, localstack.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Start = %v, want ErrInvalidConfig naming %q", name, err, tc.want)
		}
	}
}

// A stack in Region A publishes only the records written in A: a record
// of Region B (as replication brings it into A's table and stream) and a
// record without an origin are filtered out by the stream poller
// (outbox.StreamFilterPatternIn) and stay pending, in B's pending shards
// for B's record; Pending counts A's shards only. The bus's events and ARN
// name Region A, and WriterConfig gives writers the Region.
func TestRegionStackPublishesOnlyItsOwnRecords(t *testing.T) {
	t.Parallel()
	var got applied
	st := start(t, localstack.Config{OutboxTable: "region-outbox", Source: "com.example.region", BusName: "region-bus", Region: regionA,
		ReconcileEvery: time.Hour, Consumers: []localstack.Consumer{{Name: "things", AggregateType: "Thing", Handler: got.handle}}})
	if wc := st.WriterConfig(); wc.Region != regionA || wc.Table != st.OutboxTable || wc.Source != st.Source || wc.PendingShards != st.PendingShards {
		t.Errorf("WriterConfig %+v", wc)
	}
	if st.Bus.ARN() != localstack.BusARN(regionA, "region-bus") {
		t.Errorf("bus ARN %s, want %s", st.Bus.ARN(), localstack.BusARN(regionA, "region-bus"))
	}
	mine := putRegional(t, st, regionA, "Thing", "t-a")
	theirs := putRegional(t, st, regionB, "Thing", "t-b")
	unstamped := putRegional(t, st, "", "Thing", "t-0")
	settleAll(t, st)

	if got.count(mine.EventID) != 1 || got.count(theirs.EventID) != 0 || got.count(unstamped.EventID) != 0 {
		t.Errorf("applied: own Region's %d (want 1), other Region's %d (want 0), unstamped %d (want 0)",
			got.count(mine.EventID), got.count(theirs.EventID), got.count(unstamped.EventID))
	}
	if s := status(record(t, st, mine)); s != outbox.StatusPublished {
		t.Errorf("own record %s, want %s", s, outbox.StatusPublished)
	}
	for _, env := range []outbox.Envelope{theirs, unstamped} {
		if s := status(record(t, st, env)); s != outbox.StatusPending {
			t.Errorf("record of %s is %s, want it left %s", env.AggregateID, s, outbox.StatusPending)
		}
	}
	if st.Poller.Stats().RecordsFiltered < 2 {
		t.Errorf("stream poller filtered %d records, want at least the 2 not of this Region", st.Poller.Stats().RecordsFiltered)
	}
	ctx := context.Background()
	if n, err := localstack.PendingIn(ctx, st.DDB, st.OutboxTable, regionB, st.PendingShards); err != nil || n != 1 {
		t.Errorf("pending in Region B's shards: %d, %v; want 1", n, err)
	}
	evs := st.Bus.Events()
	if len(evs) != 1 || !strings.Contains(string(evs[0]), `"region":"`+regionA+`"`) {
		t.Errorf("bus events %s, want one event of Region %s", evs, regionA)
	}
}

// Two Regions, each with its own consumer and a forward of that consumer's
// events from the other Region: an event published in A reaches A's
// consumer and, forwarded, B's consumer, once each; B does not forward it
// back (a forwarded event goes to no other bus), and the same the other
// way.
func TestForwardDeliversOnceToTheHomeRegion(t *testing.T) {
	t.Parallel()
	var auditA, statementB applied
	toA, toB := &localstack.ForwardTarget{}, &localstack.ForwardTarget{}
	a := start(t, localstack.Config{OutboxTable: "bank-outbox", Source: "com.example.bank", BusName: "bank-bus", Region: regionA,
		ReconcileEvery: time.Hour,
		Consumers:      []localstack.Consumer{{Name: "audit", AggregateType: "Account", Handler: auditA.handle}},
		Forward:        []localstack.Forward{{Name: "statement", AggregateType: "Account", To: toB, ToBus: localstack.BusARN(regionB, "bank-bus")}}})
	b := start(t, localstack.Config{OutboxTable: "bank-outbox", Source: "com.example.bank", BusName: "bank-bus", Region: regionB,
		ReconcileEvery: time.Hour,
		Consumers:      []localstack.Consumer{{Name: "statement", AggregateType: "Account", Handler: statementB.handle}},
		Forward:        []localstack.Forward{{Name: "audit", AggregateType: "Account", To: toA, ToBus: localstack.BusARN(regionA, "bank-bus")}}})
	toA.Bind(a.Bus)
	toB.Bind(b.Bus)

	inA := putRegional(t, a, regionA, "Account", "acc-a")
	inB := putRegional(t, b, regionB, "Account", "acc-b")
	settleAll(t, a, b)
	for _, env := range []outbox.Envelope{inA, inB} {
		if auditA.count(env.EventID) != 1 || statementB.count(env.EventID) != 1 {
			t.Errorf("event of %s applied %d times by audit (A), %d by statement (B); want 1 and 1",
				env.AggregateID, auditA.count(env.EventID), statementB.count(env.EventID))
		}
	}
	for _, c := range []struct {
		name string
		st   *localstack.Stack
		fwd  string
	}{{"A", a, "statement-forward"}, {"B", b, "audit-forward"}} {
		s := c.st.Bus.Stats()
		if s.Accepted != 2 || s.Forwarded != 1 || s.Deliveries[c.fwd] != 1 || s.DeadLettered[c.fwd] != 0 || s.NotForwardedAgain != 1 {
			t.Errorf("bus %s: accepted %d (want 2: its own and one forwarded), forwarded in %d (want 1), forwarded out %d (want 1), dead-lettered %d, not forwarded again %d (want 1)",
				c.name, s.Accepted, s.Forwarded, s.Deliveries[c.fwd], s.DeadLettered[c.fwd], s.NotForwardedAgain)
		}
	}
}

// refusingBus is a forward target failing every PutEvents with err.
type refusingBus struct {
	calls atomic.Int64
	err   error
}

func (r *refusingBus) PutEvents(context.Context, *eventbridge.PutEventsInput, ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	r.calls.Add(1)
	return nil, r.err
}

// A forward's target that keeps failing is retried as its RetryPolicy says
// and no more; an event whose retries or age ran out, or that the target
// refused for good (here a bus that is not bound yet: it does not exist),
// is on the forward's DLQ with EventBridge's attributes, and nothing else
// is lost or delivered twice.
func TestForwardRetryBoundAndDLQ(t *testing.T) {
	t.Parallel()
	throttled := &refusingBus{err: &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded"}}
	aging := &refusingBus{err: &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded"}}
	unbound := &localstack.ForwardTarget{}
	other := localstack.BusARN(regionB, "other-bus")
	st := start(t, localstack.Config{OutboxTable: "fwd-outbox", Source: "com.example.fwd", BusName: "fwd-bus", Region: regionA,
		ReconcileEvery: time.Hour,
		Forward: []localstack.Forward{
			{Name: "retries", AggregateType: "R", To: throttled, ToBus: other, RetryPolicy: &localrt.RetryPolicy{MaximumRetryAttempts: 3, MaximumEventAge: time.Hour}},
			{Name: "aged", AggregateType: "G", To: aging, ToBus: other, RetryPolicy: &localrt.RetryPolicy{MaximumRetryAttempts: 185, MaximumEventAge: 400 * time.Millisecond}},
			{Name: "unbound", AggregateType: "U", To: unbound, ToBus: other},
		}})
	envs := map[string]outbox.Envelope{"retries": putRegional(t, st, regionA, "R", "r-1"),
		"aged": putRegional(t, st, regionA, "G", "g-1"), "unbound": putRegional(t, st, regionA, "U", "u-1")}
	settleAll(t, st)

	if n := throttled.calls.Load(); n != 4 {
		t.Errorf("retries: target called %d times, want 4 (1 + MaximumRetryAttempts 3)", n)
	}
	if n := aging.calls.Load(); n < 2 || n >= 185 {
		t.Errorf("aged: target called %d times, want a few: the 400 ms age ends the retries long before 185", n)
	}
	want := map[string]struct{ code, exhausted string }{
		"retries": {sqsconsumer.RuleErrorThrottling, sqsconsumer.ExhaustedMaximumRetryAttempts},
		"aged":    {sqsconsumer.RuleErrorThrottling, sqsconsumer.ExhaustedMaximumEventAge},
		"unbound": {sqsconsumer.RuleErrorNoResource, ""},
	}
	for name, w := range want {
		dlq := st.ForwardDLQs[name]
		if dlq == nil || !strings.HasSuffix(dlq.URL(), "/"+name+"-forward-dlq") {
			t.Fatalf("forward %s: DLQ %v", name, dlq)
		}
		if u := st.QueueURLs()[name+"-forward-dlq"]; u != dlq.URL() {
			t.Errorf("QueueURLs names %q for %s's DLQ, want %q", u, name, dlq.URL())
		}
		out, err := dlq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlq.URL()), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("forward %s: DLQ has %d messages (%v), want 1", name, len(out.Messages), err)
		}
		m := out.Messages[0]
		if !strings.Contains(aws.ToString(m.Body), envs[name].EventID) {
			t.Errorf("forward %s: DLQ body %s is not the event of %s", name, aws.ToString(m.Body), envs[name].EventID)
		}
		at := func(k string) (string, bool) { v, ok := m.MessageAttributes[k]; return aws.ToString(v.StringValue), ok }
		if code, _ := at(sqsconsumer.AttrErrorCode); code != w.code {
			t.Errorf("forward %s: ERROR_CODE %q, want %q", name, code, w.code)
		}
		if ex, ok := at(sqsconsumer.AttrExhaustedRetryCondition); ex != w.exhausted || w.exhausted == "" && ok {
			t.Errorf("forward %s: EXHAUSTED_RETRY_CONDITION %q, want %q", name, ex, w.exhausted)
		}
		if arn, _ := at(sqsconsumer.AttrRuleARN); arn != st.Bus.RuleARN(name+"-forward") {
			t.Errorf("forward %s: RULE_ARN %q", name, arn)
		}
	}
}

// Suspend stops the Region: nothing is read, published or consumed while
// it is down — neither the records written meanwhile nor an event already
// on a consumer's queue — and Drain, ReconcileNow and SweepNow say so;
// Resume picks up where it stopped, and every event is applied once.
func TestSuspendResumeLosesNothing(t *testing.T) {
	t.Parallel()
	var got applied
	st := start(t, localstack.Config{OutboxTable: "down-outbox", Source: "com.example.down", BusName: "down-bus", Region: regionA,
		ReconcileEvery: time.Hour, Consumers: []localstack.Consumer{{Name: "things", AggregateType: "Thing", Handler: got.handle}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := []outbox.Envelope{putRegional(t, st, regionA, "Thing", "t-1"), putRegional(t, st, regionA, "Thing", "t-2")}
	settleAll(t, st)

	if err := st.Suspend(); err != nil {
		t.Fatal(err)
	}
	if err := st.Suspend(); !errors.Is(err, localstack.ErrSuspended) {
		t.Errorf("second Suspend = %v, want ErrSuspended", err)
	}
	delivered := st.Poller.Stats().RecordsDelivered
	var during []outbox.Envelope
	for _, id := range []string{"t-3", "t-4", "t-5"} {
		during = append(during, putRegional(t, st, regionA, "Thing", id))
	}
	// An event already on the consumer's queue waits there too.
	direct, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Thing", ID: "t-6", Sequence: 1},
		outbox.Event{Type: "ThingMade", Version: 1, Payload: map[string]string{"id": "t-6"}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	publishDirect(t, st, direct)
	time.Sleep(500 * time.Millisecond)
	if n := st.Poller.Stats().RecordsDelivered; n != delivered {
		t.Errorf("the stream poller delivered %d records while suspended", n-delivered)
	}
	for _, env := range append(during, direct) {
		if c := got.count(env.EventID); c != 0 {
			t.Errorf("event of %s applied %d times while suspended", env.AggregateID, c)
		}
	}
	if st.Consumers["things"].Queue.Len() != 1 {
		t.Errorf("consumer queue holds %d messages while suspended, want the 1 put on the bus", st.Consumers["things"].Queue.Len())
	}
	for name, err := range map[string]error{"Drain": st.Drain(ctx), "Settle": st.Settle(ctx), "ReconcileNow": st.ReconcileNow(ctx), "SweepNow": st.SweepNow(ctx)} {
		if !errors.Is(err, localstack.ErrSuspended) {
			t.Errorf("%s while suspended = %v, want ErrSuspended", name, err)
		}
	}
	if !st.Suspended() {
		t.Error("Suspended() = false while suspended")
	}

	if err := st.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := st.Resume(); !errors.Is(err, localstack.ErrNotSuspended) {
		t.Errorf("second Resume = %v, want ErrNotSuspended", err)
	}
	settleAll(t, st)
	for _, env := range append(append(before, during...), direct) {
		if c := got.count(env.EventID); c != 1 {
			t.Errorf("event of %s applied %d times, want 1", env.AggregateID, c)
		}
	}
	st.Close()
	if err := st.Suspend(); !errors.Is(err, localstack.ErrClosed) {
		t.Errorf("Suspend after Close = %v, want ErrClosed", err)
	}
}

// publishDirect puts env on the stack's bus as the relay would.
func publishDirect(t *testing.T, st *localstack.Stack, env outbox.Envelope) {
	t.Helper()
	detail, err := env.Detail()
	if err != nil {
		t.Fatal(err)
	}
	out, err := st.Bus.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
		EventBusName: aws.String(st.BusName), Source: aws.String(st.Source), DetailType: aws.String(env.EventType), Detail: aws.String(string(detail))}}})
	if err != nil || out.FailedEntryCount != 0 {
		t.Fatalf("PutEvents: %v %+v", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Bus.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}

// A record the relay of Region A missed is published by A's reconciler,
// which sweeps A's pending shards; a record of Region B in A's table is
// left to B.
func TestRegionReconcilerSweepsOwnShards(t *testing.T) {
	t.Parallel()
	var got applied
	st := start(t, localstack.Config{OutboxTable: "recon-outbox", Source: "com.example.recon", BusName: "recon-bus", Region: regionA,
		ReconcileEvery: time.Hour, ReconcileAfter: time.Millisecond,
		Consumers: []localstack.Consumer{{Name: "things", AggregateType: "Thing", Handler: got.handle}}})
	st.MissRecords(func(outbox.Envelope) bool { return true })
	mine := putRegional(t, st, regionA, "Thing", "t-a")
	theirs := putRegional(t, st, regionB, "Thing", "t-b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := st.ReconcileNow(ctx); err != nil {
		t.Fatal(err)
	}
	settleAll(t, st)
	if got.count(mine.EventID) != 1 || got.count(theirs.EventID) != 0 {
		t.Errorf("applied: own missed record %d (want 1, by the reconciler), other Region's %d (want 0)", got.count(mine.EventID), got.count(theirs.EventID))
	}
	if s := status(record(t, st, theirs)); s != outbox.StatusPending {
		t.Errorf("other Region's record %s, want it left %s", s, outbox.StatusPending)
	}
}

// In a Region, RedriveParked redrives the Region's own parked record into
// the Region's pending shards (relay.RedriveInRegion), which its
// reconciler then publishes, and leaves a parked record replicated from
// another Region to that Region (not counted, not an error).
func TestRegionRedriveParked(t *testing.T) {
	t.Parallel()
	var got applied
	st := start(t, localstack.Config{OutboxTable: "redrive-outbox", Source: "com.example.redrive", BusName: "redrive-bus", Region: regionA,
		ReconcileAfter: time.Millisecond, Consumers: []localstack.Consumer{{Name: "things", AggregateType: "Thing", Handler: got.handle}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.RejectDetailTypes("ThingMade"); err != nil {
		t.Fatal(err)
	}
	mine := putRegional(t, st, regionA, "Thing", "t-a")
	settleAll(t, st)
	theirs := putRegional(t, st, regionB, "Thing", "t-b")
	if _, err := st.DDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(st.OutboxTable),
		Key:                       outbox.KeyFor(theirs.AggregateType, theirs.AggregateID, theirs.Sequence, 0).AttributeValues(),
		UpdateExpression:          aws.String("SET #s = :parked REMOVE #shard"),
		ExpressionAttributeNames:  map[string]string{"#s": outbox.AttrStatus, "#shard": outbox.AttrPendingShard},
		ExpressionAttributeValues: map[string]types.AttributeValue{":parked": &types.AttributeValueMemberS{Value: outbox.StatusParked}},
	}); err != nil {
		t.Fatal(err)
	}
	if parked, err := st.Parked(ctx); err != nil || len(parked) != 2 {
		t.Fatalf("Parked = %+v, %v; want the own record (refused) and the other Region's", parked, err)
	}
	st.StopRejecting()
	if n, err := st.RedriveParked(ctx); n != 1 || err != nil {
		t.Fatalf("RedriveParked = %d, %v; want 1 (the own record only)", n, err)
	}
	if shard := record(t, st, mine)[outbox.AttrPendingShard]; shard == nil || !strings.HasPrefix(shard.(*types.AttributeValueMemberS).Value, regionA+"#") {
		t.Errorf("redriven record's pending shard %v, want one of %s's", shard, regionA)
	}
	time.Sleep(5 * time.Millisecond)
	if err := st.ReconcileNow(ctx); err != nil {
		t.Fatal(err)
	}
	settleAll(t, st)
	if got.count(mine.EventID) != 1 || status(record(t, st, mine)) != outbox.StatusPublished {
		t.Errorf("own record after the redrive: applied %d, %s; want 1, %s", got.count(mine.EventID), status(record(t, st, mine)), outbox.StatusPublished)
	}
	if s := status(record(t, st, theirs)); s != outbox.StatusParked || got.count(theirs.EventID) != 0 {
		t.Errorf("other Region's record %s, applied %d; want it left %s, unapplied", s, got.count(theirs.EventID), outbox.StatusParked)
	}
}

// The legacy owner's reconciler (Config.LegacyOwner) also publishes a
// record written before the table went multi-Region (no origin Region, in a
// plain pNN shard); another Region's stack leaves it pending.
func TestLegacyOwnerPublishesUnstampedRecords(t *testing.T) {
	t.Parallel()
	for _, owner := range []bool{true, false} {
		var got applied
		st := start(t, localstack.Config{OutboxTable: "legacy-outbox", Source: "com.example.legacy", BusName: "legacy-bus", Region: regionA,
			LegacyOwner: owner, ReconcileEvery: time.Hour, ReconcileAfter: time.Millisecond,
			Consumers: []localstack.Consumer{{Name: "things", AggregateType: "Thing", Handler: got.handle}}})
		old := putRegional(t, st, "", "Thing", "t-old")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := st.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		if err := st.ReconcileNow(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		settleAll(t, st)
		want, wantStatus := 0, outbox.StatusPending
		if owner {
			want, wantStatus = 1, outbox.StatusPublished
		}
		if n := got.count(old.EventID); n != want {
			t.Errorf("LegacyOwner=%v: the unstamped record applied %d times, want %d", owner, n, want)
		}
		if s := status(record(t, st, old)); s != wantStatus {
			t.Errorf("LegacyOwner=%v: the unstamped record is %s, want %s", owner, s, wantStatus)
		}
	}
}
