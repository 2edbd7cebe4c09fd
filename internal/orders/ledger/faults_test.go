package ledger_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/faults"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/streamimage"
)

// These tests run the real consumer (ledger + dedup on Dynoxide) behind the
// local bus and prove I3 under the faults of internal/faults: whatever is
// published or delivered twice, the balance is exact.

const busName = "bus"

func injector(t *testing.T, cfg faults.Config) *faults.Injector {
	t.Helper()
	in, err := faults.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// newBus returns a local bus whose ledger target is h.
func newBus(t *testing.T, h localrt.EventHandler, ic localrt.Interceptor) *localrt.Bus {
	t.Helper()
	b, err := localrt.NewBus(localrt.BusConfig{Name: busName, Rules: routing.BusRules(appenv.EventSource), Logger: quiet, Interceptor: ic, TargetMaxAttempts: 30,
		TargetRetryBaseDelay: time.Millisecond, TargetRetryMaxDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.Subscribe(routing.ConsumerLedger, h)
	return b
}

func waitIdle(t *testing.T, b *localrt.Bus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}

type noopMarker struct{}

func (noopMarker) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return &dynamodb.UpdateItemOutput{}, nil
}

type noopQueue struct{}

func (noopQueue) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return &sqs.SendMessageOutput{}, nil
}

func relayConfig(table string) relay.Config {
	return relay.Config{
		Publisher: relay.PublisherConfig{Source: appenv.EventSource, EventBusName: busName, InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond},
		Marker:    relay.MarkerConfig{Table: table, ParkedQueueURL: "q", Metrics: ioDiscard{}},
		Logger:    quiet,
	}
}

type ioDiscard struct{}

func (ioDiscard) Write(p []byte) (int, error) { return len(p), nil }

// paidEvents returns n OrderPaid envelopes of 100, 200, ... EUR cents and
// their total.
func paidEvents(t *testing.T, n int) ([]outbox.Envelope, int64) {
	t.Helper()
	var envs []outbox.Envelope
	var total int64
	for i := range n {
		amount := int64(100 * (i + 1))
		id := fmt.Sprintf("o-%d", i)
		envs = append(envs, envelope(t, id, 2, order.EventOrderPaid, order.Paid{OrderID: id, AmountMinor: amount, Currency: "EUR"}))
		total += amount
	}
	return envs, total
}

// streamBatch is the stream batch Lambda delivers for envs' outbox records.
func streamBatch(t *testing.T, envs []outbox.Envelope) events.DynamoDBEvent {
	t.Helper()
	var ev events.DynamoDBEvent
	for i, e := range envs {
		rec := outbox.NewRecord(e, 0, 2)
		img, err := streamimage.FromAttributeValueMap(rec.Item())
		if err != nil {
			t.Fatal(err)
		}
		keys, err := streamimage.FromAttributeValueMap(rec.Key.AttributeValues())
		if err != nil {
			t.Fatal(err)
		}
		ev.Records = append(ev.Records, events.DynamoDBEventRecord{EventID: fmt.Sprint(i), EventName: "INSERT", EventSource: "aws:dynamodb",
			Change: events.DynamoDBStreamRecord{Keys: keys, NewImage: img, SequenceNumber: fmt.Sprint(1000 + i), StreamViewType: "NEW_IMAGE"}})
	}
	return ev
}

func entryCount(t *testing.T, l *ledger.Ledger, want int) {
	t.Helper()
	if n, err := l.EntryCount(context.Background()); err != nil || n != want {
		t.Fatalf("ledger entries = %d (%v), want %d", n, err, want)
	}
}

// firstCalls sends the first n PutEvents calls through faulty, the rest to healthy.
type firstCalls struct {
	mu      sync.Mutex
	n       int
	faulty  relay.EventBridgeAPI
	healthy relay.EventBridgeAPI
}

func (f *firstCalls) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, opts ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	f.mu.Lock()
	f.n--
	faulty := f.n >= 0
	f.mu.Unlock()
	if faulty {
		return f.faulty.PutEvents(ctx, in, opts...)
	}
	return f.healthy.PutEvents(ctx, in, opts...)
}

