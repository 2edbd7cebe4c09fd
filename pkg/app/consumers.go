package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/ledger"
	"github.com/ddb-outbox/ddb-outbox/pkg/notifier"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// NewLedger returns the ledger consumer. It needs LedgerTable and
// DedupTable and returns an error naming a missing setting.
func NewLedger(s Settings, ddb *dynamodb.Client, log *slog.Logger) (*ledger.Ledger, error) {
	if err := require(config.EnvLedgerTable, s.LedgerTable, config.EnvDedupTable, s.DedupTable); err != nil {
		return nil, err
	}
	return ledger.New(ddb, ledger.Config{
		Table:  s.LedgerTable,
		Dedup:  dedup.Config{Table: s.DedupTable, Retention: s.DedupRetention},
		Logger: log,
	})
}

// NewNotifier returns the notifier consumer. It needs NotificationsTable
// and DedupTable and returns an error naming a missing setting.
func NewNotifier(s Settings, ddb *dynamodb.Client, log *slog.Logger) (*notifier.Notifier, error) {
	if err := require(config.EnvNotificationsTable, s.NotificationsTable, config.EnvDedupTable, s.DedupTable); err != nil {
		return nil, err
	}
	return notifier.New(ddb, notifier.Config{
		Table:  s.NotificationsTable,
		Dedup:  dedup.Config{Table: s.DedupTable, Retention: s.DedupRetention},
		Logger: log,
	})
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
// message attribute. Other failures are retried by the queue and moved to the
// same DLQ by its redrive policy after config.DefaultConsumerMaxReceiveCount
// receives.
//
// Errors of h that wrap one of PermanentErrors (and are not already a
// *sqsconsumer.PermanentError) are made permanent with that entry's reason,
// so a malformed event or an unsupported event_version goes to the DLQ at
// once instead of using up the queue's receive count.
//
// It returns an error naming CONSUMER_DLQ_URL when it is empty, an error for
// a nil dlq, or the error of sqsconsumer.New (nil h, empty name).
func NewConsumerHandler(s Settings, name string, h sqsconsumer.EventHandler, dlq sqsconsumer.MessageSender, log *slog.Logger) (*sqsconsumer.Handler, error) {
	if err := require(config.EnvConsumerDLQURL, s.ConsumerDLQURL); err != nil {
		return nil, err
	}
	if dlq == nil {
		return nil, fmt.Errorf("app: consumer %s: nil DLQ client", name)
	}
	if h != nil {
		h = classifyPermanent(h)
	}
	return sqsconsumer.New(h, sqsconsumer.Config{
		Name:   name,
		DLQ:    dlq,
		DLQURL: s.ConsumerDLQURL,
		Logger: log,
	})
}

// PermanentErrors are the consumers' sentinel errors that retrying cannot
// fix, with the dead-letter reason (sqsconsumer.AttrReason) each gets.
var PermanentErrors = []struct {
	Err    error
	Reason string
}{
	{dedup.ErrMalformedEvent, sqsconsumer.ReasonMalformedEvent},
	{ledger.ErrInvalidPayload, ReasonInvalidPayload},
	{ledger.ErrUnsupportedVersion, ReasonUnsupportedVersion},
	{notifier.ErrInvalidPayload, ReasonInvalidPayload},
	{notifier.ErrUnsupportedVersion, ReasonUnsupportedVersion},
}

// Dead-letter reasons set by NewConsumerHandler.
const (
	ReasonInvalidPayload     = "invalid_payload"
	ReasonUnsupportedVersion = "unsupported_version"
)

// classifyPermanent wraps h so that an error wrapping one of PermanentErrors
// becomes a *sqsconsumer.PermanentError.
func classifyPermanent(h sqsconsumer.EventHandler) sqsconsumer.EventHandler {
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		err := h(ctx, ev)
		if err == nil {
			return nil
		}
		if _, ok := sqsconsumer.AsPermanent(err); ok {
			return err
		}
		for _, p := range PermanentErrors {
			if errors.Is(err, p.Err) {
				return sqsconsumer.Permanent(p.Reason, err)
			}
		}
		return err
	}
}
