package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
)

// clock is a settable test clock for Config.Now.
type clock struct{ off atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// counting wraps a DynamoDB client and counts calls per operation.
type counting struct {
	idempotency.API
	gets, puts, updates, deletes atomic.Int64
}

func (c *counting) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.gets.Add(1)
	return c.API.GetItem(ctx, in, o...)
}
func (c *counting) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.puts.Add(1)
	return c.API.PutItem(ctx, in, o...)
}
func (c *counting) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.updates.Add(1)
	return c.API.UpdateItem(ctx, in, o...)
}
func (c *counting) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c.deletes.Add(1)
	return c.API.DeleteItem(ctx, in, o...)
}
func (c *counting) total() int64 {
	return c.gets.Load() + c.puts.Load() + c.updates.Load() + c.deletes.Load()
}

type fixture struct {
	env   *ddbtest.Env
	calls *counting
	clock *clock
	store *idempotency.Store
	table string
}

// newFixture starts Dynoxide, creates an idempotency table and a Store on
// it; edit adjusts the Config first.
func newFixture(t *testing.T, edit func(*idempotency.Config)) *fixture {
	t.Helper()
	env := ddbtest.New(t)
	table := ddbtest.Name("idem")
	env.CreateTable(t, idempotency.CreateTableInput(table))
	f := &fixture{env: env, calls: &counting{API: env.DDB}, clock: &clock{}, table: table}
	cfg := idempotency.Config{Table: table, Namespace: "test", Now: f.clock.Now, Logger: slog.New(slog.DiscardHandler)}
	if edit != nil {
		edit(&cfg)
	}
	s, err := idempotency.NewStore(f.calls, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.store = s
	return f
}

// item reads key's record (nil when absent).
func (f *fixture) item(t *testing.T, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := f.env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(f.table), Key: f.store.Key(key), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func status(item map[string]types.AttributeValue) string {
	if v, ok := item[idempotency.AttrStatus].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

var errCrash = errors.New("simulated crash before COMPLETED")

func TestConcurrentDuplicatesRunTheEffectOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const n = 16
	var runs atomic.Int64
	effect := func(ctx context.Context) ([]byte, error) {
		runs.Add(1)
		time.Sleep(300 * time.Millisecond) // hold the record IN_PROGRESS while the others arrive
		return []byte("shipment-1"), nil
	}
	var wg sync.WaitGroup
	var start sync.WaitGroup
	start.Add(1)
	results := make([]idempotency.Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			results[i], errs[i] = f.store.Do(context.Background(), "evt-1", "h1", effect)
		}()
	}
	start.Done()
	wg.Wait()
	if got := runs.Load(); got != 1 {
		t.Fatalf("effect ran %d times, want 1", got)
	}
	var ran, inProgress, replayed int
	for i := range n {
		switch {
		case errs[i] == nil && results[i].Source == idempotency.SourceRun:
			ran++
		case errs[i] == nil && results[i].Source == idempotency.SourceStore:
			replayed++
		case errors.Is(errs[i], idempotency.ErrInProgress):
			inProgress++
			continue
		default:
			t.Fatalf("call %d: unexpected (%+v, %v)", i, results[i], errs[i])
		}
		if string(results[i].Data) != "shipment-1" {
			t.Errorf("call %d: data %q", i, results[i].Data)
		}
	}
	if ran != 1 || ran+inProgress+replayed != n {
		t.Fatalf("ran %d, in progress %d, replayed %d", ran, inProgress, replayed)
	}
	m := f.store.Metrics()
	if m.Runs != 1 || m.InProgress != int64(inProgress) || m.StoreHits != int64(replayed) {
		t.Fatalf("metrics %+v", m)
	}
	// After completion every repeat is a replay.
	res, err := f.store.Do(context.Background(), "evt-1", "h1", effect)
	if err != nil || res.Source != idempotency.SourceStore || string(res.Data) != "shipment-1" || runs.Load() != 1 {
		t.Fatalf("repeat after completion: %+v %v (runs %d)", res, err, runs.Load())
	}
}

func TestTimedOutInProgressRecordIsTakenOverAfterItsExpiry(t *testing.T) {
	t.Parallel()
	crash := true
	f := newFixture(t, func(c *idempotency.Config) {
		c.BeforeComplete = func(context.Context, string) error {
			if crash {
				return errCrash
			}
			return nil
		}
	})
	var runs atomic.Int64
	effect := func(context.Context) ([]byte, error) { runs.Add(1); return []byte("ok"), nil }

	// The first invocation has 2 s left and "dies" after its effect.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := f.store.Do(ctx, "k", "h", effect); !errors.Is(err, errCrash) {
		t.Fatalf("first call: %v", err)
	}
	if st := status(f.item(t, "k")); st != idempotency.StatusInProgress {
		t.Fatalf("after the crash the record is %q, want IN_PROGRESS", st)
	}
	crash = false
	// Before the in-progress expiry (the dead invocation's deadline) the key is blocked.
	if _, err := f.store.Do(context.Background(), "k", "h", effect); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("before expiry: %v, want ErrInProgress", err)
	}
	// After it, the next attempt takes the record over and runs again.
	f.clock.Advance(3 * time.Second)
	res, err := f.store.Do(context.Background(), "k", "h", effect)
	if err != nil || res.Source != idempotency.SourceRun {
		t.Fatalf("after expiry: %+v %v", res, err)
	}
	if runs.Load() != 2 {
		t.Fatalf("effect ran %d times, want 2 (the window no library closes)", runs.Load())
	}
	if m := f.store.Metrics(); m.TakenOver != 1 || m.InProgress != 1 {
		t.Fatalf("metrics %+v", m)
	}
	if st := status(f.item(t, "k")); st != idempotency.StatusCompleted {
		t.Fatalf("record %q, want COMPLETED", st)
	}
}

