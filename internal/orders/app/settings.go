// Package app is the composition root of the order service: it turns
// Settings (read from the environment variables named in pkg/config) and AWS
// clients into the handlers each Lambda function runs. The Lambda mains in
// functions/ and the local stack (internal/devstack) call the same constructors, so
// the code that runs locally is the code that runs in AWS.
package app

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// Settings are every function's configuration. Each function validates only
// the fields it needs (see the New* constructors).
type Settings struct {
	OutboxTable        string
	OrdersTable        string
	LedgerTable        string
	NotificationsTable string
	// ShipmentsTable, IdempotencyTable, ProviderURL and ProviderSecretARN
	// configure the fulfilment consumer (appenv.EnvShipmentsTable, …).
	ShipmentsTable    string
	IdempotencyTable  string
	ProviderURL       string
	ProviderSecretARN string
	// EventBus is the EventBridge bus name or ARN.
	EventBus string
	// Source is the EventBridge Source of published events.
	Source string
	// ParkedQueueURL is the SQS queue receiving parked records.
	ParkedQueueURL string
	// ConsumerDLQURL is the URL of a consumer's own SQS dead-letter queue
	// (config.EnvConsumerDLQURL): permanently failing events are sent there
	// at once (sqsconsumer.PermanentError). Read by the ledger and notifier.
	ConsumerDLQURL string
	// ExpectedAccount is the AWS account id every event a consumer applies
	// must carry (config.EnvExpectedEventAccount,
	// dedup.ConsumerConfig.ExpectedAccount); empty checks no account.
	ExpectedAccount string
	// APICallerMode is appenv.EnvAPICallerMode: one of
	// appenv.APICallerModeAuto (default), APICallerModeIAMOnly,
	// APICallerModeOpenDemo. Read by the api.
	APICallerMode string
	// Region is this function's Region in multi-Region mode
	// (config.RegionFromEnv: AWS_REGION, which must be listed in
	// OUTBOX_REGIONS), "" in single-Region mode. The api's outbox writer
	// stamps and fences its writes with it (outbox.WriterConfig.Region).
	Region string
	// PendingShards is the pending index shard count (1..256).
	PendingShards int
	// ReconcileAfter is the age after which pending records are re-sent.
	ReconcileAfter time.Duration
	// AllowShortReconcileAfter lets ReconcileAfter go below
	// config.MinReconcileAfter (reconciler.Config.AllowShortReconcileAfter).
	// Not read from the environment: only the local stack and tests set it.
	AllowShortReconcileAfter bool
	// ReconcileBudget bounds one reconciler run.
	ReconcileBudget time.Duration
	// PublishedRetention is the TTL of published outbox records.
	PublishedRetention time.Duration
	// DedupRetention is the TTL of consumer dedup markers.
	DedupRetention time.Duration
	// ConsumerRetryBase and ConsumerRetryMax shape the delay before a
	// failed consumer message is received again (sqsconsumer.RetryDelays).
	// Not read from the environment; zero means config.DefaultConsumerRetryBase
	// and the queue's visibility timeout (ConsumerVisibilityTimeoutFactor x
	// config.DefaultConsumerTimeout), as the stack sets it.
	ConsumerRetryBase time.Duration
	ConsumerRetryMax  time.Duration
	// ConsumerGapMaxReceives is the receive at which an ordered consumer
	// dead-letters an event still waiting for an earlier one (reason
	// sequence_gap). Not read from the environment; zero means
	// config.DefaultConsumerGapMaxReceives (the queue's maxReceiveCount).
	ConsumerGapMaxReceives int
	// NotificationRetention is how long the notifier keeps a notification
	// (0: forever).
	NotificationRetention time.Duration
	// MaxEntryBytes is the EventBridge entry size limit in bytes.
	MaxEntryBytes int
	// RelayRetryBudget and RelayCallTimeout tune the relay's publisher and
	// marker (relay.PublisherConfig.RetryBudget, CallTimeout of both); zero
	// takes the relay's defaults (20 s, 5 s). Not read from the
	// environment: the local stack and chaos shorten them so that a short
	// function timeout still holds relay.MinFunctionTimeout.
	RelayRetryBudget time.Duration
	RelayCallTimeout time.Duration
	// Metrics receives the CloudWatch embedded-metric-format lines of the
	// relay, the reconciler and the ordered consumers' resequencer sweeps. Not read from the environment; nil means
	// standard output (where Lambda ships them to CloudWatch).
	Metrics io.Writer
	// Tracing is config.EnvTracing = config.TracingOn: the functions
	// instrument their HTTP server (otelhttp) and AWS SDK clients (otelaws)
	// and LambdaInit installs the OTLP tracer provider (otelsetup.Setup).
	// False: nothing is instrumented, no span is recorded.
	Tracing bool
}

