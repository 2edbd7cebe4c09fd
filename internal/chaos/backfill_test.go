package chaos

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/faults"
	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestChaosBackfill: the backfill of a second ledger under faults at every
// boundary the replay crosses — the publish path (failed and lost
// PutEvents, throttles: duplicates in the archive), DynamoDB calls of both
// ledgers, the bus's deliveries (late ones reorder an order's events),
// consumer outages and rejections that reach the DLQ (redriven as an
// operator would), consumer timeouts after the effect — ends, once drained
// and redriven, with the same entries and balances as the ledger that saw
// every event live.
func TestChaosBackfill(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos backfill skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	inj, err := faults.New(faults.Config{Seed: 25, Rate: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := devstack.Start(ctx, devstack.Options{
		Prefix: "chaosbf", Logger: quiet, ArchiveDelay: 300 * time.Millisecond,
		AWSConfig: func(c *aws.Config) {
			c.APIOptions = append(c.APIOptions, inj.Middleware())
			c.Retryer = func() aws.Retryer {
				return retry.NewStandard(func(o *retry.StandardOptions) { o.RateLimiter = ratelimit.None })
			}
		},
		WrapEventBridge:           func(eb relay.EventBridgeAPI) relay.EventBridgeAPI { return inj.EventBridge(eb) },
		ConsumerInterceptor:       inj.Interceptor(),
		WrapQueueTarget:           inj.Reorder,
		WrapConsumer:              inj.SQSHandler,
		BusTargetMaxAttempts:      40,
		ConsumerFunctionTimeout:   ConsumerFunctionTimeout,
		ConsumerVisibilityTimeout: ConsumerVisibilityTimeout,
		ConsumerMaxReceiveCount:   ConsumerMaxReceiveCount,
		ReconcileEvery:            500 * time.Millisecond,
		ReconcileAfter:            time.Second,
		PollInterval:              20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if rep := devstack.Drive(ctx, s.URL, devstack.DriveOptions{Orders: 150, Concurrency: 6, Seed: 25, Logger: quiet}); rep.Orders == 0 {
		t.Fatalf("no order: %s", rep)
	}
	const name = "ledger-rebuilt"
	l2, _, err := s.AddLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	live := make(chan *devstack.DriveReport, 1)
	go func() {
		live <- devstack.Drive(ctx, s.URL, devstack.DriveOptions{Orders: 40, Concurrency: 3, Seed: 26, Logger: quiet})
	}()
	p, err := operator.Backfill(ctx, s.Bus, operator.BackfillOptions{Archive: s.ArchiveName, Rule: name + "-order-events", Bus: s.Settings.EventBus,
		Settle: time.Second, Poll: 50 * time.Millisecond}, nil)
	if err != nil || p.State != "COMPLETED" {
		t.Fatalf("backfill: %+v %v", p, err)
	}
	<-live
	a, dl, err := drainRedriveAndAudit(ctx, s, inj)
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.ReadLedger(ctx, s.Settings.LedgerTable, s.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadLedger(ctx, "chaosbf-"+name, l2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("events %d, replayed %d, entries %d, dead-lettered %d, redriven %d, faults %v", a.Events, s.Bus.Stats().Replayed, len(got.Entries), dl.deadLettered, dl.redriven, inj.Stats().ByKind())
	if len(want.Entries) < 40 {
		t.Fatalf("the original ledger booked only %d entries", len(want.Entries))
	}
	for _, d := range devstack.DiffLedgers(want, got) {
		t.Error(d)
	}
	if c := inj.Stats().ByKind(); c[faults.ConsumerOutage]+c[faults.ConsumerRejected] == 0 || c[faults.ResponseLost]+c[faults.FailBeforeSend] == 0 {
		t.Errorf("faults injected %v: the run proved nothing about consumer failures or lost publishes", c)
	}
}
