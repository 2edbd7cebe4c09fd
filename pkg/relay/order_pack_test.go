package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// mix builds the envelopes of a batch: chains[i] events of aggregate g<i>,
// sequences 1..chains[i], interleaved round-robin (as a stream of concurrent
// orders delivers them), with detail padding of pad bytes.
func mix(t testing.TB, chains []int, pad int) []outbox.Envelope {
	t.Helper()
	var envs []outbox.Envelope
	for seq := 1; ; seq++ {
		added := false
		for a, n := range chains {
			if seq <= n {
				envs = append(envs, envelope(t, fmt.Sprint("g", a), int64(seq), pad))
				added = true
			}
		}
		if !added {
			return envs
		}
	}
}

func repeat(n, length int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = length
	}
	return out
}

// waveCalls is what publishing in waves (wave k = every aggregate's k-th
// event, each wave packed alone) costs for unit entries: sum over waves of
// ceil(|wave|/10). The schedule must never cost more.
func waveCalls(chains []int) int {
	calls := 0
	for k := 1; ; k++ {
		n := 0
		for _, c := range chains {
			if c >= k {
				n++
			}
		}
		if n == 0 {
			return calls
		}
		calls += (n + relay.MaxEntriesPerRequest - 1) / relay.MaxEntriesPerRequest
	}
}

// floorCalls is the least any order-keeping packing can cost: max(ceil(n/10),
// the longest chain).
func floorCalls(chains []int) int {
	n, longest := 0, 0
	for _, c := range chains {
		n += c
		longest = max(longest, c)
	}
	return max((n+relay.MaxEntriesPerRequest-1)/relay.MaxEntriesPerRequest, longest)
}

// TestPublishInOrderPacksPartialWaves: entries of aggregates with fewer
// events fill the calls the longer aggregates' later events would leave
// partly empty, so a batch costs the floor, not one partial call per wave.
// Publishing in waves cost the "waves" column.
func TestPublishInOrderPacksPartialWaves(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		chains []int
		want   int
	}{
		{"100 events: 70 orders with 1, 15 with 2", append(repeat(70, 1), repeat(15, 2)...), 10},
		{"100 events: 58 with 1, 21 with 2", append(repeat(58, 1), repeat(21, 2)...), 10},
		{"100 events: 80 with 1, one with 20", append(repeat(80, 1), 20), 20},
		{"33 events: 11 aggregates with 3", repeat(11, 3), 4},
		{"100 events: 94 with 1, 2 with 3", append(repeat(94, 1), 3, 3), 10},
		{"unchanged: 100 with 1", repeat(100, 1), 10},
		{"unchanged: 50 with 2", repeat(50, 2), 10},
		{"unchanged: 1 with 100", []int{100}, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			envs := mix(t, tt.chains, 10)
			eb := &fakeEventBridge{}
			for i, r := range newPublisher(t, eb, nil).PublishInOrder(context.Background(), envs, nil) {
				if r.Status != relay.Published {
					t.Fatalf("event %d: %+v", i, r)
				}
			}
			if got := eb.callCount(); got != tt.want {
				t.Errorf("PutEvents calls %d, want %d (waves: %d, floor: %d)", got, tt.want, waveCalls(tt.chains), floorCalls(tt.chains))
			}
			for _, c := range eb.calls {
				if len(c) > relay.MaxEntriesPerRequest {
					t.Errorf("a call carries %d entries", len(c))
				}
			}
		})
	}
}

// orderKeeper is a fake EventBridge that checks, when a call starts, that
// every entry's predecessor in its aggregate (sequence − 1, when that was
// in the batch) was answered before: accepted, or refused for good. A call
// carrying an entry whose predecessor is still in flight, unsent or failed
// retryably breaks I4. fail decides an entry's error code per attempt.
type orderKeeper struct {
	inBatch  map[string]bool // "agg/seq" of every envelope of the batch
	fail     func(key string, attempt int) string
	mu       sync.Mutex
	done     map[string]bool // answered: accepted or permanently refused
	attempts map[string]int
	calls    atomic.Int64
	broken   []string
}

func envKey(e outbox.Envelope) string { return fmt.Sprintf("%s/%d", e.AggregateID, e.Sequence) }

