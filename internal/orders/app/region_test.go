package app

import (
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// GIVEN OUTBOX_REGIONS and AWS_REGION (what a multi-Region stack and Lambda
// set)
// WHEN Settings are read and the api's outbox writer is built
// THEN the writer's Region is AWS_REGION; unset, it is "" (single-Region
// mode); AWS_REGION outside the list is an error naming it.
func TestSettingsFromEnvReadsRegion(t *testing.T) {
	t.Setenv(config.EnvRegions, "")
	t.Setenv(config.EnvAWSRegion, "eu-central-1")
	s, err := SettingsFromEnv()
	if err != nil || s.Region != "" {
		t.Fatalf("single-Region: Region %q, %v", s.Region, err)
	}
	t.Setenv(config.EnvRegions, "eu-west-1,eu-central-1")
	if s, err = SettingsFromEnv(); err != nil || s.Region != "eu-central-1" {
		t.Fatalf("multi-Region: Region %q, %v", s.Region, err)
	}
	s.OutboxTable, s.Source = "outbox", "com.example.orders"
	w, err := NewOutboxWriter(s, nil)
	if err != nil || w.Region() != "eu-central-1" {
		t.Fatalf("writer Region %v, %v", w, err)
	}
	t.Setenv(config.EnvAWSRegion, "us-east-1")
	if _, err := SettingsFromEnv(); err == nil || !strings.Contains(err.Error(), config.EnvAWSRegion) {
		t.Fatalf("AWS_REGION outside OUTBOX_REGIONS: %v", err)
	}
}
