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

func valid() Props {
	return Props{EventBus: fakeBus{}, AssetRoot: "dist", EventSource: "com.example.test"}
}

func TestSetDefaults(t *testing.T) {
	p := valid()
	p.SetDefaults()
	if p.BatchSize != DefaultBatchSize || p.RetryAttempts != DefaultRetryAttempts ||
		p.MaxRecordAge != DefaultMaxRecordAge || p.ParallelizationFactor != 1 ||
		p.ReconcileRate != DefaultReconcileRate || p.PendingShards != config.DefaultPendingShards ||
		p.EventSource != "com.example.test" || p.MaxEntryBytes != config.DefaultMaxEntryBytes ||
		p.MaxBatchingWindow != 0 || p.ArchiveRetentionDays != config.DefaultArchiveRetentionDays {
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
		{"no event source", func(p *Props) { p.EventSource = "" }, "EventSource is required"},
		{"an aws. event source", func(p *Props) { p.EventSource = "aws.orders" }, "starts with \"aws.\""},
		{"archive 30 days", func(p *Props) { p.ArchiveRetentionDays = 30 }, ""},
		{"archive forever", func(p *Props) { p.ArchiveRetentionDays = KeepArchiveForever }, ""},
		{"no archive", func(p *Props) { p.ArchiveRetentionDays = NoArchive }, ""},
		{"archive retention invalid", func(p *Props) { p.ArchiveRetentionDays = -3 }, "ArchiveRetentionDays -3"},
		{"reconciler unreserved", func(p *Props) { p.ReconcilerReservedConcurrency = NoReservedConcurrency }, ""},
		{"reconciler reserved 2", func(p *Props) { p.ReconcilerReservedConcurrency = 2 }, "ReconcilerReservedConcurrency 2"},
		{"batch size max", func(p *Props) { p.BatchSize = 1000 }, ""},
		{"batch size too big", func(p *Props) { p.BatchSize = 1001 }, "BatchSize 1001"},
		{"batch size AWS max", func(p *Props) { p.BatchSize = 10000 }, "BatchSize 10000"},
		{"batch size negative", func(p *Props) { p.BatchSize = -1 }, "BatchSize -1"},
		{"window max", func(p *Props) {
			p.MaxBatchingWindow, p.MaxRecordAge, p.ReconcileAfter = 300*time.Second, 6*time.Minute, 7*time.Minute
		}, ""},
		{"window too long", func(p *Props) { p.MaxBatchingWindow = 301 * time.Second }, "MaxBatchingWindow"},
		{"window fractional", func(p *Props) { p.MaxBatchingWindow = 1500 * time.Millisecond }, "whole number of seconds"},
		{"window negative", func(p *Props) { p.MaxBatchingWindow = -time.Second }, "MaxBatchingWindow"},
		{"window longer than the record age allows", func(p *Props) { p.MaxBatchingWindow = 200 * time.Second }, "MaxRecordAge 4m0s is below MaxBatchingWindow"},
		{"retries negative", func(p *Props) { p.RetryAttempts = -1 }, "RetryAttempts -1"},
		{"retries max", func(p *Props) { p.RetryAttempts = 10 }, ""},
		{"retries too many", func(p *Props) { p.RetryAttempts = 11 }, "RetryAttempts 11"},
		{"retries AWS max", func(p *Props) { p.RetryAttempts = 10000 }, "RetryAttempts 10000"},
		{"record age min", func(p *Props) {
			p.MaxRecordAge, p.RelayTimeout, p.IteratorAgeThreshold = 60*time.Second, MinRelayTimeout(), 30*time.Second
		}, ""},
		{"record age too short", func(p *Props) { p.MaxRecordAge = 59 * time.Second }, "MaxRecordAge"},
		{"record age shorter than one relay invocation", func(p *Props) {
			p.MaxRecordAge, p.RelayTimeout, p.IteratorAgeThreshold = 90*time.Second, 2*time.Minute, time.Minute
		}, "MaxRecordAge 1m30s is below"},
		{"record age max", func(p *Props) {
			p.MaxRecordAge, p.ReconcileAfter, p.OldestPendingThreshold = 15*time.Minute, 16*time.Minute, 30*time.Minute
		}, ""},
		{"record age too long", func(p *Props) {
			p.MaxRecordAge, p.ReconcileAfter, p.OldestPendingThreshold = 15*time.Minute+time.Second, time.Hour, 2*time.Hour
		}, "MaxRecordAge"},
		{"record age AWS max (7 days)", func(p *Props) { p.MaxRecordAge = 604800 * time.Second }, "MaxRecordAge"},
		{"parallelization max", func(p *Props) { p.ParallelizationFactor = 1 }, ""},
		{"parallelization 2 (breaks per-aggregate order)", func(p *Props) { p.ParallelizationFactor = 2 }, "ParallelizationFactor 2"},
		{"parallelization AWS max", func(p *Props) { p.ParallelizationFactor = 10 }, "ParallelizationFactor 10"},
		{"shards max", func(p *Props) { p.PendingShards = 256 }, ""},
		{"shards too many", func(p *Props) { p.PendingShards = 257 }, "PendingShards 257"},
		{"shards negative", func(p *Props) { p.PendingShards = -2 }, "PendingShards -2"},
		{"entry too big", func(p *Props) { p.MaxEntryBytes = 2 << 20 }, "MaxEntryBytes"},
		{"entry below what the relay accepts", func(p *Props) { p.MaxEntryBytes = 1023 }, "MaxEntryBytes 1023"},
		{"rate not minutes", func(p *Props) { p.ReconcileRate = 90 * time.Second }, "ReconcileRate"},
		{"rate too fast", func(p *Props) { p.ReconcileRate = 30 * time.Second }, "ReconcileRate"},
		{"rate max", func(p *Props) { p.ReconcileRate, p.OldestPendingThreshold = 15*time.Minute, 30*time.Minute }, ""},
		{"rate too slow", func(p *Props) { p.ReconcileRate, p.OldestPendingThreshold = 16*time.Minute, time.Hour }, "ReconcileRate"},
		{"budget too long", func(p *Props) { p.ReconcileBudget = 15 * time.Minute }, "ReconcileBudget"},
		{"run longer than the schedule", func(p *Props) { p.ReconcileRate, p.ReconcileBudget = time.Minute, 46*time.Second }, "exceeds ReconcileRate"},
		{"run as long as the schedule", func(p *Props) { p.ReconcileRate, p.ReconcileBudget = time.Minute, 45*time.Second }, ""},
		{"stale age 1 s", func(p *Props) { p.ReconcileAfter = time.Second }, "ReconcileAfter 1s"},
		{"stale age inside the retry window", func(p *Props) { p.ReconcileAfter = 4 * time.Minute }, "MaxRecordAge + RelayTimeout = 5m0s"},
		{"stale age at the retry window", func(p *Props) { p.ReconcileAfter = 5 * time.Minute }, ""},
		{"stale age follows a longer window", func(p *Props) { p.MaxRecordAge = 10 * time.Minute }, "ReconcileAfter 5m0s is outside 11m0s"},
		{"stale age too long", func(p *Props) { p.ReconcileAfter, p.OldestPendingThreshold = 61*time.Minute, 2*time.Hour }, "ReconcileAfter 1h1m0s"},
		{"relay timeout too long", func(p *Props) { p.RelayTimeout = 16 * time.Minute }, "RelayTimeout"},
		{"relay timeout above its bound", func(p *Props) { p.RelayTimeout = 5*time.Minute + time.Second }, "RelayTimeout 5m1s is outside"},
		{"relay timeout at the minimum", func(p *Props) { p.RelayTimeout = MinRelayTimeout() }, ""},
		{"relay timeout below the minimum", func(p *Props) { p.RelayTimeout = MinRelayTimeout() - time.Second }, "RelayTimeout 31s is outside 32s..5m"},
		{"relay timeout shorter than the reserve", func(p *Props) { p.RelayTimeout = 5 * time.Second }, "marking reserve"},
		{"negative threshold", func(p *Props) { p.OldestPendingThreshold = -time.Minute }, "OldestPendingThreshold"},
		{"oldest-pending alarm inside the reconciler's window", func(p *Props) { p.OldestPendingThreshold = 10 * time.Minute }, "OldestPendingThreshold 10m0s must exceed"},
		{"iterator age alarm that cannot fire", func(p *Props) { p.IteratorAgeThreshold = 4 * time.Minute }, "IteratorAgeThreshold 4m0s"},
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
	for _, want := range []string{"EventBus", "AssetRoot", "EventSource", "BatchSize", "ParallelizationFactor"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}
}

// TestStreamGiveUpTime: the worst-case time a record the relay keeps failing
// on holds the stream is MaxRecordAge + RelayTimeout: 5 min with the
// defaults, 20 min at the bounds; and the library's floor on the stale age
// covers the shortest retry window the construct allows.
func TestStreamGiveUpTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Props
		want time.Duration
	}{
		{"defaults", valid(), 5 * time.Minute},
		{"bounds", Props{MaxRecordAge: MaxRecordAge, RelayTimeout: MaxRelayTimeout}, 20 * time.Minute},
	}
	for _, tt := range tests {
		if got := tt.p.StreamGiveUpTime(); got != tt.want {
			t.Errorf("%s: StreamGiveUpTime() = %s, want %s", tt.name, got, tt.want)
		}
	}
	if shortest := MinRecordAge + MinRelayTimeout(); config.MinReconcileAfter < shortest {
		t.Errorf("config.MinReconcileAfter %s is below the shortest retry window %s", config.MinReconcileAfter, shortest)
	}
	// Every bound together is valid.
	p := valid()
	p.BatchSize, p.RetryAttempts, p.MaxRecordAge, p.RelayTimeout = MaxBatchSize, MaxRetryAttempts, MaxRecordAge, MaxRelayTimeout
	p.MaxBatchingWindow, p.ReconcileRate, p.ReconcileAfter = MaxBatchingWindow, MaxReconcileRate, MaxReconcileAfter
	p.OldestPendingThreshold = MaxReconcileAfter + MaxReconcileRate + time.Minute
	if err := p.Validate(); err != nil {
		t.Errorf("all bounds together: %v", err)
	}
}

