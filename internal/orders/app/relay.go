package app

import (
	"log/slog"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// NewRelay returns the outbox relay. It needs OutboxTable, EventBus and
// ParkedQueueURL and returns an error naming a missing setting.
func NewRelay(s Settings, eb relay.EventBridgeAPI, ddb relay.UpdateItemAPI, queue relay.QueueSender, log *slog.Logger) (*relay.Relay, error) {
	if err := require(config.EnvOutboxTable, s.OutboxTable, config.EnvEventBusName, s.EventBus, config.EnvParkedQueueURL, s.ParkedQueueURL); err != nil {
		return nil, err
	}
	return relay.New(eb, ddb, queue, RelayConfig(s, log))
}

// RelayConfig is the relay configuration Settings give (NewRelay builds the
// relay from it; relay.MinFunctionTimeout(RelayConfig(s, nil)) is the
// shortest function timeout that holds it).
func RelayConfig(s Settings, log *slog.Logger) relay.Config {
	return relay.Config{
		Publisher: relay.PublisherConfig{EventBusName: s.EventBus, Source: s.Source, MaxEntryBytes: s.MaxEntryBytes,
			RetryBudget: s.RelayRetryBudget, CallTimeout: s.RelayCallTimeout},
		Marker: relay.MarkerConfig{Table: s.OutboxTable, ParkedQueueURL: s.ParkedQueueURL, PublishedRetention: s.PublishedRetention,
			Metrics: s.Metrics, CallTimeout: s.RelayCallTimeout},
		Logger: log,
	}
}

// ReconcilerClients are the AWS clients the reconciler calls: Query on the
// pending index, PutEvents through the publisher, UpdateItem and SendMessage
// through the marker.
type ReconcilerClients struct {
	DDB interface {
		relay.UpdateItemAPI
		reconciler.QueryAPI
	}
	EventBridge relay.EventBridgeAPI
	Queue       relay.QueueSender
}

// NewReconciler returns the reconciler, publishing and marking through a
// relay built from the same Settings (the same publisher and marker code as
// the stream path). It needs the relay's settings.
func NewReconciler(s Settings, c ReconcilerClients, log *slog.Logger) (*reconciler.Reconciler, error) {
	r, err := NewRelay(s, c.EventBridge, c.DDB, c.Queue, log)
	if err != nil {
		return nil, err
	}
	return reconciler.New(c.DDB, r.Publisher(), r.Marker(), reconciler.Config{
		Table:          s.OutboxTable,
		PendingShards:  s.PendingShards,
		ReconcileAfter: s.ReconcileAfter,
		// Only the local stack and tests set it (never read from the environment).
		AllowShortReconcileAfter: s.AllowShortReconcileAfter,
		Budget:                   s.ReconcileBudget,
		Metrics:                  s.Metrics,
		Logger:                   log,
	})
}