// SettingsFromEnv reads Settings from the environment variables in
// pkg/config, applying the documented defaults. It returns an error naming
// the variable when a value does not parse. Required names are checked by
// the constructors that need them.
func SettingsFromEnv() (Settings, error) {
	s := Settings{
		OutboxTable:        config.String(config.EnvOutboxTable, ""),
		OrdersTable:        config.String(appenv.EnvOrdersTable, ""),
		LedgerTable:        config.String(appenv.EnvLedgerTable, ""),
		NotificationsTable: config.String(appenv.EnvNotificationsTable, ""),
		ShipmentsTable:     config.String(appenv.EnvShipmentsTable, ""),
		IdempotencyTable:   config.String(appenv.EnvIdempotencyTable, ""),
		ProviderURL:        config.String(appenv.EnvProviderURL, ""),
		ProviderSecretARN:  config.String(appenv.EnvProviderSecretARN, ""),
		EventBus:           config.String(config.EnvEventBusName, ""),
		Source:             config.String(config.EnvEventSource, appenv.EventSource),
		ParkedQueueURL:     config.String(config.EnvParkedQueueURL, ""),
		ConsumerDLQURL:     config.String(config.EnvConsumerDLQURL, ""),
		ExpectedAccount:    config.String(config.EnvExpectedEventAccount, ""),
		APICallerMode:      config.String(appenv.EnvAPICallerMode, appenv.APICallerModeAuto),
	}
	var errs []error
	var err error
	switch v := config.String(config.EnvTracing, config.TracingOff); v {
	case config.TracingOff:
	case config.TracingOn:
		s.Tracing = true
	default:
		errs = append(errs, fmt.Errorf("config: %s=%q is not %q or %q", config.EnvTracing, v, config.TracingOff, config.TracingOn))
	}
	if s.PendingShards, err = config.Int(config.EnvPendingShards, config.DefaultPendingShards); err != nil {
		errs = append(errs, err)
	}
	if s.Region, err = config.RegionFromEnv(); err != nil {
		errs = append(errs, err)
	}
	if s.MaxEntryBytes, err = config.Int(config.EnvMaxEntryBytes, config.DefaultMaxEntryBytes); err != nil {
		errs = append(errs, err)
	}
	durations := []struct {
		dst  *time.Duration
		name string
		def  time.Duration
	}{
		{&s.ReconcileAfter, config.EnvReconcileAfterSeconds, config.DefaultReconcileAfter},
		{&s.ReconcileBudget, config.EnvReconcileBudgetSeconds, config.DefaultReconcileBudget},
		{&s.PublishedRetention, config.EnvPublishedRetentionSeconds, config.DefaultPublishedRetention},
		{&s.DedupRetention, config.EnvDedupRetentionSeconds, config.DefaultDedupRetention},
		{&s.NotificationRetention, appenv.EnvNotificationRetentionSeconds, appenv.DefaultNotificationRetention},
	}
	for _, d := range durations {
		if *d.dst, err = config.Seconds(d.name, d.def); err != nil {
			errs = append(errs, err)
		}
	}
	return s, errors.Join(errs...)
}

// require returns an error naming each empty setting among pairs of
// (environment variable name, value).
func require(pairs ...string) error {
	var errs []error
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			errs = append(errs, fmt.Errorf("config: environment variable %s is required", pairs[i]))
		}
	}
	return errors.Join(errs...)
}
