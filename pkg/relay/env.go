package relay

import (
	"errors"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// ConfigFromEnv reads the relay's configuration from the environment
// variables the CDK module's outboxcdk.Outbox construct sets on the relay
// function:
//
//   - config.EnvOutboxTable (OUTBOX_TABLE_NAME), required: Marker.Table
//   - config.EnvEventBusName (EVENT_BUS_NAME), required: Publisher.EventBusName
//   - config.EnvEventSource (EVENT_SOURCE), required: Publisher.Source
//   - config.EnvParkedQueueURL (PARKED_QUEUE_URL), required: Marker.ParkedQueueURL
//   - config.EnvMaxEntryBytes (MAX_ENTRY_BYTES, bytes), default
//     config.DefaultMaxEntryBytes: Publisher.MaxEntryBytes
//   - config.EnvPublishedRetentionSeconds (PUBLISHED_RETENTION_SECONDS,
//     whole seconds), default config.DefaultPublishedRetention:
//     Marker.PublishedRetention
//   - config.EnvRegions (OUTBOX_REGIONS) and config.EnvAWSRegion
//     (AWS_REGION): Region, by config.RegionFromEnv ("" in single-Region
//     mode, when OUTBOX_REGIONS is unset)
//
// Every other field is left zero (New applies its defaults; Metrics then
// follows config.MetricsWriter). The error joins one error per missing or
// unparsable variable, each naming it; Validate's checks run in New.
func ConfigFromEnv() (Config, error) {
	var errs []error
	required := func(name string) string {
		v, err := config.Required(name)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	var c Config
	c.Marker.Table = required(config.EnvOutboxTable)
	c.Publisher.EventBusName = required(config.EnvEventBusName)
	c.Publisher.Source = required(config.EnvEventSource)
	c.Marker.ParkedQueueURL = required(config.EnvParkedQueueURL)
	var err error
	if c.Publisher.MaxEntryBytes, err = config.Int(config.EnvMaxEntryBytes, config.DefaultMaxEntryBytes); err != nil {
		errs = append(errs, err)
	}
	if c.Marker.PublishedRetention, err = config.Seconds(config.EnvPublishedRetentionSeconds, config.DefaultPublishedRetention); err != nil {
		errs = append(errs, err)
	}
	if c.Region, err = config.RegionFromEnv(); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}
