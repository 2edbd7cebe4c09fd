package order_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// flakyWriter cancels the first fail TransactWriteItems calls with a
// TransactionConflict reason on the first action, then passes through.
type flakyWriter struct {
	next  outbox.TransactWriter
	fail  int32
	calls atomic.Int32
}

func (f *flakyWriter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if f.calls.Add(1) <= f.fail {
		reasons := make([]types.CancellationReason, len(in.TransactItems))
		for i := range reasons {
			reasons[i].Code = aws.String(outbox.ReasonNone)
		}
		reasons[0].Code = aws.String(outbox.ReasonTransactionConflict)
		return nil, &types.TransactionCanceledException{Message: aws.String("conflict"), CancellationReasons: reasons}
	}
	return f.next.TransactWriteItems(ctx, in, opts...)
}

type repoFixture struct {
	env            *ddbtest.Env
	orders, outbox string
	flaky          *flakyWriter
}

func newRepoFixture(t *testing.T) *repoFixture {
	t.Helper()
	env := ddbtest.New(t)
	f := &repoFixture{env: env, orders: ddbtest.Name("orders"), outbox: ddbtest.Name("outbox")}
	env.CreateTable(t, order.CreateTableInput(f.orders))
	env.CreateTable(t, outbox.CreateTableInput(f.outbox))
	f.flaky = &flakyWriter{next: env.DDB}
	return f
}

