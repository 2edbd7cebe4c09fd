package outbox

import (
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// TestWriterConfigFromEnv reads the variables GrantWriteEvents sets,
// applies the defaults, and names each missing or unparsable variable.
func TestWriterConfigFromEnv(t *testing.T) {
	set := func(kv map[string]string) {
		for _, k := range []string{config.EnvOutboxTable, config.EnvEventSource, config.EnvPendingShards, config.EnvMaxEntryBytes, config.EnvRegions, config.EnvAWSRegion} {
			t.Setenv(k, kv[k])
		}
	}
	set(map[string]string{config.EnvOutboxTable: "outbox", config.EnvEventSource: "com.example.wallet", config.EnvPendingShards: "4"})
	c, err := WriterConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.Table != "outbox" || c.Source != "com.example.wallet" || c.PendingShards != 4 || c.MaxEntryBytes != config.DefaultMaxEntryBytes || c.Region != "" {
		t.Fatalf("config %+v", c)
	}
	c.setDefaults() // as NewWriter does
	if err := c.Validate(); err != nil {
		t.Fatalf("the config read from the construct's variables is invalid: %v", err)
	}
	set(map[string]string{config.EnvPendingShards: "many"})
	_, err = WriterConfigFromEnv()
	for _, name := range []string{config.EnvOutboxTable, config.EnvEventSource, config.EnvPendingShards} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v does not name %s", err, name)
		}
	}
	if err != nil && strings.Contains(err.Error(), config.EnvMaxEntryBytes) {
		t.Errorf("error %v names %s, which is unset (its default applies)", err, config.EnvMaxEntryBytes)
	}
}

// TestWriterConfigFromEnvRegion: OUTBOX_REGIONS turns multi-Region mode on
// with AWS_REGION as the writer's Region; a list without AWS_REGION, or a
// malformed list, is an error naming the variable.
func TestWriterConfigFromEnvRegion(t *testing.T) {
	base := map[string]string{config.EnvOutboxTable: "outbox", config.EnvEventSource: "com.example.wallet"}
	for _, c := range []struct {
		regions, here string
		want          string // Region, or the variable the error names
		ok            bool
	}{
		{"", "eu-west-1", "", true},
		{"eu-west-1,eu-central-1", "eu-central-1", "eu-central-1", true},
		{"eu-west-1,eu-central-1", "us-east-1", config.EnvAWSRegion, false},
		{"eu-west-1,eu-central-1", "", config.EnvAWSRegion, false},
		{"eu-west-1,EU", "eu-west-1", config.EnvRegions, false},
	} {
		for k, v := range base {
			t.Setenv(k, v)
		}
		t.Setenv(config.EnvRegions, c.regions)
		t.Setenv(config.EnvAWSRegion, c.here)
		got, err := WriterConfigFromEnv()
		switch {
		case c.ok && (err != nil || got.Region != c.want):
			t.Errorf("%s=%q %s=%q: Region %q, error %v; want %q", config.EnvRegions, c.regions, config.EnvAWSRegion, c.here, got.Region, err, c.want)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s=%q %s=%q: error %v does not name %s", config.EnvRegions, c.regions, config.EnvAWSRegion, c.here, err, c.want)
		}
	}
}
