package dedup

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// ConsumerConfig is the configuration every consumer shares (pkg/ledger and
// pkg/notifier alias it as their Config). Zero values take the defaults.
type ConsumerConfig struct {
	// Table is the consumer's own table name. Required.
	Table string
	// Dedup configures the dedup markers. Dedup.Table is required;
	// Dedup.Consumer defaults to the consumer's name.
	Dedup Config
	// CallTimeout bounds one read call (GetItem, Scan page). Default
	// DefaultCallTimeout (10 s).
	CallTimeout time.Duration
	// Logger receives one line per handled event. Default slog.Default().
	Logger *slog.Logger
}

// Consumer is what a consumer builds from a ConsumerConfig: the effective
// configuration and its dedup Applier.
type Consumer struct {
	Config  ConsumerConfig
	Applier *Applier
}

// NewConsumer applies the defaults (Dedup.Consumer = name; Dedup.MaxAttempts
// = maxAttempts when unset and maxAttempts > 0), validates cfg and builds the
// Applier. Errors name the consumer: a nil client, an empty Table, a
// negative CallTimeout, or an invalid Dedup config.
func NewConsumer(name string, client TransactWriter, cfg ConsumerConfig, maxAttempts int) (Consumer, error) {
	if client == nil {
		return Consumer{}, fmt.Errorf("%s: nil client", name)
	}
	if cfg.Dedup.Consumer == "" {
		cfg.Dedup.Consumer = name
	}
	if cfg.Dedup.MaxAttempts == 0 && maxAttempts > 0 {
		cfg.Dedup.MaxAttempts = maxAttempts
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.Table == "":
		return Consumer{}, errors.New(name + ": Config.Table is required")
	case cfg.CallTimeout < 0:
		return Consumer{}, fmt.Errorf("%s: Config.CallTimeout %s is negative", name, cfg.CallTimeout)
	}
	a, err := NewApplier(client, cfg.Dedup)
	if err != nil {
		return Consumer{}, fmt.Errorf("%s: %w", name, err)
	}
	return Consumer{Config: cfg, Applier: a}, nil
}
