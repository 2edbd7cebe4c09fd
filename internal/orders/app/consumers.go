package app

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// NewLedger returns the ledger consumer. It needs LedgerTable (its entries,
// balances and consumer state) and returns an error naming a missing
// setting, or the error of ledger.New (for example an ExpectedAccount that
// is not 12 digits).
func NewLedger(s Settings, ddb *dynamodb.Client, log *slog.Logger) (*ledger.Ledger, error) {
	if err := require(appenv.EnvLedgerTable, s.LedgerTable); err != nil {
		return nil, err
	}
	return ledger.New(ddb, orderedConsumerConfig(s, s.LedgerTable, log))
}

// orderedConsumerConfig is the dedup.ConsumerConfig the ledger and the
// notifier share (both are ledger.Config and notifier.Config): the
// consumer's own table (its effects and, by dedup's default, its dedup
// markers, ordering gates and buffer), the expected source and account,
// the gap bound and the resequencer's metrics.
func orderedConsumerConfig(s Settings, table string, log *slog.Logger) dedup.ConsumerConfig {
	return dedup.ConsumerConfig{
		Table:           table,
		Dedup:           dedup.Config{Retention: s.DedupRetention},
		ExpectedSource:  s.Source,
		ExpectedAccount: s.ExpectedAccount,
		GapMaxReceives:  s.ConsumerGapMaxReceives,
		Resequencer:     dedup.ResequencerConfig{Metrics: s.Metrics},
		Logger:          log,
	}
}

// NewNotifier returns the notifier consumer. It needs NotificationsTable
// (its notifications, order views and consumer state) and returns an error
// naming a missing setting, or the error of notifier.New (for example an
// ExpectedAccount that is not 12 digits).
func NewNotifier(s Settings, ddb *dynamodb.Client, log *slog.Logger) (*notifier.Notifier, error) {
	if err := require(appenv.EnvNotificationsTable, s.NotificationsTable); err != nil {
		return nil, err
	}
	cfg := orderedConsumerConfig(s, s.NotificationsTable, log)
	cfg.ItemRetention = s.NotificationRetention
	return notifier.New(ddb, cfg)
}

// ConsumerQueues is what a consumer's handler calls on SQS: SendMessage to
// its DLQ and ChangeMessageVisibility on its own queue (an *sqs.Client does
// both).
type ConsumerQueues interface {
	sqsconsumer.MessageSender
	sqsconsumer.VisibilityChanger
}

// NewConsumerHandler wraps a consumer's event handler h (ledger.Handle,
// notifier.Handle) for the consumer delivery path: EventBridge rule → the
// consumer's SQS queue → Lambda SQS event source mapping (BatchSize
// config.DefaultConsumerBatchSize, ReportBatchItemFailures) →
// (*sqsconsumer.Handler).Handle, which answers with a partial batch response
// by messageId. name is the consumer's name (routing.ConsumerLedger,
// routing.ConsumerNotifier); dlq is the SQS client that dead-letters an event
// whose handler error wraps *sqsconsumer.PermanentError to
// Settings.ConsumerDLQURL (config.EnvConsumerDLQURL), with the reason as a
// message attribute. Other failures are retried by the queue — sooner than
// its visibility timeout: the handler shortens a failed message's visibility
// to Settings.ConsumerRetryBase doubling per receive, capped at
// Settings.ConsumerRetryMax (sqsconsumer.RetryDelays) — and moved to the
// same DLQ by its redrive policy after config.DefaultConsumerMaxReceiveCount
// receives.
//
// The consumers classify their own errors: an event retrying cannot fix
// (malformed, unsupported event_version, not what the order service can
// emit) comes back as a *sqsconsumer.PermanentError with its reason and goes
// to the DLQ at once instead of using up the queue's receive count.
//
// Every queue of the stack has a MaximumMessageSize of 1 MiB (an EventBridge
// event wrapping a 256 KB entry is larger than 256 KiB), so the DLQ's limit
// given to sqsconsumer is sqsconsumer.MaxQueueMessageBytes.
//
// It returns an error naming CONSUMER_DLQ_URL when it is empty, an error for
// a nil dlq, or the error of sqsconsumer.New (nil h, empty name).
func NewConsumerHandler(s Settings, name string, h sqsconsumer.EventHandler, dlq ConsumerQueues, log *slog.Logger) (*sqsconsumer.Handler, error) {
	if err := require(config.EnvConsumerDLQURL, s.ConsumerDLQURL); err != nil {
		return nil, err
	}
	if dlq == nil {
		return nil, fmt.Errorf("app: consumer %s: nil DLQ client", name)
	}
	base, most := s.ConsumerRetryBase, s.ConsumerRetryMax
	if most <= 0 {
		most = config.ConsumerVisibilityTimeoutFactor * config.DefaultConsumerTimeout
	}
	if base <= 0 {
		base = min(config.DefaultConsumerRetryBase, most)
	}
	return sqsconsumer.New(h, sqsconsumer.Config{
		Name:            name,
		DLQ:             dlq,
		DLQURL:          s.ConsumerDLQURL,
		MaxMessageBytes: sqsconsumer.MaxQueueMessageBytes,
		RetryDelay:      retryDelay(base, most, gapMaxReceives(s)),
		Queue:           dlq,
		Logger:          log,
	})
}

