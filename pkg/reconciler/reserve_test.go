package reconciler_test

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// oneItemQuery answers every Query of the pending index with one due record.
type oneItemQuery struct {
	item map[string]ddbtypes.AttributeValue
}

func (q oneItemQuery) Query(_ context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if in.Select == ddbtypes.SelectCount {
		return &dynamodb.QueryOutput{Count: 1}, nil
	}
	return &dynamodb.QueryOutput{Items: []map[string]ddbtypes.AttributeValue{q.item}}, nil
}

// UpdateItem grants every claim and returns the item.
func (q oneItemQuery) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return &dynamodb.UpdateItemOutput{Attributes: q.item}, nil
}

// slowPublisher retries until its context ends (a bus throttling for good).
type slowPublisher struct{}

func (slowPublisher) PublishInOrder(ctx context.Context, envs []outbox.Envelope, _ []outbox.Key) []relay.Result {
	<-ctx.Done()
	return make([]relay.Result, len(envs))
}

// reserveMarker has a marking reserve and records whether MarkAll got a
// live context.
type reserveMarker struct {
	reserve time.Duration
	mu      sync.Mutex
	calls   int
	live    int
}

func (m *reserveMarker) Reserve() time.Duration { return m.reserve }

func (m *reserveMarker) MarkAll(ctx context.Context, marks []relay.Mark) []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if ctx.Err() == nil {
		m.live++
	}
	return make([]error, len(marks))
}

// TestRunKeepsTheMarkingReserve: a publisher that would retry until the end
// of the run must be stopped early enough that marking still has time.
func TestRunKeepsTheMarkingReserve(t *testing.T) {
	t.Parallel()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: "o-1", Sequence: 1},
		outbox.Event{Type: "OrderPlaced", Version: 1, Payload: map[string]any{"x": 1}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	m := &reserveMarker{reserve: 300 * time.Millisecond}
	rc, err := reconciler.New(oneItemQuery{item: outbox.NewRecord(env, 0, 1).Item()}, slowPublisher{}, m, reconciler.Config{
		Table: "outbox", PendingShards: 1, MaxPagesPerShard: 1, Budget: time.Second, Metrics: io.Discard, Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, _ := rc.Run(context.Background())
	if m.calls != 1 || m.live != 1 {
		t.Fatalf("MarkAll called %d times, %d with time left; want once, with time left (report %+v)", m.calls, m.live, rep)
	}
}