func (f *orderKeeper) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	f.calls.Add(1)
	keys := make([]string, len(in.Entries))
	f.mu.Lock()
	seen := map[string]bool{}
	for i, e := range in.Entries {
		env := decodeDetail(e)
		keys[i] = envKey(env)
		prev := fmt.Sprintf("%s/%d", env.AggregateID, env.Sequence-1)
		if f.inBatch[prev] && !f.done[prev] {
			f.broken = append(f.broken, fmt.Sprintf("%s sent before %s was answered", keys[i], prev))
		}
		if seen[env.AggregateID] {
			f.broken = append(f.broken, fmt.Sprintf("one call carries two events of %s", env.AggregateID))
		}
		seen[env.AggregateID] = true
	}
	f.mu.Unlock()
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // let calls overlap
	out := &eventbridge.PutEventsOutput{}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		f.attempts[k]++
		code := ""
		if f.fail != nil {
			code = f.fail(k, f.attempts[k])
		}
		if code == "" {
			f.done[k] = true
			out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{EventId: aws.String("bus-" + k)})
			continue
		}
		if relay.IsPermanentCode(code) {
			f.done[k] = true
		}
		out.FailedEntryCount++
		out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{ErrorCode: aws.String(code), ErrorMessage: aws.String("fake")})
	}
	return out, nil
}

func decodeDetail(e ebtypes.PutEventsRequestEntry) outbox.Envelope {
	var env outbox.Envelope
	_ = json.Unmarshal([]byte(aws.ToString(e.Detail)), &env)
	return env
}

// TestPublishInOrderKeepsOrderUnderConcurrency: random batches (aggregates
// with 1 to 12 events, stream order shuffled), calls running 4 at a time,
// random retryable and permanent entry failures. No entry is sent before
// its predecessor was answered; an aggregate stops at an entry that failed
// retryably (its later ones are held back, never sent); a permanent failure
// does not stop it; every entry ends with a result; and without failures the
// batch never costs more calls than waves, nor less than the floor.
func TestPublishInOrderKeepsOrderUnderConcurrency(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 22))
			var chains []int
			for n := 0; n < 60+rng.IntN(140); {
				c := 1 + rng.IntN(3)
				if rng.IntN(8) == 0 {
					c = 1 + rng.IntN(12)
				}
				chains = append(chains, c)
				n += c
			}
			envs := mix(t, chains, 10+rng.IntN(200))
			rng.Shuffle(len(envs), func(i, j int) { envs[i], envs[j] = envs[j], envs[i] })
			failing := seed%2 == 1
			f := &orderKeeper{inBatch: map[string]bool{}, done: map[string]bool{}, attempts: map[string]int{}}
			for _, e := range envs {
				f.inBatch[envKey(e)] = true
			}
			codes := map[string]string{}
			if failing {
				for _, e := range envs {
					switch rng.IntN(12) {
					case 0:
						codes[envKey(e)] = "ThrottlingException" // every attempt
					case 1:
						codes[envKey(e)] = "MalformedDetail"
					case 2:
						codes[envKey(e)] = "once" // InternalFailure on the first attempt only
					}
				}
				f.fail = func(k string, attempt int) string {
					switch c := codes[k]; {
					case c == "once" && attempt == 1:
						return "InternalFailure"
					case c == "once":
						return ""
					default:
						return c
					}
				}
			}
			p := newPublisher(t, f, func(c *relay.PublisherConfig) {
				c.Concurrency, c.MaxAttempts, c.InitialInterval, c.MaxInterval = 4, 2, time.Millisecond, time.Millisecond
			})
			res := p.PublishInOrder(context.Background(), envs, nil)
			for _, b := range f.broken {
				t.Error(b)
			}
			// Expected outcome per aggregate, walking its sequence.
			byKey := map[string]relay.Result{}
			for i, e := range envs {
				byKey[envKey(e)] = res[i]
			}
			for a, n := range chains {
				stopped := false
				for s := 1; s <= n; s++ {
					k := fmt.Sprintf("g%d/%d", a, s)
					r := byKey[k]
					switch {
					case stopped:
						if r.Status != relay.RetryableFailure || r.ErrorCode != relay.CodeHeldBack || f.attempts[k] != 0 {
							t.Errorf("%s after a retryable failure: %v %s, sent %d times; want held back, never sent", k, r.Status, r.ErrorCode, f.attempts[k])
						}
					case codes[k] == "ThrottlingException":
						if r.Status != relay.RetryableFailure || r.ErrorCode != "ThrottlingException" {
							t.Errorf("%s: %v %s, want RetryableFailure ThrottlingException", k, r.Status, r.ErrorCode)
						}
						stopped = true
					case codes[k] == "MalformedDetail":
						if r.Status != relay.PermanentFailure {
							t.Errorf("%s: %v, want PermanentFailure", k, r.Status)
						}
					default:
						if r.Status != relay.Published {
							t.Errorf("%s: %v %s, want Published", k, r.Status, r.ErrorCode)
						}
					}
				}
			}
			if !failing {
				if got, w, fl := int(f.calls.Load()), waveCalls(chains), floorCalls(chains); got > w || got < fl {
					t.Errorf("%d calls, want between the floor %d and waves %d", got, fl, w)
				}
			}
		})
	}
}

