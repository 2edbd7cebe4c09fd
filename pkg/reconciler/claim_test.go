package reconciler_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// isDueQuery reports whether a Query is the sweep's (not the count or the
// oldest-record read).
func isDueQuery(in *dynamodb.QueryInput) bool {
	return in.Select != ddbtypes.SelectCount && in.ProjectionExpression == nil
}

// barrierQuery holds every due-record Query until n of them arrived, so that
// n runs read the same pending records before any of them publishes: two
// overlapping runs (a run retried by Lambda and the next scheduled one).
type barrierQuery struct {
	reconciler.DynamoDBAPI
	wg *sync.WaitGroup
}

func (q barrierQuery) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := q.DynamoDBAPI.Query(ctx, in, opts...)
	if isDueQuery(in) && in.ExclusiveStartKey == nil {
		q.wg.Done()
		q.wg.Wait()
	}
	return out, err
}

// TestOverlappingRunsPublishOnce: two reconciler runs that read the same
// 10-minute-old pending record at the same time publish it once; the other
// run finds it claimed.
func TestOverlappingRunsPublishOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	env := f.write(t, "overlap", 10*time.Minute)
	var barrier sync.WaitGroup
	barrier.Add(2)
	q := barrierQuery{DynamoDBAPI: f.env.DDB, wg: &barrier}
	reports := make([]reconciler.Report, 2)
	var wg sync.WaitGroup
	for i := range reports {
		rc := f.reconciler(t, q, io.Discard, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := rc.Run(context.Background())
			if err != nil {
				t.Error(err)
			}
			reports[i] = rep
		}()
	}
	wg.Wait()
	if n := len(f.eb.sent); n != 1 {
		t.Fatalf("PutEvents carried the record %d times, want 1 (reports %+v)", n, reports)
	}
	if r := reports[0].Resent + reports[1].Resent; r != 1 || reports[0].Skipped+reports[1].Skipped != 1 {
		t.Errorf("reports %+v, want one resent and one skipped", reports)
	}
	if rec := f.record(t, env); rec.Status != outbox.StatusPublished {
		t.Errorf("record %+v, want PUBLISHED", rec)
	}
}

// staleIndex answers the sweep with a fixed (stale) copy of pending records,
// as an eventually consistent index may, while UpdateItem goes to the base
// table.
type staleIndex struct {
	reconciler.DynamoDBAPI
	items []map[string]ddbtypes.AttributeValue
}

func (q staleIndex) Query(_ context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if in.Select == ddbtypes.SelectCount {
		return &dynamodb.QueryOutput{Count: int32(len(q.items))}, nil
	}
	return &dynamodb.QueryOutput{Items: q.items}, nil
}

// TestStaleIndexCopyIsNotRepublished: the pending index still shows a record
// the base table has as PUBLISHED (or PARKED): nothing is sent and the
// record keeps the details of the publish that marked it.
func TestStaleIndexCopyIsNotRepublished(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		finish func(t *testing.T, f fixture, env outbox.Envelope)
		status string
	}{
		{"published", func(t *testing.T, f fixture, env outbox.Envelope) {
			if err := f.relay.Marker().MarkPublished(context.Background(), outbox.KeyFor("Order", env.AggregateID, 1, 0), env, "bus-first"); err != nil {
				t.Fatal(err)
			}
		}, outbox.StatusPublished},
		{"parked", func(t *testing.T, f fixture, env outbox.Envelope) {
			if errs := f.relay.Marker().MarkAll(context.Background(), []relayMark{parkMark(env)}); errs[0] != nil {
				t.Fatal(errs[0])
			}
		}, outbox.StatusParked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, 1)
			env := f.write(t, "stale", 10*time.Minute)
			stale := outbox.NewRecord(env, 0, 1).Item() // the pending copy, as the index last saw it
			tt.finish(t, f, env)
			rep, err := f.reconciler(t, staleIndex{DynamoDBAPI: f.env.DDB, items: []map[string]ddbtypes.AttributeValue{stale}}, io.Discard, nil).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(f.eb.sent) != 0 || rep.Resent != 0 || rep.Skipped != 1 {
				t.Fatalf("sent %v, report %+v; want nothing sent, 1 skipped", f.eb.sent, rep)
			}
			rec := f.record(t, env)
			if rec.Status != tt.status {
				t.Errorf("status %s, want %s", rec.Status, tt.status)
			}
		})
	}
}

