package outbox

import (
	"errors"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// WriterConfigFromEnv reads a writer's configuration from the environment
// variables the CDK module's outboxcdk.Outbox.GrantWriteEvents sets on a
// writer function:
//
//   - config.EnvOutboxTable (OUTBOX_TABLE_NAME), required: Table
//   - config.EnvEventSource (EVENT_SOURCE), required: Source
//   - config.EnvPendingShards (PENDING_SHARDS, 1..config.MaxPendingShards),
//     default config.DefaultPendingShards: PendingShards
//   - config.EnvMaxEntryBytes (MAX_ENTRY_BYTES, bytes), default
//     config.DefaultMaxEntryBytes: MaxEntryBytes
//   - config.EnvRegions (OUTBOX_REGIONS) and config.EnvAWSRegion
//     (AWS_REGION), through config.RegionFromEnv: Region ("" when
//     OUTBOX_REGIONS is unset: single-Region mode; an error when it is
//     malformed or does not list AWS_REGION)
//
// Keys and the Update settings are left zero: set Keys for your own tables
// (TableKeys) before NewWriter. The error joins one error per missing or
// unparsable variable, each naming it; Validate's checks (a source
// starting with "aws.", a shard count out of range) run in NewWriter.
func WriterConfigFromEnv() (WriterConfig, error) {
	var errs []error
	required := func(name string) string {
		v, err := config.Required(name)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	c := WriterConfig{
		Table:  required(config.EnvOutboxTable),
		Source: required(config.EnvEventSource),
	}
	var err error
	if c.PendingShards, err = config.Int(config.EnvPendingShards, config.DefaultPendingShards); err != nil {
		errs = append(errs, err)
	}
	if c.MaxEntryBytes, err = config.Int(config.EnvMaxEntryBytes, config.DefaultMaxEntryBytes); err != nil {
		errs = append(errs, err)
	}
	if c.Region, err = config.RegionFromEnv(); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}
