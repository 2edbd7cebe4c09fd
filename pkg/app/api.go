package app

import (
	"log/slog"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/pkg/api"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// NewAPI returns the order HTTP API (pkg/api) wired to the orders and outbox
// tables. It needs OrdersTable and OutboxTable and returns an error naming a
// missing setting or an invalid value.
func NewAPI(s Settings, ddb *dynamodb.Client, log *slog.Logger) (http.Handler, error) {
	if err := require(config.EnvOrdersTable, s.OrdersTable, config.EnvOutboxTable, s.OutboxTable); err != nil {
		return nil, err
	}
	w, err := NewOutboxWriter(s, ddb)
	if err != nil {
		return nil, err
	}
	repo, err := order.NewRepository(order.RepositoryConfig{Table: s.OrdersTable, Client: ddb, Writer: w, Logger: log})
	if err != nil {
		return nil, err
	}
	return api.New(api.Config{Orders: repo, Logger: log})
}

// NewOutboxWriter returns the outbox writer for Settings.
func NewOutboxWriter(s Settings, tx outbox.TransactWriter) (*outbox.Writer, error) {
	return outbox.NewWriter(tx, outbox.WriterConfig{
		Table:         s.OutboxTable,
		Source:        s.Source,
		PendingShards: s.PendingShards,
		MaxEntryBytes: s.MaxEntryBytes,
	})
}
