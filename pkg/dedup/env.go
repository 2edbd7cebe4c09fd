package dedup

import (
	"errors"
	"fmt"
	"os"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// ConsumerConfigFromEnv reads a consumer's configuration from the
// environment variables the CDK module's consumer construct sets on the
// consumer function:
//
//   - config.EnvConsumerTable (CONSUMER_TABLE_NAME), required: Table, the
//     consumer's own table (dedup markers, gates, buffer; key pk, the
//     state index WithStateIndex, TTL on TTLAttribute)
//   - config.EnvEventSource (EVENT_SOURCE), required: ExpectedSource
//   - config.EnvExpectedEventAccount (EXPECTED_EVENT_ACCOUNT), optional, a
//     12-digit AWS account id: ExpectedAccount
//   - config.EnvDedupRetentionSeconds (DEDUP_RETENTION_SECONDS, whole
//     seconds, at least MinRetention: 3600), default
//     config.DefaultDedupRetention: Dedup.Retention
//
// EVENT_SOURCE must not start with "aws." (EventBridge's PutEvents refuses
// such sources), and required values must not begin or end with white
// space (config.Required).
//
// The rest (Ordering, Logger, …) is the caller's; NewConsumer applies the
// defaults. The error joins one error per missing or invalid variable, each
// naming it.
func ConsumerConfigFromEnv() (ConsumerConfig, error) {
	var errs []error
	var c ConsumerConfig
	var err error
	if c.Table, err = config.Required(config.EnvConsumerTable); err != nil {
		errs = append(errs, err)
	}
	if c.ExpectedSource, err = config.Required(config.EnvEventSource); err != nil {
		errs = append(errs, err)
	} else if reservedSource(c.ExpectedSource) {
		errs = append(errs, fmt.Errorf("config: %s=%q starts with \"aws.\", which EventBridge's PutEvents refuses: no event of your relay can carry it", config.EnvEventSource, c.ExpectedSource))
	}
	c.ExpectedAccount = config.String(config.EnvExpectedEventAccount, "")
	if c.ExpectedAccount != "" && !accountID(c.ExpectedAccount) {
		errs = append(errs, fmt.Errorf("config: %s=%q is not a 12-digit AWS account id", config.EnvExpectedEventAccount, c.ExpectedAccount))
	}
	if c.Dedup.Retention, err = config.Seconds(config.EnvDedupRetentionSeconds, config.DefaultDedupRetention); err != nil {
		errs = append(errs, err)
	} else if c.Dedup.Retention < MinRetention {
		// Set, and below the minimum (0 included: it would otherwise
		// silently mean the 7-day default).
		errs = append(errs, fmt.Errorf("config: %s=%q is below the dedup marker's minimum retention, %d seconds", config.EnvDedupRetentionSeconds, os.Getenv(config.EnvDedupRetentionSeconds), int(MinRetention.Seconds())))
	}
	return c, errors.Join(errs...)
}

// NewConsumerFromEnv is NewConsumer(name, client, cfg, 0, ordering) with the
// name from config.EnvConsumerName (CONSUMER_NAME, required: the name the
// consumer construct gives the consumer's alarms and sets on its function)
// and cfg from ConsumerConfigFromEnv. It returns cfg too, for the effect
// builder's table (cfg.Table). The error joins one error per missing or
// invalid variable, each naming it, or is NewConsumer's.
func NewConsumerFromEnv(client TransactWriter, ordering Ordering) (Consumer, ConsumerConfig, error) {
	name, nerr := config.Required(config.EnvConsumerName)
	cfg, err := ConsumerConfigFromEnv()
	if err := errors.Join(nerr, err); err != nil {
		return Consumer{}, cfg, err
	}
	c, err := NewConsumer(name, client, cfg, 0, ordering)
	return c, cfg, err
}
