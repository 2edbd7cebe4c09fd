package outboxcdk

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// fakeBus stands in for an event bus; Validate only checks it is set and
// never calls it (so these tests start no jsii kernel).
type fakeBus struct{ awsevents.IEventBus }

func valid() Props { return Props{EventBus: fakeBus{}, AssetRoot: "dist"} }

func TestSetDefaults(t *testing.T) {
	p := valid()
	p.SetDefaults()
	if p.BatchSize != DefaultBatchSize || p.RetryAttempts != DefaultRetryAttempts ||
		p.MaxRecordAge != DefaultMaxRecordAge || p.ParallelizationFactor != 1 ||
		p.ReconcileRate != DefaultReconcileRate || p.PendingShards != config.DefaultPendingShards ||
		p.EventSource != config.DefaultEventSource || p.MaxEntryBytes != config.DefaultMaxEntryBytes ||
		p.MaxBatchingWindow != 0 {
		t.Errorf("defaults = %+v", p)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(*Props)
		wantErr string // substring; "" means valid
	}{
		{"defaults", func(*Props) {}, ""},
		{"no bus", func(p *Props) { p.EventBus = nil }, "EventBus is required"},
		{"no asset root", func(p *Props) { p.AssetRoot = "" }, "AssetRoot is required"},
		{"batch size max", func(p *Props) { p.BatchSize = 10000 }, ""},
		{"batch size too big", func(p *Props) { p.BatchSize = 10001 }, "BatchSize 10001"},
		{"batch size negative", func(p *Props) { p.BatchSize = -1 }, "BatchSize -1"},
		{"window max", func(p *Props) { p.MaxBatchingWindow = 300 * time.Second }, ""},
		{"window too long", func(p *Props) { p.MaxBatchingWindow = 301 * time.Second }, "MaxBatchingWindow"},
		{"window fractional", func(p *Props) { p.MaxBatchingWindow = 1500 * time.Millisecond }, "whole number of seconds"},
		{"window negative", func(p *Props) { p.MaxBatchingWindow = -time.Second }, "MaxBatchingWindow"},
		{"retries negative", func(p *Props) { p.RetryAttempts = -1 }, "RetryAttempts -1"},
		{"retries max", func(p *Props) { p.RetryAttempts = 10000 }, ""},
		{"retries too many", func(p *Props) { p.RetryAttempts = 10001 }, "RetryAttempts 10001"},
		{"record age min", func(p *Props) { p.MaxRecordAge = 60 * time.Second }, ""},
		{"record age too short", func(p *Props) { p.MaxRecordAge = 59 * time.Second }, "MaxRecordAge"},
		{"record age max", func(p *Props) { p.MaxRecordAge = 604800 * time.Second }, ""},
		{"record age too long", func(p *Props) { p.MaxRecordAge = 604801 * time.Second }, "MaxRecordAge"},
		{"parallelization max", func(p *Props) { p.ParallelizationFactor = 10 }, ""},
		{"parallelization too big", func(p *Props) { p.ParallelizationFactor = 11 }, "ParallelizationFactor 11"},
		{"shards max", func(p *Props) { p.PendingShards = 256 }, ""},
		{"shards too many", func(p *Props) { p.PendingShards = 257 }, "PendingShards 257"},
		{"shards negative", func(p *Props) { p.PendingShards = -2 }, "PendingShards -2"},
		{"entry too big", func(p *Props) { p.MaxEntryBytes = 2 << 20 }, "MaxEntryBytes"},
		{"rate not minutes", func(p *Props) { p.ReconcileRate = 90 * time.Second }, "ReconcileRate"},
		{"rate too fast", func(p *Props) { p.ReconcileRate = 30 * time.Second }, "ReconcileRate"},
		{"budget too long", func(p *Props) { p.ReconcileBudget = 15 * time.Minute }, "ReconcileBudget"},
		{"relay timeout too long", func(p *Props) { p.RelayTimeout = 16 * time.Minute }, "RelayTimeout"},
		{"relay timeout at the minimum", func(p *Props) { p.RelayTimeout = MinRelayTimeout() }, ""},
		{"relay timeout below the minimum", func(p *Props) { p.RelayTimeout = MinRelayTimeout() - time.Second }, "RelayTimeout 31s is outside 32s..15m"},
		{"relay timeout shorter than the reserve", func(p *Props) { p.RelayTimeout = 5 * time.Second }, "marking reserve"},
		{"negative threshold", func(p *Props) { p.OldestPendingThreshold = -time.Minute }, "OldestPendingThreshold"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := valid()
			c.mutate(&p)
			err := p.Validate()
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidProps) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("Validate() = %v, want ErrInvalidProps mentioning %q", err, c.wantErr)
			}
		})
	}
}

// TestMinRelayTimeout: the construct's minimum is the runtime's
// relay.MinFunctionTimeout of the relay's defaults, and the default timeout
// holds it.
func TestMinRelayTimeout(t *testing.T) {
	if got, want := MinRelayTimeout(), relay.MinFunctionTimeout(relay.Config{}); got != want || got != 32*time.Second {
		t.Errorf("MinRelayTimeout() = %s, want relay.MinFunctionTimeout = %s (32s)", got, want)
	}
	if DefaultRelayTimeout < MinRelayTimeout() {
		t.Errorf("DefaultRelayTimeout %s is below MinRelayTimeout %s", DefaultRelayTimeout, MinRelayTimeout())
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	err := Props{BatchSize: -1, ParallelizationFactor: 99}.Validate()
	for _, want := range []string{"EventBus", "AssetRoot", "BatchSize", "ParallelizationFactor"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}
}
