package wallet

import (
	"errors"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// EnvAccountsTable names the accounts table for the accounts function (the
// wallet's own variable; the CDK app sets it).
const EnvAccountsTable = "ACCOUNTS_TABLE_NAME"

// WriterConfigFromEnv reads the outbox writer's configuration from the
// variables outboxcdk.Outbox.GrantWriteEvents sets on a writer function
// (config.EnvOutboxTable, config.EnvEventSource, config.EnvPendingShards,
// config.EnvMaxEntryBytes; the last two optional) and the accounts table
// from EnvAccountsTable, whose key it adds to WriterConfig.Keys. The error
// joins one error per missing or invalid variable.
func WriterConfigFromEnv() (outbox.WriterConfig, string, error) {
	cfg, err := outbox.WriterConfigFromEnv()
	accounts, aerr := config.Required(EnvAccountsTable)
	cfg.Keys = []outbox.TableKeys{TableKeys(accounts)}
	return cfg, accounts, errors.Join(err, aerr)
}