func TestNoDeadlineUsesInProgressExpiry(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *idempotency.Config) {
		c.InProgressExpiry = time.Minute
		c.BeforeComplete = func(context.Context, string) error { return errCrash }
	})
	effect := func(context.Context) ([]byte, error) { return nil, nil }
	if _, err := f.store.Do(context.Background(), "k", "", effect); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	f.clock.Advance(30 * time.Second)
	if _, err := f.store.Do(context.Background(), "k", "", effect); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("within InProgressExpiry: %v", err)
	}
	f.clock.Advance(31 * time.Second)
	if _, err := f.store.Do(context.Background(), "k", "", effect); !errors.Is(err, errCrash) {
		t.Fatalf("after InProgressExpiry the effect should run again: %v", err)
	}
}

func TestSameKeyOtherPayloadIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *idempotency.Config) { c.CacheSize = 8 })
	block := make(chan struct{})
	started := make(chan struct{})
	go func() {
		_, _ = f.store.Do(context.Background(), "busy", "A", func(context.Context) ([]byte, error) {
			close(started)
			<-block
			return nil, nil
		})
	}()
	<-started
	defer close(block)
	if _, err := f.store.Do(context.Background(), "done", "A", func(context.Context) ([]byte, error) { return []byte("r"), nil }); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, key, hash string
		want            error
	}{
		{"completed, other payload (from cache)", "done", "B", idempotency.ErrPayloadMismatch},
		{"in progress, other payload", "busy", "B", idempotency.ErrPayloadMismatch},
		{"in progress, same payload", "busy", "A", idempotency.ErrInProgress},
		{"completed, same payload", "done", "A", nil},
		{"completed, validation off for this call", "done", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.store.Do(context.Background(), tc.key, tc.hash, func(context.Context) ([]byte, error) {
				t.Error("effect ran")
				return nil, nil
			})
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
	// The DynamoDB path (no cache) refuses too.
	g := newFixture(t, nil)
	if _, err := g.store.Do(context.Background(), "k", "A", func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := g.store.Do(context.Background(), "k", "B", func(context.Context) ([]byte, error) { return nil, nil }); !errors.Is(err, idempotency.ErrPayloadMismatch) {
		t.Fatalf("store path: %v", err)
	}
	if m := g.store.Metrics(); m.PayloadMismatches != 1 || m.Runs != 1 {
		t.Fatalf("metrics %+v", m)
	}
}

func TestFailureDeletesTheRecordSoARetryRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	boom := fmt.Errorf("provider: %w", errors.ErrUnsupported)
	var runs atomic.Int64
	_, err := f.store.Do(context.Background(), "k", "h", func(context.Context) ([]byte, error) { runs.Add(1); return nil, boom })
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("err %v: the effect's error must come back unchanged", err)
	}
	if it := f.item(t, "k"); it != nil {
		t.Fatalf("record still there after failure: %v", status(it))
	}
	res, err := f.store.Do(context.Background(), "k", "h", func(context.Context) ([]byte, error) { runs.Add(1); return []byte("2nd"), nil })
	if err != nil || res.Source != idempotency.SourceRun || runs.Load() != 2 {
		t.Fatalf("retry: %+v %v runs %d", res, err, runs.Load())
	}
	if m := f.store.Metrics(); m.Failures != 1 || m.Runs != 2 {
		t.Fatalf("metrics %+v", m)
	}
}

