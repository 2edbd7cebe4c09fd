package regions

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/mrec"
)

// MRECConfig shapes the replicator MREC starts (internal/mrec.Config's
// fields of the same names; zero values take mrec's defaults: a 20 ms
// median delay, sigma 0.5, no tail).
type MRECConfig struct {
	// Seed makes the per-item delays reproducible.
	Seed int64
	// DelayMedian and DelaySigma shape the log-normal per-item delay.
	DelayMedian time.Duration
	DelaySigma  float64
	// TailProb (0..1) is the probability of a delay uniform in
	// [TailMin, TailMax] instead (mrec's defaults 1 s to 3 s).
	TailProb         float64
	TailMin, TailMax time.Duration
	// Logger receives the replicator's logs (default: discarded).
	Logger *slog.Logger
}

// MREC returns a NewReplication starting internal/mrec's replicator
// between the Regions' replicas, shaped by c. The Replication it starts
// is a *MRECReplication (Stats for the reports).
func MREC(c MRECConfig) NewReplication {
	return func(ctx context.Context, replicas []Replica, tables []string) (Replication, error) {
		if c.Logger == nil {
			c.Logger = slog.New(slog.DiscardHandler)
		}
		cfg := mrec.Config{Tables: tables, Seed: c.Seed, DelayMedian: c.DelayMedian, DelaySigma: c.DelaySigma,
			TailProb: c.TailProb, TailMin: c.TailMin, TailMax: c.TailMax, Logger: c.Logger}
		names := make([]string, 0, len(replicas))
		for _, r := range replicas {
			cfg.Regions = append(cfg.Regions, mrec.Region{Name: r.Name, DDB: r.DDB, Streams: r.Streams})
			names = append(names, r.Name)
		}
		rep, err := mrec.Start(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("regions: mrec: %w", err)
		}
		return &MRECReplication{Replicator: rep, regions: names}, nil
	}
}

// MRECReplication adapts an *mrec.Replicator to Replication: Pause and
// Resume act on every direction between the Regions; Lose, Recover,
// Settle and Close are the replicator's. Stats is the replicator's.
type MRECReplication struct {
	*mrec.Replicator
	regions []string
}

// Pause holds replication in every direction (mrec.Replicator.Pause of
// each pair). It returns the first error (mrec.ErrUnknownRegion, wrapped).
func (m *MRECReplication) Pause() error { return m.each(m.Replicator.Pause) }

// Resume ends Pause in every direction.
func (m *MRECReplication) Resume() error { return m.each(m.Replicator.Resume) }

func (m *MRECReplication) each(f func(from, to string) error) error {
	for _, from := range m.regions {
		for _, to := range m.regions {
			if from == to {
				continue
			}
			if err := f(from, to); err != nil {
				return err
			}
		}
	}
	return nil
}

// replicationStats is what a Replication reports besides the interface
// (MRECReplication has it).
type replicationStats interface{ Stats() mrec.Stats }
