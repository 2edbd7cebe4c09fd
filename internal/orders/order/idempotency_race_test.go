package order_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// barrierReader passes GetItem through to DynamoDB; the first n reads of
// the idempotency record at key each wait, after their answer, until all n
// have read (or the timeout passes). So n concurrent Creates all see "no
// record" before any of them writes: only the idempotency Put's condition
// can then decide who owns the key. Later reads (the retry's replay) pass
// straight through.
type barrierReader struct {
	next    order.Client
	key     string
	mu      sync.Mutex
	waiting int
	release chan struct{}
	timeout time.Duration
}

func (b *barrierReader) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := b.next.GetItem(ctx, in, opts...)
	if keyOf(in.Key) != b.key {
		return out, err
	}
	b.mu.Lock()
	if b.waiting < 0 { // the barrier already opened
		b.mu.Unlock()
		return out, err
	}
	b.waiting--
	if b.waiting == 0 {
		b.waiting = -1
		close(b.release)
	}
	b.mu.Unlock()
	select {
	case <-b.release:
	case <-time.After(b.timeout):
	case <-ctx.Done():
	}
	return out, err
}

// TestRepositoryConcurrentKeyReuseWithDifferentBodies: two Creates by one
// actor with the same Idempotency-Key and different bodies (so different
// request tokens: DynamoDB's own idempotency cannot merge them) both read
// "no record" before either writes. The idempotency record's Put condition
// must let only one commit: one order is created, the other call gets
// ErrIdempotencyKeyReused, and the orders table holds one order.
func TestRepositoryConcurrentKeyReuseWithDifferentBodies(t *testing.T) {
	t.Parallel()
	f := newRepoFixture(t)
	const actor, key = "arn:aws:iam::123456789012:user/alice", "race-key"
	gate := &barrierReader{
		next:    f.env.DDB,
		key:     keyOf(order.IdempotencyKey(actor, key)),
		waiting: 2,
		release: make(chan struct{}),
		timeout: 10 * time.Second,
	}
	w, err := outbox.NewWriter(f.env.DDB, outbox.WriterConfig{Source: appenv.EventSource, Table: f.outbox})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := order.NewRepository(order.RepositoryConfig{Table: f.orders, Client: gate, Writer: w, BaseBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		created bool
		got     order.Order
		err     error
	}
	bodies := []struct{ id, hash string }{{"o-a", "hash-a"}, {"o-b", "hash-b"}}
	results := make([]result, len(bodies))
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, evs, err := order.Place(order.PlaceInput{ID: b.id, CustomerID: "c", AmountMinor: int64(100 + i), Currency: "EUR"}, time.Now())
			if err != nil {
				results[i].err = err
				return
			}
			got, created, err := repo.Create(context.Background(), o, evs, order.CreateMeta{Actor: actor, IdempotencyKey: key, RequestHash: b.hash})
			results[i] = result{created: created, got: got, err: err}
		}()
	}
	wg.Wait()
	select {
	case <-gate.release:
	default:
		t.Fatal("the two creates never met at the barrier: the test did not race them")
	}

	var winners, reused int
	for i, r := range results {
		switch {
		case r.err == nil && r.created:
			winners++
		case errors.Is(r.err, order.ErrIdempotencyKeyReused):
			reused++
		default:
			t.Errorf("create %s: created=%v err=%v, want created or ErrIdempotencyKeyReused", bodies[i].id, r.created, r.err)
		}
	}
	if winners != 1 || reused != 1 {
		t.Errorf("%d created, %d refused as key reused; want 1 and 1", winners, reused)
	}

	out, err := f.env.DDB.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(f.orders), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	var orders []string
	for _, it := range out.Items {
		if k := keyOf(it); strings.HasPrefix(k, order.KeyPrefixOrder) {
			orders = append(orders, k)
		}
	}
	if len(orders) != 1 {
		t.Fatalf("orders table holds %d orders %v for one idempotency key, want 1", len(orders), orders)
	}
}
