package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
)

// BoundaryPoller is the boundary of PollerRestart decisions.
const BoundaryPoller = "localrt.StreamPoller"

// RestartablePoller runs a localrt.StreamPoller that can be stopped and
// restarted from its checkpoint, like Lambda's event source mapping after a
// poller host dies: records after the checkpoint (including a batch that
// was in flight when it stopped) are delivered again, none is skipped. It
// is safe for concurrent use.
type RestartablePoller struct {
	cfg localrt.StreamPollerConfig
	h   localrt.StreamHandler

	mu       sync.Mutex
	cur      *localrt.StreamPoller
	cancel   context.CancelFunc
	done     chan error
	restarts int
}

// NewRestartablePoller validates cfg by building the first poller. cfg's
// Checkpoints, if any, are where the first run starts.
func NewRestartablePoller(cfg localrt.StreamPollerConfig, h localrt.StreamHandler) (*RestartablePoller, error) {
	p, err := localrt.NewStreamPoller(cfg, h)
	if err != nil {
		return nil, err
	}
	return &RestartablePoller{cfg: cfg, h: h, cur: p}, nil
}

// Start runs the current poller in the background until ctx ends or Stop.
func (r *RestartablePoller) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return errors.New("faults: poller already running")
	}
	r.startLocked(ctx)
	return nil
}

func (r *RestartablePoller) startLocked(ctx context.Context) {
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	p := r.cur
	go func() { done <- p.Run(cctx) }()
	r.cancel, r.done = cancel, done
}

// Stop stops the current poller (cancelling an in-flight invocation's
// context) and waits for it; it returns Run's error.
func (r *RestartablePoller) Stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopLocked()
}

func (r *RestartablePoller) stopLocked() error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	err := <-r.done
	r.cancel, r.done = nil, nil
	return err
}

// Restart stops the current poller, builds a new one whose
// StreamPollerConfig.Checkpoints is the old poller's Checkpoint(), starts it
// under ctx and returns that checkpoint.
func (r *RestartablePoller) Restart(ctx context.Context) (map[string]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.stopLocked(); err != nil {
		return nil, fmt.Errorf("faults: stop poller: %w", err)
	}
	cp := r.cur.Checkpoint()
	cfg := r.cfg
	cfg.Checkpoints = maps.Clone(cp)
	p, err := localrt.NewStreamPoller(cfg, r.h)
	if err != nil {
		return nil, fmt.Errorf("faults: restart poller from %v: %w", cp, err)
	}
	r.cur = p
	r.restarts++
	r.startLocked(ctx)
	return cp, nil
}

// Poller returns the current poller (a new one after each Restart).
func (r *RestartablePoller) Poller() *localrt.StreamPoller {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// Restarts returns how many times Restart succeeded.
func (r *RestartablePoller) Restarts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restarts
}

// WaitCaughtUp waits until the current poller has caught up; a restart in
// the meantime is followed.
func (r *RestartablePoller) WaitCaughtUp(ctx context.Context) error {
	for {
		p := r.Poller()
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := p.WaitCaughtUp(wctx)
		cancel()
		if err == nil && p == r.Poller() {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// Chaos restarts the poller every interval with the injector's
// PollerRestart rate (boundary "localrt.StreamPoller"), until ctx ends. Run
// it in its own goroutine; it returns the first restart error.
func (r *RestartablePoller) Chaos(ctx context.Context, in *Injector, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if in.Chance(BoundaryPoller, PollerRestart) {
				if _, err := r.Restart(ctx); err != nil {
					return err
				}
			}
		}
	}
}
