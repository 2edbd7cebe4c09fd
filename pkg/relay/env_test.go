package relay

import (
	"strings"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// TestConfigFromEnv reads the variables the construct sets, applies the
// defaults, and names each missing or unparsable variable.
func TestConfigFromEnv(t *testing.T) {
	set := func(kv map[string]string) {
		for _, k := range []string{config.EnvOutboxTable, config.EnvEventBusName, config.EnvEventSource, config.EnvParkedQueueURL,
			config.EnvMaxEntryBytes, config.EnvPublishedRetentionSeconds} {
			t.Setenv(k, kv[k])
		}
	}
	set(map[string]string{config.EnvOutboxTable: "outbox", config.EnvEventBusName: "bus", config.EnvEventSource: "com.example.wallet",
		config.EnvParkedQueueURL: "https://sqs/parked", config.EnvPublishedRetentionSeconds: "60"})
	c, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.Marker.Table != "outbox" || c.Publisher.EventBusName != "bus" || c.Publisher.Source != "com.example.wallet" ||
		c.Marker.ParkedQueueURL != "https://sqs/parked" || c.Marker.PublishedRetention != time.Minute ||
		c.Publisher.MaxEntryBytes != config.DefaultMaxEntryBytes {
		t.Fatalf("config %+v", c)
	}
	set(map[string]string{config.EnvEventBusName: "bus", config.EnvMaxEntryBytes: "big"})
	_, err = ConfigFromEnv()
	for _, name := range []string{config.EnvOutboxTable, config.EnvEventSource, config.EnvParkedQueueURL, config.EnvMaxEntryBytes} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v does not name %s", err, name)
		}
	}
	if err != nil && strings.Contains(err.Error(), config.EnvEventBusName) {
		t.Errorf("error %v names %s, which is set", err, config.EnvEventBusName)
	}
}

// TestConfigFromEnvRegion: Region follows config.RegionFromEnv.
func TestConfigFromEnvRegion(t *testing.T) {
	for _, k := range []string{config.EnvOutboxTable, config.EnvEventBusName, config.EnvEventSource, config.EnvParkedQueueURL} {
		t.Setenv(k, "x")
	}
	t.Setenv(config.EnvRegions, "eu-west-1,eu-central-1")
	t.Setenv(config.EnvAWSRegion, "eu-west-1")
	if c, err := ConfigFromEnv(); err != nil || c.Region != "eu-west-1" {
		t.Fatalf("Region %q, %v", c.Region, err)
	}
	t.Setenv(config.EnvAWSRegion, "us-east-1")
	if _, err := ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), config.EnvAWSRegion) {
		t.Fatalf("a Region outside the list: %v", err)
	}
	t.Setenv(config.EnvRegions, "")
	if c, err := ConfigFromEnv(); err != nil || c.Region != "" {
		t.Fatalf("single-Region: Region %q, %v", c.Region, err)
	}
}