// TestClaimLapsesAfterTheLease: a record claimed by a run that could not
// publish it is left alone by runs within the lease and taken by the first
// run after it.
func TestClaimLapsesAfterTheLease(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	env := f.write(t, "lease", 10*time.Minute)
	f.eb.fail = func(string) string { return "ThrottlingException" }
	now := time.Now()
	at := func(d time.Duration) func(*reconciler.Config) {
		return func(c *reconciler.Config) { c.Now = func() time.Time { return now.Add(d) } }
	}
	if rep, err := f.reconciler(t, f.env.DDB, io.Discard, at(0)).Run(context.Background()); err != nil || rep.Failed != 1 {
		t.Fatalf("first run %+v %v, want 1 failed", rep, err)
	}
	sent := len(f.eb.sent)
	f.eb.mu.Lock()
	f.eb.fail = nil
	f.eb.mu.Unlock()
	lease := 2 * 45 * time.Second // the default: 2 × Budget
	if rep, err := f.reconciler(t, f.env.DDB, io.Discard, at(lease-time.Second)).Run(context.Background()); err != nil || rep.Skipped != 1 || len(f.eb.sent) != sent {
		t.Fatalf("run within the lease %+v %v: sent %d more, want the record skipped", rep, err, len(f.eb.sent)-sent)
	}
	if rep, err := f.reconciler(t, f.env.DDB, io.Discard, at(lease+time.Second)).Run(context.Background()); err != nil || rep.Resent != 1 {
		t.Fatalf("run after the lease %+v %v, want 1 resent", rep, err)
	}
	if rec := f.record(t, env); rec.Status != outbox.StatusPublished {
		t.Errorf("record %+v", rec)
	}
}

// TestReconcilerKeepsAggregateOrder: stale records of one aggregate, in
// whatever shards their event ids hash to, are re-published in sequence
// order; when one is not published the later ones are held back, while
// other aggregates flow.
func TestReconcilerKeepsAggregateOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		failSeq  int64 // A's sequence that is throttled for good; 0 = none
		pageSize int   // 0: the default
		wantSent []string
		heldBack int
	}{
		{"all published in order", 0, 0, []string{"A1", "A2", "A3", "A4", "B1"}, 0},
		{"pages of one record: shards merged by age", 0, 1, []string{"A1", "A2", "A3", "A4", "B1"}, 0},
		{"A2 throttled: A3 and A4 held back", 2, 0, []string{"A1", "B1"}, 2},
		{"A2 throttled, pages of one record", 2, 1, []string{"A1", "B1"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, 16)
			names := map[string]string{}
			// A's later records sit in a shard before its earlier ones
			// (p00 holds A3, A4; p05 holds A1, A2): read shard by shard,
			// A3 would come first.
			var a []outbox.Envelope
			for _, x := range []struct {
				seq   int64
				shard int
			}{{1, 5}, {2, 5}, {3, 0}, {4, 0}} {
				e := f.writeInShard(t, "A", x.seq, time.Hour-time.Duration(x.seq)*time.Second, x.shard)
				a = append(a, e)
				names[e.EventID] = fmt.Sprint("A", x.seq)
			}
			b := f.writeInShard(t, "B", 1, 30*time.Minute, 9)
			names[b.EventID] = "B1"
			if tt.failSeq != 0 {
				failID := a[tt.failSeq-1].EventID
				f.eb.fail = func(id string) string {
					if id == failID {
						return "ThrottlingException"
					}
					return ""
				}
			}
			rep, err := f.reconciler(t, f.env.DDB, io.Discard, func(c *reconciler.Config) { c.PageSize = tt.pageSize }).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var accepted []string
			for _, id := range f.eb.sent {
				if tt.failSeq != 0 && id == a[tt.failSeq-1].EventID {
					continue
				}
				accepted = append(accepted, names[id])
			}
			// A's events in sequence order; B anywhere.
			var aOrder []string
			for _, n := range accepted {
				if n[0] == 'A' {
					aOrder = append(aOrder, n)
				}
			}
			if fmt.Sprint(sortedCopy(accepted)) != fmt.Sprint(tt.wantSent) {
				t.Errorf("published %v, want %v", accepted, tt.wantSent)
			}
			if fmt.Sprint(aOrder) != fmt.Sprint(sortedCopy(aOrder)) {
				t.Errorf("A published out of order: %v", aOrder)
			}
			if rep.HeldBack != tt.heldBack {
				t.Errorf("report %+v, want %d held back", rep, tt.heldBack)
			}
		})
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