func (f *repoFixture) repo(t *testing.T, now func() time.Time) *order.Repository {
	t.Helper()
	w, err := outbox.NewWriter(f.flaky, outbox.WriterConfig{Source: appenv.EventSource, Table: f.outbox})
	if err != nil {
		t.Fatal(err)
	}
	r, err := order.NewRepository(order.RepositoryConfig{Table: f.orders, Client: f.env.DDB, Writer: w, Now: now, BaseBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *repoFixture) count(t *testing.T, table string) int32 {
	t.Helper()
	out, err := f.env.DDB.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), Select: types.SelectCount, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Count
}

func place(t *testing.T, id string) (*order.Order, []outbox.Event) {
	t.Helper()
	o, evs, err := order.Place(order.PlaceInput{ID: id, CustomerID: "c", AmountMinor: 100, Currency: "EUR"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return o, evs
}

func TestRepositoryUpdateRules(t *testing.T) {
	t.Parallel()
	f := newRepoFixture(t)
	repo := f.repo(t, nil)
	ctx := context.Background()
	o, evs := place(t, "o-1")
	got, created, err := repo.Create(ctx, o, evs, order.CreateMeta{})
	if err != nil || !created || got.Version != 1 {
		t.Fatalf("create: %v %v %+v", err, created, got)
	}
	if _, _, err := repo.Create(ctx, o, evs, order.CreateMeta{}); !errors.Is(err, order.ErrAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := repo.Get(ctx, "missing"); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := repo.Update(ctx, "missing", func(o *order.Order) ([]outbox.Event, error) { return o.Pay(time.Now()) }, order.UpdateMeta{}); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	orders, records := f.count(t, f.orders), f.count(t, f.outbox)

	// A change without events is refused and writes nothing.
	_, err = repo.Update(ctx, "o-1", func(o *order.Order) ([]outbox.Event, error) {
		o.Status = order.StatusPaid
		o.Version++
		return nil, nil
	}, order.UpdateMeta{})
	if !errors.Is(err, outbox.ErrNoEvents) {
		t.Fatalf("no events: %v", err)
	}
	// fn's own error passes through unchanged.
	if _, err := repo.Update(ctx, "o-1", func(o *order.Order) ([]outbox.Event, error) { return o.Ship(time.Now()) }, order.UpdateMeta{}); !errors.Is(err, order.ErrInvalidTransition) {
		t.Fatalf("ship placed: %v", err)
	}
	// A version that does not move with the events is refused.
	if _, err := repo.Update(ctx, "o-1", func(o *order.Order) ([]outbox.Event, error) {
		evs, err := o.Pay(time.Now())
		o.Version = 7
		return evs, err
	}, order.UpdateMeta{}); err == nil {
		t.Fatal("version jump accepted")
	}
	// ExpectedVersion mismatch.
	if _, err := repo.Update(ctx, "o-1", func(o *order.Order) ([]outbox.Event, error) { return o.Pay(time.Now()) }, order.UpdateMeta{ExpectedVersion: 2}); !errors.Is(err, order.ErrVersionConflict) {
		t.Fatalf("expected version: %v", err)
	}
	// A concurrent change between read and write fails the version condition.
	_, err = repo.Update(ctx, "o-1", func(o *order.Order) ([]outbox.Event, error) {
		if _, err := repo.Update(ctx, "o-1", func(o *order.Order) ([]outbox.Event, error) { return o.Pay(time.Now()) }, order.UpdateMeta{}); err != nil {
			t.Errorf("inner update: %v", err)
		}
		return o.Cancel("", time.Now())
	}, order.UpdateMeta{})
	if !errors.Is(err, order.ErrVersionConflict) {
		t.Fatalf("lost race: %v", err)
	}
	if o, _ := repo.Get(ctx, "o-1"); o.Status != order.StatusPaid || o.Version != 2 {
		t.Fatalf("after race: %+v", o)
	}
	if got := f.count(t, f.outbox); got != records+1 || f.count(t, f.orders) != orders {
		t.Fatalf("outbox %d (want %d)", got, records+1)
	}

	// Two events in one change each get their own sequence.
	o2, evs2 := place(t, "o-2")
	if _, _, err := repo.Create(ctx, o2, evs2, order.CreateMeta{}); err != nil {
		t.Fatal(err)
	}
	both, err := repo.Update(ctx, "o-2", func(o *order.Order) ([]outbox.Event, error) {
		a, err := o.Pay(time.Now())
		if err != nil {
			return nil, err
		}
		b, err := o.Ship(time.Now())
		return append(a, b...), err
	}, order.UpdateMeta{})
	if err != nil || both.Version != 3 || both.Status != order.StatusShipped {
		t.Fatalf("pay+ship: %v %+v", err, both)
	}
}

func TestRepositoryRetriesTransactionConflicts(t *testing.T) {
	t.Parallel()
	f := newRepoFixture(t)
	repo := f.repo(t, nil)
	ctx := context.Background()
	o, evs := place(t, "o-1")
	if _, _, err := repo.Create(ctx, o, evs, order.CreateMeta{Actor: "arn:aws:iam::123456789012:user/a", IdempotencyKey: "k", RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	pay := func(o *order.Order) ([]outbox.Event, error) { return o.Pay(time.Now()) }

	f.flaky.calls.Store(0)
	f.flaky.fail = 2
	got, err := repo.Update(ctx, "o-1", pay, order.UpdateMeta{})
	if err != nil || got.Version != 2 || f.flaky.calls.Load() != 3 {
		t.Fatalf("after 2 conflicts: %v %+v calls=%d", err, got, f.flaky.calls.Load())
	}

	f.flaky.calls.Store(0)
	f.flaky.fail = 100
	ship := func(o *order.Order) ([]outbox.Event, error) { return o.Ship(time.Now()) }
	if _, err := repo.Update(ctx, "o-1", ship, order.UpdateMeta{}); !errors.Is(err, order.ErrVersionConflict) {
		t.Fatalf("exhausted: %v", err)
	}
	if n := f.flaky.calls.Load(); n != order.DefaultMaxAttempts {
		t.Fatalf("%d attempts, want %d", n, order.DefaultMaxAttempts)
	}
	if n := f.count(t, f.outbox); n != 2 {
		t.Fatalf("outbox %d records, want 2", n)
	}
}

func TestRepositoryIdempotencyExpiry(t *testing.T) {
	t.Parallel()
	f := newRepoFixture(t)
	ctx := context.Background()
	now := time.Now()
	first := f.repo(t, func() time.Time { return now })
	o, evs := place(t, "o-1")
	if _, created, err := first.Create(ctx, o, evs, order.CreateMeta{Actor: "a", IdempotencyKey: "k", RequestHash: "h1"}); err != nil || !created {
		t.Fatal(err)
	}
	o2, evs2 := place(t, "o-2")
	if _, _, err := first.Create(ctx, o2, evs2, order.CreateMeta{Actor: "a", IdempotencyKey: "k", RequestHash: "h2"}); !errors.Is(err, order.ErrIdempotencyKeyReused) {
		t.Fatalf("reuse: %v", err)
	}
	if _, _, err := first.Create(ctx, o2, evs2, order.CreateMeta{Actor: "a", IdempotencyKey: "k"}); !errors.Is(err, order.ErrValidation) {
		t.Fatalf("missing hash: %v", err)
	}
	// 25 h later the key is free again, even before TTL deletes the record.
	later := f.repo(t, func() time.Time { return now.Add(25 * time.Hour) })
	got, created, err := later.Create(ctx, o2, evs2, order.CreateMeta{Actor: "a", IdempotencyKey: "k", RequestHash: "h2"})
	if err != nil || !created || got.ID != "o-2" {
		t.Fatalf("after expiry: %v %v %+v", err, created, got)
	}
	if n := f.count(t, f.orders); n != 3 {
		t.Fatalf("orders table %d items, want 2 orders + 1 idempotency record", n)
	}
}

// TestRepositoryActorScopesIdempotencyAndIsStored: an idempotency key
// belongs to the actor's scope (sessions of one role share it, other
// principals do not), and the actor is stored on the order and in each
// envelope.
func TestRepositoryActorScopesIdempotencyAndIsStored(t *testing.T) {
	t.Parallel()
	f := newRepoFixture(t)
	repo := f.repo(t, nil)
	ctx := context.Background()
	const (
		session1 = "arn:aws:sts::123456789012:assumed-role/checkout/task-1"
		session2 = "arn:aws:sts::123456789012:assumed-role/checkout/task-2"
		other    = "arn:aws:sts::123456789012:assumed-role/reporting/task-1"
		ops      = "arn:aws:iam::123456789012:user/ops"
	)
	o1, evs1 := place(t, "o-1")
	first, created, err := repo.Create(ctx, o1, evs1, order.CreateMeta{Actor: session1, IdempotencyKey: "k", RequestHash: "h"})
	if err != nil || !created || first.CreatedBy != session1 || first.UpdatedBy != session1 {
		t.Fatalf("create: %v %v %+v", err, created, first)
	}
	o2, evs2 := place(t, "o-2")
	again, created, err := repo.Create(ctx, o2, evs2, order.CreateMeta{Actor: session2, IdempotencyKey: "k", RequestHash: "h"})
	if err != nil || created || again.ID != "o-1" {
		t.Fatalf("another session of the role: %v %v %+v, want the first order", err, created, again)
	}
	o3, evs3 := place(t, "o-3")
	third, created, err := repo.Create(ctx, o3, evs3, order.CreateMeta{Actor: other, IdempotencyKey: "k", RequestHash: "h"})
	if err != nil || !created || third.ID != "o-3" {
		t.Fatalf("another role: %v %v %+v, want its own order", err, created, third)
	}
	paid, err := repo.Update(ctx, "o-1", func(o *order.Order) ([]outbox.Event, error) { return o.Pay(time.Now()) }, order.UpdateMeta{Actor: ops})
	if err != nil || paid.UpdatedBy != ops || paid.CreatedBy != session1 {
		t.Fatalf("update: %v %+v", err, paid)
	}
	got, err := repo.Get(ctx, "o-1")
	if err != nil || got.CreatedBy != session1 || got.UpdatedBy != ops {
		t.Fatalf("stored order: %v %+v", err, got)
	}
	if _, _, err := repo.Create(ctx, o3, evs3, order.CreateMeta{IdempotencyKey: "k2", RequestHash: "h"}); !errors.Is(err, order.ErrValidation) {
		t.Fatalf("key without actor: %v", err)
	}
	if _, _, err := repo.Create(ctx, o3, evs3, order.CreateMeta{Actor: "bad actor"}); !errors.Is(err, order.ErrValidation) {
		t.Fatalf("invalid actor: %v", err)
	}
}

// TestRepositoryLogsActor: each committed event's log record carries the
// actor and causation id.
func TestRepositoryLogsActor(t *testing.T) {
	t.Parallel()
	f := newRepoFixture(t)
	var buf bytes.Buffer
	w, err := outbox.NewWriter(f.env.DDB, outbox.WriterConfig{Source: appenv.EventSource, Table: f.outbox})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := order.NewRepository(order.RepositoryConfig{Table: f.orders, Client: f.env.DDB, Writer: w, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	o, evs := place(t, "o-log")
	if _, _, err := repo.Create(context.Background(), o, evs, order.CreateMeta{Actor: "local:alice", CausationID: "req-1"}); err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &rec); err != nil {
		t.Fatalf("log %q: %v", buf.String(), err)
	}
	if rec["actor"] != "local:alice" || rec["causation_id"] != "req-1" || rec["aggregate_id"] != "o-log" {
		t.Fatalf("log record %v", rec)
	}
}