func TestCompletedRecordPastItsExpiryRunsAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *idempotency.Config) { c.Expiry = 10 * time.Second })
	var runs atomic.Int64
	effect := func(context.Context) ([]byte, error) { return []byte(fmt.Sprint(runs.Add(1))), nil }
	for _, step := range []struct {
		advance time.Duration
		want    string
		source  idempotency.Source
	}{
		{0, "1", idempotency.SourceRun},
		{5 * time.Second, "1", idempotency.SourceStore},
		{7 * time.Second, "2", idempotency.SourceRun}, // 12 s after completion
		{0, "2", idempotency.SourceStore},
	} {
		f.clock.Advance(step.advance)
		res, err := f.store.Do(context.Background(), "k", "h", effect)
		if err != nil || string(res.Data) != step.want || res.Source != step.source {
			t.Fatalf("after +%s: %+v (%s) %v, want %s from %s", step.advance, res, res.Data, err, step.want, step.source)
		}
	}
	if m := f.store.Metrics(); m.Expired != 1 {
		t.Fatalf("metrics %+v", m)
	}
}

func TestCacheHitDoesNotCallDynamoDB(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *idempotency.Config) { c.CacheSize = 2; c.Expiry = time.Minute })
	effect := func(context.Context) ([]byte, error) { return []byte("r"), nil }
	if _, err := f.store.Do(context.Background(), "k", "h", effect); err != nil {
		t.Fatal(err)
	}
	before := f.calls.total()
	for range 3 {
		res, err := f.store.Do(context.Background(), "k", "h", effect)
		if err != nil || res.Source != idempotency.SourceCache || string(res.Data) != "r" {
			t.Fatalf("%+v %v", res, err)
		}
	}
	if _, err := f.store.Do(context.Background(), "k", "other", effect); !errors.Is(err, idempotency.ErrPayloadMismatch) {
		t.Fatalf("cache path mismatch: %v", err)
	}
	if got := f.calls.total() - before; got != 0 {
		t.Fatalf("cache hits made %d DynamoDB calls, want 0", got)
	}
	if m := f.store.Metrics(); m.CacheHits != 3 {
		t.Fatalf("metrics %+v", m)
	}
	// Past the record's expiry the cache is not trusted: DynamoDB decides.
	f.clock.Advance(2 * time.Minute)
	res, err := f.store.Do(context.Background(), "k", "h", effect)
	if err != nil || res.Source != idempotency.SourceRun || f.calls.total() == before {
		t.Fatalf("after expiry: %+v %v", res, err)
	}
}

