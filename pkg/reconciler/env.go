package reconciler

import (
	"errors"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// ConfigFromEnv reads the reconciler's own configuration from the
// environment variables the CDK module's outboxcdk.Outbox construct sets on
// the reconciler function:
//
//   - config.EnvOutboxTable (OUTBOX_TABLE_NAME), required: Table
//   - config.EnvPendingShards (PENDING_SHARDS, 1..config.MaxPendingShards),
//     default config.DefaultPendingShards: PendingShards
//   - config.EnvReconcileAfterSeconds (RECONCILE_AFTER_SECONDS, whole
//     seconds), default config.DefaultReconcileAfter: ReconcileAfter
//   - config.EnvReconcileBudgetSeconds (RECONCILE_BUDGET_SECONDS, whole
//     seconds), default config.DefaultReconcileBudget: Budget
//   - config.EnvRegions (OUTBOX_REGIONS) and config.EnvAWSRegion
//     (AWS_REGION): Region, by config.RegionFromEnv ("" in single-Region
//     mode, when OUTBOX_REGIONS is unset), and LegacyOwner: true when
//     Region is the first Region of OUTBOX_REGIONS
//     (config.RegionsFromEnv()[0], the legacy owner of records written
//     before the switch to multi-Region mode)
//
// The reconciler publishes and marks through a relay's Publisher and Marker:
// read their configuration with relay.ConfigFromEnv. AllowShortReconcileAfter
// is never read from the environment. The error joins one error per missing
// or unparsable variable, each naming it; Validate's checks run in New.
func ConfigFromEnv() (Config, error) {
	var errs []error
	var c Config
	var err error
	if c.Table, err = config.Required(config.EnvOutboxTable); err != nil {
		errs = append(errs, err)
	}
	if c.PendingShards, err = config.Int(config.EnvPendingShards, config.DefaultPendingShards); err != nil {
		errs = append(errs, err)
	}
	if c.ReconcileAfter, err = config.Seconds(config.EnvReconcileAfterSeconds, config.DefaultReconcileAfter); err != nil {
		errs = append(errs, err)
	}
	if c.Budget, err = config.Seconds(config.EnvReconcileBudgetSeconds, config.DefaultReconcileBudget); err != nil {
		errs = append(errs, err)
	}
	if c.Region, err = config.RegionFromEnv(); err != nil {
		errs = append(errs, err)
	} else if c.Region != "" {
		regions, _ := config.RegionsFromEnv() // parsed without error by RegionFromEnv
		c.LegacyOwner = len(regions) > 0 && regions[0] == c.Region
	}
	return c, errors.Join(errs...)
}