// NewFulfilment returns the fulfilment consumer: on OrderPaid it creates a
// shipment at the provider (Idempotency-Key: the event_id), on a paid
// order's OrderCancelled it cancels it, each effect guarded by an
// idempotency record (pkg/idempotency) that lives as long as a dedup marker
// (DedupRetention: it must outlast the redelivery window, days, not
// Powertools' default hour). creds supplies the provider token (nil: none).
// It needs ShipmentsTable, IdempotencyTable and ProviderURL and returns an
// error naming a missing setting.
//
// tune, when given, adjusts the configuration before it is used (the local
// stack's chaos runs set Idempotency.BeforeComplete); the Lambda main passes
// none.
func NewFulfilment(s Settings, ddb *dynamodb.Client, creds fulfilment.CredentialsSource, log *slog.Logger, tune ...func(*fulfilment.Config)) (*fulfilment.Fulfilment, error) {
	if err := require(appenv.EnvShipmentsTable, s.ShipmentsTable, appenv.EnvIdempotencyTable, s.IdempotencyTable,
		appenv.EnvProviderURL, s.ProviderURL); err != nil {
		return nil, err
	}
	cfg := fulfilment.Config{
		Table:           s.ShipmentsTable,
		Idempotency:     idempotency.Config{Table: s.IdempotencyTable, Expiry: s.DedupRetention},
		Provider:        fulfilment.ProviderConfig{BaseURL: s.ProviderURL, Credentials: creds},
		ExpectedSource:  s.Source,
		ExpectedAccount: s.ExpectedAccount,
		Logger:          log,
	}
	for _, f := range tune {
		f(&cfg)
	}
	return fulfilment.New(ddb, nil, cfg)
}

// HeldRetryBase is the delay before an event an ordered consumer held on
// its first receive (it arrived before the one it follows) is received
// again: the missing event is usually a few hundred milliseconds behind
// (two deliveries of one aggregate racing under MaximumConcurrency 2), so
// waiting the whole failure delay would add ~10 s to the p99. Later
// receives of a held event wait longer (see retryDelay), so that a gap is
// dead-lettered only after its missing event had the queue's whole retry
// window (docs/ORDERING.md).
const HeldRetryBase = time.Second

// MaxVisibilityTimeout is the longest visibility timeout SQS accepts in
// ChangeMessageVisibility: 12 hours (SQS API Reference,
// ChangeMessageVisibility).
const MaxVisibilityTimeout = 12 * time.Hour

// retryDelay is the consumers' RetryDelay (receive count n, handler error).
// A failed event comes back after base doubling per receive, capped at
// most (sqsconsumer.RetryDelays): its whole retry window before the queue's
// redrive policy moves it to the DLQ on receive gapMax+1 is
// W = failed(1) + … + failed(gapMax). A held event (errors.Is(err,
// dedup.ErrSequenceGap)), dead-lettered with sequence_gap on receive
// gapMax, must wait longer than the event it waits for can spend failing,
// or a gap would be dead-lettered while its missing event is still being
// retried. So its waits grow geometrically from min(HeldRetryBase, most)
// — early retries catch the common case of a predecessor a few hundred
// milliseconds or seconds behind — by the ratio that makes the whole hold
// (receives 1..gapMax-1) at least W + failed(1) (one base delay for the
// missing event's arrival lag), each wait rounded up to the second. With
// base 10 s, most 180 s and gapMax 5 (the stack's defaults): W = 10 + 20 +
// 40 + 80 + 160 = 310 s and the held waits are 1, 7, 42, 271 s (321 s).
// With gapMax ≤ 2 there is no early retry: the one wait is W + failed(1).
// Delays are capped at MaxVisibilityTimeout.
func retryDelay(base, most time.Duration, gapMax int) func(int, error) time.Duration {
	failed := sqsconsumer.RetryDelays(base, most)
	var window time.Duration
	for n := 1; n <= gapMax; n++ {
		window += failed(n, nil)
	}
	target := float64(window + failed(1, nil))
	first := float64(min(HeldRetryBase, most))
	// ratio r ≥ 1 with first·(1 + r + … + r^(gapMax-2)) ≥ target, by bisection
	sum := func(r float64) float64 {
		t, term := 0.0, first
		for n := 1; n < gapMax; n++ {
			t += term
			term *= r
		}
		return t
	}
	lo, hi := 1.0, 2.0
	for sum(hi) < target && hi < 1e9 {
		hi *= 2
	}
	for range 100 {
		if mid := (lo + hi) / 2; sum(mid) < target {
			lo = mid
		} else {
			hi = mid
		}
	}
	ratio := hi
	held := func(n int) time.Duration {
		switch {
		case gapMax <= 2:
			return time.Duration(target)
		case n <= 1:
			return time.Duration(first)
		}
		d := time.Duration(first * math.Pow(ratio, float64(min(n, gapMax-1)-1)))
		return (d + time.Second - 1).Truncate(time.Second)
	}
	return func(n int, err error) time.Duration {
		if errors.Is(err, dedup.ErrSequenceGap) {
			return min(held(n), MaxVisibilityTimeout)
		}
		return failed(n, err)
	}
}

// gapMaxReceives is Settings.ConsumerGapMaxReceives, or its default.
func gapMaxReceives(s Settings) int {
	if s.ConsumerGapMaxReceives > 0 {
		return s.ConsumerGapMaxReceives
	}
	return config.DefaultConsumerGapMaxReceives
}