func TestStaleAttemptCannotOverwriteTheNewOwner(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	release := make(chan struct{})
	started := make(chan struct{})
	type out struct {
		res idempotency.Result
		err error
	}
	done := make(chan out)
	go func() {
		r, err := f.store.Do(ctx, "k", "h", func(context.Context) ([]byte, error) {
			close(started)
			<-release // the stale attempt outlives its deadline (as seen by the clock)
			return []byte("stale"), nil
		})
		done <- out{r, err}
	}()
	<-started
	f.clock.Advance(5 * time.Second)
	res, err := f.store.Do(context.Background(), "k", "h", func(context.Context) ([]byte, error) { return []byte("owner"), nil })
	if err != nil || string(res.Data) != "owner" {
		t.Fatalf("owner: %+v %v", res, err)
	}
	close(release)
	o := <-done
	if !errors.Is(o.err, idempotency.ErrRecordTakenOver) || string(o.res.Data) != "stale" {
		t.Fatalf("stale attempt: %+v %v", o.res, o.err)
	}
	res, err = f.store.Do(context.Background(), "k", "h", func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
	if err != nil || string(res.Data) != "owner" {
		t.Fatalf("the owner's result must survive: %+v %v", res, err)
	}
	if m := f.store.Metrics(); m.LostRecords != 1 || m.TakenOver != 1 {
		t.Fatalf("metrics %+v", m)
	}
}

func TestWrapKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	type req struct{ ID, Body string }
	var runs atomic.Int64
	fn := func(_ context.Context, r req) (string, error) { runs.Add(1); return "done " + r.Body, nil }
	key := func(r req) (string, error) { return r.ID, nil }
	tests := []struct {
		name     string
		h        func(context.Context, req) (string, error)
		in       req
		wantErr  error
		wantRuns int64
	}{
		{"missing key is an error by default", idempotency.Wrap(f.store, key, fn), req{}, idempotency.ErrNoKey, 0},
		{"missing key allowed runs without idempotency", idempotency.Wrap(f.store, key, fn, idempotency.AllowMissingKey[req]()), req{}, nil, 1},
		{"key function error", idempotency.Wrap(f.store, func(req) (string, error) { return "", errors.New("no header") }, fn), req{ID: "x"}, idempotency.ErrNoKey, 0},
	}
	for _, tc := range tests {
		before := runs.Load()
		_, err := tc.h(context.Background(), tc.in)
		if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.wantErr)
		}
		if got := runs.Load() - before; got != tc.wantRuns {
			t.Errorf("%s: ran %d, want %d", tc.name, got, tc.wantRuns)
		}
	}
	if m := f.store.Metrics(); m.NoKey != 1 {
		t.Fatalf("metrics %+v", m)
	}
	// Default payload validation hashes the whole input; WithPayloadHash picks fields.
	h := idempotency.Wrap(f.store, key, fn)
	if _, err := h(context.Background(), req{ID: "a", Body: "1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h(context.Background(), req{ID: "a", Body: "2"}); !errors.Is(err, idempotency.ErrPayloadMismatch) {
		t.Fatalf("default validation: %v", err)
	}
	byID := idempotency.Wrap(f.store, key, fn, idempotency.WithPayloadHash(func(r req) (string, error) { return idempotency.HashJSON(r.ID) }))
	if _, err := byID(context.Background(), req{ID: "b", Body: "1"}); err != nil {
		t.Fatal(err)
	}
	out, err := byID(context.Background(), req{ID: "b", Body: "2"})
	if err != nil || out != "done 1" {
		t.Fatalf("field hash: %q %v, want the stored result", out, err)
	}
}

// noOldItem is a DynamoDB that does not return the item with a failed
// condition (ReturnValuesOnConditionCheckFailure unsupported, as in older
// emulators): the store must fall back to a consistent GetItem.
type noOldItem struct{ *counting }

func (n noOldItem) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := n.counting.PutItem(ctx, in, o...)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return out, &types.ConditionalCheckFailedException{Message: ccf.Message}
	}
	return out, err
}

func TestRepeatsWithoutTheReturnedItemReadIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	s, err := idempotency.NewStore(noOldItem{f.calls}, idempotency.Config{Table: f.table, Namespace: "test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	effect := func(context.Context) ([]byte, error) { return []byte("r"), nil }
	if _, err := s.Do(context.Background(), "k", "h", effect); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		hash    string
		want    error
		wantGet int64
	}{
		{"h", nil, 1},
		{"other", idempotency.ErrPayloadMismatch, 2},
	}
	for _, tc := range tests {
		res, err := s.Do(context.Background(), "k", tc.hash, effect)
		if !errors.Is(err, tc.want) || (tc.want == nil && (err != nil || res.Source != idempotency.SourceStore)) {
			t.Fatalf("hash %s: %+v %v, want %v", tc.hash, res, err, tc.want)
		}
		if got := f.calls.gets.Load(); got != tc.wantGet {
			t.Fatalf("hash %s: %d GetItem calls, want %d", tc.hash, got, tc.wantGet)
		}
	}
}