type relayMark = relay.Mark

// parkMark is a permanent-failure mark of env (MarkAll parks it).
func parkMark(env outbox.Envelope) relay.Mark {
	return relay.Mark{Key: outbox.KeyFor("Order", env.AggregateID, env.Sequence, 0), Envelope: env,
		Result: relay.Result{Status: relay.PermanentFailure, ErrorCode: "MalformedDetail", ErrorMessage: "test"}}
}

// writeInShard commits the outbox record of aggregate id at sequence seq,
// that occurred age ago, with an event id that hashes to pending shard
// shard (of the fixture's shard count).
func (f fixture) writeInShard(t *testing.T, id string, seq int64, age time.Duration, shard int) outbox.Envelope {
	t.Helper()
	for range 10000 {
		env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: id, Sequence: seq},
			outbox.Event{Type: "OrderPlaced", Version: 1, Payload: map[string]string{"id": id}}, outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		if outbox.PendingShard(env.EventID, f.shards) != outbox.ShardName(shard) {
			continue
		}
		env.OccurredAt = env.OccurredAt.Add(-age)
		if err := f.writer.Write(context.Background(), nil, []outbox.Envelope{env}); err != nil {
			t.Fatal(err)
		}
		return env
	}
	t.Fatalf("no event id hashes to shard %d", shard)
	return outbox.Envelope{}
}

// TestReconcilerClearsRequestsRejectedWhole: three stale records of about
// 50 KB that the bus refuses together as too large are re-published in
// smaller requests (the reconciler uses the relay's Publisher), so the
// backlog clears instead of being re-sent as it was, run after run.
func TestReconcilerClearsRequestsRejectedWhole(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	for i := range 3 {
		env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: fmt.Sprint("big", i), Sequence: 1},
			outbox.Event{Type: "OrderPlaced", Version: 1, Payload: map[string]string{"pad": strings.Repeat("x", 50*1024)}}, outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		env.OccurredAt = env.OccurredAt.Add(-10 * time.Minute)
		if err := f.writer.Write(context.Background(), nil, []outbox.Envelope{env}); err != nil {
			t.Fatal(err)
		}
	}
	f.eb.reject = func(n int) error {
		if n > 1 {
			return &smithy.GenericAPIError{Code: "ValidationException", Message: "Total size of the entries in the request is over the limit."}
		}
		return nil
	}
	rep, err := f.reconciler(t, f.env.DDB, io.Discard, nil).Run(context.Background())
	if err != nil || rep.Resent != 3 || rep.Failed != 0 {
		t.Fatalf("report %+v, err %v; want 3 resent", rep, err)
	}
	if f.eb.calls != 5 {
		t.Errorf("PutEvents calls %d, want 5 (3 refused → 1 + 2 → 1 + 1)", f.eb.calls)
	}
}
