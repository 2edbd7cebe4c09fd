// Package appenv names the example orders application's own
// configuration: the environment variables its functions read besides the
// outbox library's (pkg/config), their values and defaults, and the
// EventBridge source it publishes with. The CDK stack (infra/stack) and the
// functions use one spelling from here. It imports nothing.
package appenv

import "time"

// Environment variables of the example's functions, and defaults.
const (
	// EnvOrdersTable is the orders (business) table name (read by api).
	EnvOrdersTable = "ORDERS_TABLE_NAME"
	// EnvLedgerTable is the ledger consumer's table name.
	EnvLedgerTable = "LEDGER_TABLE_NAME"
	// EnvNotificationsTable is the notifier consumer's table name.
	EnvNotificationsTable = "NOTIFICATIONS_TABLE_NAME"
	// EnvNotificationRetentionSeconds is how long, in seconds, the notifier
	// keeps a notification (customer data) before its TTL expires it; 0
	// keeps notifications forever.
	EnvNotificationRetentionSeconds = "NOTIFICATION_RETENTION_SECONDS"
	// EnvShipmentsTable is the fulfilment consumer's shipments table (pk =
	// order id; the provider's shipment id is visible there).
	EnvShipmentsTable = "SHIPMENTS_TABLE_NAME"
	// EnvIdempotencyTable is the table of pkg/idempotency records of
	// consumers whose effect is outside DynamoDB (fulfilment).
	EnvIdempotencyTable = "IDEMPOTENCY_TABLE_NAME"
	// EnvProviderURL is the fulfilment provider's API base URL.
	EnvProviderURL = "FULFILMENT_PROVIDER_URL"
	// EnvProviderSecretARN is the Secrets Manager secret holding the
	// provider's API token (on AWS); empty sends no Authorization header.
	EnvProviderSecretARN = "FULFILMENT_PROVIDER_SECRET_ARN" //nolint:gosec // G101: the name of an env var, not a credential
	// EnvAPICallerMode selects where the api function takes the caller
	// identity from (api.Config.Callers): APICallerModeAuto (default),
	// APICallerModeIAMOnly or APICallerModeOpenDemo. The CDK stack sets
	// APICallerModeIAMOnly for the IAM auth mode and APICallerModeOpenDemo
	// for the NONE auth mode.
	EnvAPICallerMode = "API_CALLER_MODE"
	// DefaultNotificationRetention is how long the notifier keeps a
	// notification by default (EnvNotificationRetentionSeconds).
	DefaultNotificationRetention = 90 * 24 * time.Hour
)

// Values of EnvAPICallerMode (see internal/orders/api.CallerMode).
const (
	// APICallerModeAuto is api.CallersAuto: the IAM principal behind API
	// Gateway, the X-Caller stand-in over plain HTTP.
	APICallerModeAuto = "auto"
	// APICallerModeIAMOnly is api.CallersIAMOnly: only an API Gateway IAM
	// principal; anything else is 401.
	APICallerModeIAMOnly = "iam-only"
	// APICallerModeOpenDemo is api.CallersOpenDemo: unauthenticated API
	// Gateway requests are served as the anonymous caller (auth mode NONE,
	// demos only).
	APICallerModeOpenDemo = "open-demo"
)

// EventSource is the EventBridge source the example publishes with and its
// consumers expect (the outbox library has no default: a team names its
// own).
const EventSource = "com.ddb-outbox.orders"
