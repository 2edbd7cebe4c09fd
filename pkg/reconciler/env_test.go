package reconciler

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
		for _, k := range []string{config.EnvOutboxTable, config.EnvPendingShards, config.EnvReconcileAfterSeconds, config.EnvReconcileBudgetSeconds} {
			t.Setenv(k, kv[k])
		}
	}
	set(map[string]string{config.EnvOutboxTable: "outbox", config.EnvPendingShards: "4", config.EnvReconcileAfterSeconds: "600"})
	c, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.Table != "outbox" || c.PendingShards != 4 || c.ReconcileAfter != 10*time.Minute || c.Budget != config.DefaultReconcileBudget {
		t.Fatalf("config %+v", c)
	}
	set(map[string]string{config.EnvPendingShards: "x", config.EnvReconcileBudgetSeconds: "-1"})
	_, err = ConfigFromEnv()
	for _, name := range []string{config.EnvOutboxTable, config.EnvPendingShards, config.EnvReconcileBudgetSeconds} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v does not name %s", err, name)
		}
	}
}

// TestConfigFromEnvRegion: Region follows config.RegionFromEnv: "" without
// OUTBOX_REGIONS, AWS_REGION when it is in the list, an error naming the
// variable otherwise; LegacyOwner is set in the list's first Region only.
func TestConfigFromEnvRegion(t *testing.T) {
	t.Setenv(config.EnvOutboxTable, "outbox")
	for _, tc := range []struct {
		regions, here, want, err string
		legacyOwner              bool
	}{
		{"", "eu-west-1", "", "", false},
		{"eu-west-1,eu-central-1", "eu-central-1", "eu-central-1", "", false},
		{"eu-west-1,eu-central-1", "eu-west-1", "eu-west-1", "", true},
		{"eu-central-1,eu-west-1", "eu-central-1", "eu-central-1", "", true},
		{"eu-west-1,eu-central-1", "us-east-1", "", config.EnvAWSRegion, false},
		{"eu-west-1", "eu-west-1", "", config.EnvRegions, false},
	} {
		t.Setenv(config.EnvRegions, tc.regions)
		t.Setenv(config.EnvAWSRegion, tc.here)
		c, err := ConfigFromEnv()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q/%q: error %v, want one naming %s", tc.regions, tc.here, err, tc.err)
			}
			continue
		}
		if err != nil || c.Region != tc.want || c.LegacyOwner != tc.legacyOwner {
			t.Errorf("%q/%q: Region %q, LegacyOwner %v, %v; want %q, %v", tc.regions, tc.here, c.Region, c.LegacyOwner, err, tc.want, tc.legacyOwner)
		}
	}
}
