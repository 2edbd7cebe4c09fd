package app

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/api"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// NewAPI returns the order HTTP API (internal/orders/api) wired to the orders and outbox
// tables. It needs OrdersTable and OutboxTable and returns an error naming a
// missing setting or an invalid value. The caller identity mode comes from
// Settings.APICallerMode (see CallerMode).
func NewAPI(s Settings, ddb *dynamodb.Client, log *slog.Logger) (http.Handler, error) {
	if err := require(appenv.EnvOrdersTable, s.OrdersTable, config.EnvOutboxTable, s.OutboxTable); err != nil {
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
	callers, err := CallerMode(s.APICallerMode)
	if err != nil {
		return nil, err
	}
	h, err := api.New(api.Config{Orders: repo, Logger: log, Callers: callers})
	if err != nil || !s.Tracing {
		return h, err
	}
	return instrumentHTTP(h), nil
}

// routeTemplate names a request path by its route, for a span name of low
// cardinality: "/orders/{id}/pay" for "/orders/0193…/pay".
func routeTemplate(p string) string {
	rest, ok := strings.CutPrefix(p, "/orders/")
	if !ok || rest == "" {
		return p
	}
	if _, cmd, found := strings.Cut(rest, "/"); found {
		return "/orders/{id}/" + cmd
	}
	return "/orders/{id}"
}

// CallerMode maps a appenv.EnvAPICallerMode value to the api.CallerMode:
// "" and appenv.APICallerModeAuto to api.CallersAuto,
// appenv.APICallerModeIAMOnly to api.CallersIAMOnly and
// appenv.APICallerModeOpenDemo to api.CallersOpenDemo. Any other value is an
// error naming the variable.
func CallerMode(v string) (api.CallerMode, error) {
	switch v {
	case "", appenv.APICallerModeAuto:
		return api.CallersAuto, nil
	case appenv.APICallerModeIAMOnly:
		return api.CallersIAMOnly, nil
	case appenv.APICallerModeOpenDemo:
		return api.CallersOpenDemo, nil
	}
	return 0, fmt.Errorf("config: %s=%q is not %q, %q or %q", appenv.EnvAPICallerMode, v,
		appenv.APICallerModeAuto, appenv.APICallerModeIAMOnly, appenv.APICallerModeOpenDemo)
}

// NewOutboxWriter returns the outbox writer for Settings; with
// Settings.Region set (multi-Region mode) it stamps and fences every write
// (outbox.WriterConfig.Region).
func NewOutboxWriter(s Settings, tx outbox.TransactWriter) (*outbox.Writer, error) {
	return outbox.NewWriter(tx, outbox.WriterConfig{
		Table:         s.OutboxTable,
		Source:        s.Source,
		Region:        s.Region,
		PendingShards: s.PendingShards,
		MaxEntryBytes: s.MaxEntryBytes,
	})
}
