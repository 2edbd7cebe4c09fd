package wallet

import (
	"errors"
	"fmt"
	"os"
	"strconv"

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
	var errs []error
	need := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is required", name))
		}
		return v
	}
	num := func(name string) int {
		v := os.Getenv(name)
		if v == "" {
			return 0 // the writer's default
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s=%q is not a positive integer", name, v))
		}
		return n
	}
	accounts := need(EnvAccountsTable)
	cfg := outbox.WriterConfig{
		Table:         need(config.EnvOutboxTable),
		Source:        need(config.EnvEventSource),
		PendingShards: num(config.EnvPendingShards),
		MaxEntryBytes: num(config.EnvMaxEntryBytes),
		Keys:          []outbox.TableKeys{TableKeys(accounts)},
	}
	return cfg, accounts, errors.Join(errs...)
}