// GIVEN SQS event source mapping scaling settings
// WHEN they are validated
// THEN MaxConcurrency must be 2..1000, provisioned pollers 2..200 (minimum)
// and minimum..2000 (maximum), and the two modes cannot be combined; the
// peak concurrency is MaxConcurrency or MaximumPollers × 10.
func TestSQSScaling(t *testing.T) {
	prov := func(lo, hi int) *ProvisionedPollers { return &ProvisionedPollers{Minimum: lo, Maximum: hi} }
	cases := []struct {
		name string
		s    SQSScaling
		peak int
		ok   bool
	}{
		{"default", SQSScaling{}, config.DefaultConsumerMaxConcurrency, true},
		{"max concurrency 2", SQSScaling{MaxConcurrency: 2}, 2, true},
		{"max concurrency 1000", SQSScaling{MaxConcurrency: 1000}, 1000, true},
		{"max concurrency 1", SQSScaling{MaxConcurrency: 1}, 1, false},
		{"max concurrency 1001", SQSScaling{MaxConcurrency: 1001}, 1001, false},
		{"provisioned 2..5", SQSScaling{Provisioned: prov(2, 5)}, 50, true},
		{"provisioned 200..2000", SQSScaling{Provisioned: prov(200, 2000)}, 20000, true},
		{"provisioned minimum 1", SQSScaling{Provisioned: prov(1, 5)}, 50, false},
		{"provisioned minimum 201", SQSScaling{Provisioned: prov(201, 300)}, 3000, false},
		{"provisioned maximum below minimum", SQSScaling{Provisioned: prov(10, 5)}, 50, false},
		{"provisioned maximum 2001", SQSScaling{Provisioned: prov(2, 2001)}, 20010, false},
		{"both modes", SQSScaling{MaxConcurrency: 10, Provisioned: prov(2, 5)}, 50, false},
	}
	for _, c := range cases {
		err := c.s.Validate()
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidScaling)) {
			t.Errorf("%s: Validate() = %v, want ok=%v", c.name, err, c.ok)
		}
		if got := c.s.PeakConcurrency(); got != c.peak {
			t.Errorf("%s: PeakConcurrency() = %d, want %d", c.name, got, c.peak)
		}
	}
}