// A PutEvents whose response is lost after the bus accepted the entries:
// the relay re-sends, the bus carries every event twice (each with a fresh
// EventBridge id), and the ledger books each once.
func TestFaultAmbiguousPutEventsConsumerAppliesOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	bus := newBus(t, f.ledger.Handle, nil)
	in := injector(t, faults.Config{Rates: map[faults.Kind]float64{faults.ResponseLost: 1}})
	r, err := relay.New(&firstCalls{n: 1, faulty: in.EventBridge(bus), healthy: bus}, noopMarker{}, noopQueue{}, relayConfig("outbox"))
	if err != nil {
		t.Fatal(err)
	}
	envs, total := paidEvents(t, 3)
	resp, err := r.Handle(context.Background(), streamBatch(t, envs))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	waitIdle(t, bus)
	if got := bus.Stats().Accepted; got != 6 {
		t.Fatalf("bus accepted %d events, want 6 (3 lost responses + 3 re-sends)", got)
	}
	mustBalance(t, f.ledger, "EUR", total)
	entryCount(t, f.ledger, 3)
}

// A consumer's TransactWriteItems commits but its response is lost: the
// retry (the SDK's, with the same ClientRequestToken, or the platform's
// redelivery) finds the dedup marker and books nothing more. Faults are
// injected in the SDK stack, against Dynoxide.
func TestFaultResponseLostTransactWriteItemsAppliesOnce(t *testing.T) {
	t.Parallel()
	for _, outside := range []bool{false, true} {
		t.Run(fmt.Sprintf("outsideSDKRetries=%v", outside), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			in := injector(t, faults.Config{Seed: 4, Rates: map[faults.Kind]float64{faults.ResponseLost: 0.5}, OutsideSDKRetries: outside,
				Operations: []string{"DynamoDB.TransactWriteItems"}})
			cfg := f.env.Config.Copy()
			cfg.APIOptions = append(cfg.APIOptions, in.Middleware())
			cfg.Retryer = func() aws.Retryer {
				return retry.NewStandard(func(o *retry.StandardOptions) {
					o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
				})
			}
			l, err := ledger.New(dynamodb.NewFromConfig(cfg), ledger.Config{Ordering: dedup.Unordered, Table: f.table, Logger: quiet,
				Dedup: dedup.Config{Table: f.dedup, BaseBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			envs, total := paidEvents(t, 5)
			for _, e := range envs {
				// The platform redelivers until the consumer acknowledges.
				var err error
				for range 20 {
					if err = l.Handle(context.Background(), delivery(t, e)); err == nil {
						break
					}
				}
				if err != nil {
					t.Fatalf("never acknowledged: %v", err)
				}
			}
			if in.Stats().Count("DynamoDB.TransactWriteItems", faults.ResponseLost) == 0 {
				t.Fatal("seed injected no lost response")
			}
			mustBalance(t, f.ledger, "EUR", total)
			entryCount(t, f.ledger, 5)
			for _, e := range envs { // late duplicates change nothing
				if err := f.ledger.Handle(context.Background(), delivery(t, e)); err != nil {
					t.Fatal(err)
				}
			}
			mustBalance(t, f.ledger, "EUR", total)
		})
	}
}

// Consumers dying before their transaction (nothing written) or after it
// (committed, delivery failed): the bus redelivers, and the balance is
// exact with nothing dead-lettered.
func TestFaultConsumerCrashesApplyOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	in := injector(t, faults.Config{Seed: 9, Rates: map[faults.Kind]float64{faults.CrashBeforeEffect: 0.3, faults.CrashAfterEffect: 0.3}})
	bus := newBus(t, f.ledger.Handle, in.Interceptor())
	r, err := relay.New(bus, noopMarker{}, noopQueue{}, relayConfig("outbox"))
	if err != nil {
		t.Fatal(err)
	}
	envs, total := paidEvents(t, 6)
	if resp, err := r.Handle(context.Background(), streamBatch(t, envs)); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	waitIdle(t, bus)
	st := in.Stats()
	if st.Count("consumer.ledger", faults.CrashBeforeEffect) == 0 || st.Count("consumer.ledger", faults.CrashAfterEffect) == 0 {
		t.Fatalf("seed did not inject both crash kinds:\n%s", in.Summary())
	}
	if dl := bus.DeadLetters(); len(dl) != 0 {
		t.Fatalf("%d dead letters", len(dl))
	}
	mustBalance(t, f.ledger, "EUR", total)
	entryCount(t, f.ledger, 6)
}

// outboxStack is an outbox table with a stream, a writer, a relay on the
// local bus and the ledger behind it, all on one Dynoxide.
type outboxStack struct {
	f      fixture
	table  string
	arn    string
	writer *outbox.Writer
	bus    *localrt.Bus
	relay  *relay.Relay
}

func newOutboxStack(t *testing.T, ic localrt.Interceptor) outboxStack {
	t.Helper()
	f := newFixture(t)
	table := f.table + "-outbox"
	f.env.CreateTable(t, outbox.CreateTableInput(table))
	d, err := f.env.DDB.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(f.env.DDB, outbox.WriterConfig{Source: appenv.EventSource, Table: table, PendingShards: 2})
	if err != nil {
		t.Fatal(err)
	}
	bus := newBus(t, f.ledger.Handle, ic)
	r, err := relay.New(bus, f.env.DDB, noopQueue{}, relayConfig(table))
	if err != nil {
		t.Fatal(err)
	}
	return outboxStack{f: f, table: table, arn: aws.ToString(d.Table.LatestStreamArn), writer: w, bus: bus, relay: r}
}

func (s outboxStack) write(t *testing.T, envs []outbox.Envelope) {
	t.Helper()
	for _, e := range envs {
		if err := s.writer.Write(context.Background(), nil, []outbox.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
}

// runPoller runs a stream poller with handler h (reading through streams,
// default the healthy client) until the stream is caught
// up and the bus idle.
func (s outboxStack) runPoller(t *testing.T, h localrt.StreamHandler, streams localrt.StreamsAPI) *localrt.StreamPoller {
	t.Helper()
	if streams == nil {
		streams = s.f.env.Streams
	}
	p, err := localrt.NewStreamPoller(localrt.StreamPollerConfig{Streams: streams, StreamARN: s.arn,
		PollInterval: 10 * time.Millisecond, RetryBaseDelay: time.Millisecond, RetryMaxDelay: 5 * time.Millisecond,
		MaximumRetryAttempts: 50, Logger: quiet}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := p.WaitCaughtUp(wctx); err != nil {
		t.Fatalf("WaitCaughtUp: %v (stats %+v)", err, p.Stats())
	}
	waitIdle(t, s.bus)
	return p
}

func (s outboxStack) mustAllPublished(t *testing.T, envs []outbox.Envelope) {
	t.Helper()
	for _, e := range envs {
		out, err := s.f.env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
			Key: outbox.KeyFor(e.AggregateType, e.AggregateID, e.Sequence, 0).AttributeValues()})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := outbox.RecordFromItem(out.Item)
		if err != nil || rec.Status != outbox.StatusPublished {
			t.Fatalf("%s: status %q (%v)", e.EventID, rec.Status, err)
		}
	}
}

// The relay dies after publishing (and marking) but before answering the
// event source mapping: the batch is redelivered from the stream, the
// events are published again, and the ledger still books each once.
func TestFaultRelayCrashAfterPublishRedeliveryAbsorbed(t *testing.T) {
	t.Parallel()
	s := newOutboxStack(t, nil)
	envs, total := paidEvents(t, 3)
	s.write(t, envs)
	in := injector(t, faults.Config{Seed: 1, Rates: map[faults.Kind]float64{faults.CrashAfterHandle: 0.6}})
	p := s.runPoller(t, in.StreamHandler(s.relay.Handle), nil)
	crashes := in.Stats().Count(faults.BoundaryStream, faults.CrashAfterHandle)
	if crashes == 0 {
		t.Fatal("seed injected no crash")
	}
	if st := p.Stats(); st.FunctionErrors != crashes {
		t.Fatalf("poller saw %d function errors, injected %d", st.FunctionErrors, crashes)
	}
	if got := s.bus.Stats().Accepted; got <= int64(len(envs)) {
		t.Fatalf("bus accepted %d events: the redelivered batch was not published again", got)
	}
	mustBalance(t, s.f.ledger, "EUR", total)
	entryCount(t, s.f.ledger, len(envs))
	s.mustAllPublished(t, envs)
}

// The reconciler (ReconcileAfter ~0) and the relay publish the same pending
// records, concurrently: every event reaches the bus at least twice and the
// ledger books each once.
func TestFaultReconcilerConcurrentWithRelayAppliesOnce(t *testing.T) {
	t.Parallel()
	s := newOutboxStack(t, nil)
	envs, total := paidEvents(t, 4)
	s.write(t, envs)
	rc, err := reconciler.New(s.f.env.DDB, s.relay.Publisher(), s.relay.Marker(), reconciler.Config{Table: s.table, PendingShards: 2,
		ReconcileAfter: time.Nanosecond, AllowShortReconcileAfter: true, Logger: quiet, Metrics: ioDiscard{},
		Now: dueNow})
	if err != nil {
		t.Fatal(err)
	}
	// The first sweep publishes every pending record before the relay reads
	// the stream; more sweeps run while the relay works.
	rep, err := rc.Run(context.Background())
	if err != nil || rep.Resent != len(envs) {
		t.Fatalf("first sweep %+v %v", rep, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := rc.Run(context.Background()); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	s.runPoller(t, s.relay.Handle, nil)
	close(stop)
	wg.Wait()
	waitIdle(t, s.bus)
	if got := s.bus.Stats().Accepted; got < 2*int64(len(envs)) {
		t.Fatalf("bus accepted %d, want >= %d (reconciler and relay both publish)", got, 2*len(envs))
	}
	mustBalance(t, s.f.ledger, "EUR", total)
	entryCount(t, s.f.ledger, len(envs))
	s.mustAllPublished(t, envs)
}

// Everything at once, at a modest rate, with a fixed seed: DynamoDB and
// Streams calls (relay marking, ledger transactions, GetRecords) fail,
// throttle, lose responses and slow down in the SDK stack; PutEvents fails
// whole or per entry; the relay crashes after handling; the consumer
// crashes before or after its transaction. Then the reconciler sweeps what
// is still pending. Every event is booked exactly once and every outbox
// record ends PUBLISHED.
//
// FAULTS_SEED and FAULTS_RATE override the seed (42) and rate (0.15) to
// explore or replay other runs.
func TestFaultChaosSmoke(t *testing.T) {
	t.Parallel()
	seed, rate := int64(42), 0.15
	if v, err := strconv.ParseInt(os.Getenv("FAULTS_SEED"), 10, 64); err == nil {
		seed = v
	}
	if v, err := strconv.ParseFloat(os.Getenv("FAULTS_RATE"), 64); err == nil {
		rate = v
	}
	in := injector(t, faults.Config{Seed: seed, Rate: rate, MaxLatency: 3 * time.Millisecond,
		Rates: map[faults.Kind]float64{faults.EntryPermanent: 0}})
	s := newOutboxStack(t, in.Interceptor())
	cfg := s.f.env.Config.Copy()
	cfg.APIOptions = append(cfg.APIOptions, in.Middleware())
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
			// The default token bucket runs dry under a fault storm ("retry
			// quota exceeded") and the bus then dead-letters deliveries.
			o.RateLimiter = ratelimit.None
		})
	}
	faulty := dynamodb.NewFromConfig(cfg)
	l, err := ledger.New(faulty, ledger.Config{Ordering: dedup.Unordered, Table: s.f.table, Logger: quiet,
		Dedup: dedup.Config{Table: s.f.dedup, BaseBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	s.bus.Subscribe(routing.ConsumerLedger, l.Handle)
	r, err := relay.New(in.EventBridge(s.bus), faulty, in.Queue(noopQueue{}), relayConfig(s.table))
	if err != nil {
		t.Fatal(err)
	}
	envs, total := paidEvents(t, 6)
	s.write(t, envs)
	s.runPoller(t, in.StreamHandler(r.Handle), dynamodbstreams.NewFromConfig(cfg))

	rc, err := reconciler.New(s.f.env.DDB, r.Publisher(), r.Marker(), reconciler.Config{Table: s.table, PendingShards: 2,
		ReconcileAfter: time.Nanosecond, AllowShortReconcileAfter: true, Logger: quiet, Metrics: ioDiscard{},
		Now: dueNow})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		rep, err := rc.Run(context.Background())
		if err == nil && rep.Pending == 0 {
			break
		}
	}
	waitIdle(t, s.bus)
	t.Logf("\n%s", in.Summary())
	if in.Stats().Total < 5 {
		t.Fatalf("too few faults injected:\n%s", in.Summary())
	}
	for _, d := range s.bus.DeadLetters() {
		t.Errorf("dead letter: %s after %d attempts: %s", d.Consumer, d.Attempts, d.Error)
	}
	mustBalance(t, s.f.ledger, "EUR", total)
	entryCount(t, s.f.ledger, len(envs))
	s.mustAllPublished(t, envs)
}

// dueNow is the reconciler's clock in these tests: a second ahead, so a
// record written a moment ago is due (with the real clock a sweep within the
// write's millisecond finds it pending but not yet due).
func dueNow() time.Time { return time.Now().Add(time.Second) }