// countingBatch is a DynamoDB client whose BatchExecuteStatement and
// UpdateItem succeed and are counted.
type countingBatch struct{ batch, update atomic.Int64 }

func (c *countingBatch) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.update.Add(1)
	return &dynamodb.UpdateItemOutput{}, nil
}

func (c *countingBatch) BatchExecuteStatement(_ context.Context, in *dynamodb.BatchExecuteStatementInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchExecuteStatementOutput, error) {
	c.batch.Add(1)
	return &dynamodb.BatchExecuteStatementOutput{Responses: make([]ddbtypes.BatchStatementResponse, len(in.Statements))}, nil
}

// orderTraffic is the outbox stream of orders placed and paid by concurrent
// clients: each order's OrderPaid (sequence 2) follows its OrderPlaced
// (sequence 1) by 1 to 2×clients records, as in make bench's closed loop.
func orderTraffic(t testing.TB, orders, clients int, seed uint64) []outbox.Envelope {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	slots := make([]*outbox.Envelope, 2*orders+2*clients+2)
	put := func(at int, e outbox.Envelope) {
		for slots[at] != nil {
			at++
		}
		slots[at] = &e
	}
	for o := range orders {
		id := fmt.Sprintf("o-%05d", o)
		at := 2 * o
		put(at, envelope(t, id, 1, 150))
		put(at+1+rng.IntN(2*clients), envelope(t, id, 2, 150))
	}
	var out []outbox.Envelope
	for _, e := range slots {
		if e != nil {
			out = append(out, *e)
		}
	}
	return out
}

// relayCallsPer1000 runs Relay.Handle over the stream in batches of
// batchSize and returns PutEvents and all relay calls (PutEvents +
// BatchExecuteStatement + UpdateItem) per 1,000 events.
func relayCallsPer1000(t testing.TB, stream []outbox.Envelope, batchSize int) (putEvents, total float64) {
	t.Helper()
	eb := &fakeEventBridge{}
	ddb := &countingBatch{}
	cfg := testConfig()
	cfg.Logger = quietLogger()
	r, err := relay.New(eb, ddb, &fakeSQS{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for start := 0; start < len(stream); start += batchSize {
		var ev events.DynamoDBEvent
		for i := start; i < min(start+batchSize, len(stream)); i++ {
			ev.Records = append(ev.Records, insertRecord(t, stream[i], fmt.Sprintf("%021d", i+1)))
		}
		resp, err := r.Handle(context.Background(), ev)
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("batch at %d: %+v %v", start, resp, err)
		}
	}
	n := float64(len(stream))
	pe := float64(eb.callCount())
	return pe * 1000 / n, (pe + float64(ddb.batch.Load()+ddb.update.Load())) * 1000 / n
}

// TestRelayCallsPer1000OrderTraffic: make bench's full-batch figure on the
// relay alone. 1,000 orders placed and paid by 16 clients (2,000 events, an
// order's two events up to 32 records apart, so most batches of 100 hold
// both events of some orders and one event of others), full batches of 100:
// 10 PutEvents + 4 BatchExecuteStatement per batch = 140 calls per 1,000
// events, the floor (issue 22: at most 145). Publishing in waves cost a
// partly filled call per batch more: 150.
func TestRelayCallsPer1000OrderTraffic(t *testing.T) {
	t.Parallel()
	pe, total := relayCallsPer1000(t, orderTraffic(t, 1000, 16, 22), 100)
	t.Logf("relay calls per 1,000 events: PutEvents %.1f, total %.1f", pe, total)
	if pe != 100 || total != 140 {
		t.Errorf("PutEvents %.1f and total %.1f per 1,000 events, want 100 and 140 (full calls of 10, 4 BatchExecuteStatement per 100)", pe, total)
	}
}

// BenchmarkRelayOrderTraffic reports the relay's calls per 1,000 events
// (calls/1000ev) for the order traffic of TestRelayCallsPer1000OrderTraffic
// at batch sizes 100 and 10, and the time per batch of the handler with
// no-op clients.
func BenchmarkRelayOrderTraffic(b *testing.B) {
	stream := orderTraffic(b, 500, 16, 22)
	for _, size := range []int{100, 10} {
		b.Run(fmt.Sprint("batch", size), func(b *testing.B) {
			var pe, total float64
			for b.Loop() {
				pe, total = relayCallsPer1000(b, stream, size)
			}
			b.ReportMetric(pe, "putevents/1000ev")
			b.ReportMetric(total, "calls/1000ev")
		})
	}
}
