package localstack

import (
	"context"
	"errors"
)

// ErrSuspended is returned by Suspend on a suspended stack, and (wrapped)
// by Drain, Settle, ReconcileNow and SweepNow while the stack is suspended.
var ErrSuspended = errors.New("localstack: the stack is suspended")

// ErrNotSuspended is returned by Resume on a running stack.
var ErrNotSuspended = errors.New("localstack: the stack is not suspended")

// ErrClosed is returned by Suspend and Resume after Close.
var ErrClosed = errors.New("localstack: the stack is closed")

// Suspend takes the stack's Region "down": the stream poller (the relay's
// event source mapping), the reconciler schedule, the ordered consumers'
// sweep schedules and every consumer's SQS event source mapping stop, and
// Suspend returns once their running invocations ended: a consumer's
// invocation finishes (as when an event source mapping is disabled), a
// relay or reconciler invocation is cut short and not committed (its
// stream records are read again; a record it published is published again,
// a duplicate the consumers absorb). Nothing is lost:
// records not yet read stay in the stream and the poller keeps its shard
// positions; messages stay in their queues. The DynamoDB server, the bus
// (it still accepts events, and delivers them to the consumers' queues and
// through its forwarding rules) and the queues keep running; writers can
// still write. Resume restarts what Suspend stopped.
//
// A Drain or Settle already waiting when Suspend is called keeps waiting
// until Resume, or until its context ends.
//
// It returns ErrSuspended when the stack is already suspended, ErrClosed
// after Close.
func (s *Stack) Suspend() error {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.suspended.Load():
		return ErrSuspended
	}
	s.suspended.Store(true)
	s.stop()
	s.cfg.Logger.Info("stack suspended", "region", s.Region)
	return nil
}

// Resume restarts what Suspend stopped: the stream poller from its shard
// positions (every record after its checkpoints is delivered, the records
// written while suspended included), the reconciler and sweep schedules
// (their next runs come one interval later) and the consumers' pollers.
// It returns ErrNotSuspended when the stack runs, ErrClosed after Close.
func (s *Stack) Resume() error {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case !s.suspended.Load():
		return ErrNotSuspended
	}
	s.run()
	s.suspended.Store(false)
	s.cfg.Logger.Info("stack resumed", "region", s.Region)
	return nil
}

// Suspended reports whether the stack is suspended (Suspend).
func (s *Stack) Suspended() bool { return s.suspended.Load() }

// run starts the stack's running components (the stream poller, the
// reconciler schedule, the sweeps and the consumers' pollers) under a new
// context; s.runMu is held.
func (s *Stack) run() {
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	log := s.cfg.Logger
	s.goRun(func() {
		if err := s.Poller.Run(runCtx); err != nil {
			log.Error("stream poller stopped", "error", err)
		}
	})
	s.goRun(func() { _ = s.ReconcileSchedule.Run(runCtx) })
	for _, sw := range s.Sweeps {
		s.goRun(func() { _ = sw.Run(runCtx) })
	}
	for _, c := range s.Consumers {
		// Suspend stops the polling and lets running invocations finish;
		// Close cuts them short.
		s.goRun(func() { _ = c.Poller.RunUntil(runCtx, s.life) })
	}
}

// stop cancels the running components and waits for them; s.runMu is held.
func (s *Stack) stop() {
	if s.cancel != nil {
		s.cancel()
		s.cancel = nil
	}
	s.wg.Wait()
}

func (s *Stack) goRun(f func()) {
	s.wg.Add(1)
	go func() { defer s.wg.Done(); f() }()
}
