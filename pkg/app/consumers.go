package app

import (
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/ledger"
	"github.com/ddb-outbox/ddb-outbox/pkg/notifier"
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
