package localrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
)

// DefaultScheduleRuleName names the local schedule rule in the resources ARN.
const DefaultScheduleRuleName = "reconciler-schedule"

// SchedulerConfig configures a Scheduler. Zero values take the defaults
// stated per field.
type SchedulerConfig struct {
	// Interval between runs (rate expression). Required, > 0.
	Interval time.Duration
	// RuleName names the schedule rule (default "reconciler-schedule").
	RuleName string
	// Region and Account fill the event and the rule ARN (defaults
	// us-east-1, 000000000000).
	Region  string
	Account string
	// RunAtStart runs the handler once as soon as Run starts, instead of
	// waiting a first Interval.
	RunAtStart bool
	// Timeout bounds one run (default: Interval, like a function timeout
	// shorter than the schedule).
	Timeout time.Duration
	// Logger receives the scheduler's logs (default slog.Default()).
	Logger *slog.Logger
}

// SchedulerStats counts runs.
type SchedulerStats struct {
	Runs     int64
	Failures int64
	LastRun  time.Time
	LastErr  string
}

// Scheduler stands in for an EventBridge schedule rule targeting a Lambda
// function (the reconciler): every Interval it invokes the handler with a
// scheduled event, decoded from the JSON AWS sends
// (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-run-lambda-schedule.html):
//
//	{"version":"0","id":"<uuid>","detail-type":"Scheduled Event",
//	 "source":"aws.events","account":"…","time":"2006-01-02T15:04:05Z",
//	 "region":"…","resources":["arn:aws:events:…:rule/<name>"],"detail":{}}
//
// Runs never overlap: a tick that comes while a run is in progress is
// skipped. Handler errors are logged and counted, not retried (the next
// tick is the retry). Safe for concurrent use.
type Scheduler struct {
	cfg     SchedulerConfig
	handler EventHandler
	log     *slog.Logger

	runMu sync.Mutex // one run at a time
	mu    sync.Mutex
	stats SchedulerStats
}

// NewScheduler returns a scheduler for h. It returns an error when h is nil
// or Interval is not positive.
func NewScheduler(cfg SchedulerConfig, h EventHandler) (*Scheduler, error) {
	if h == nil {
		return nil, errors.New("localrt: scheduler handler is nil")
	}
	if cfg.Interval <= 0 {
		return nil, errors.New("localrt: SchedulerConfig.Interval must be positive")
	}
	if cfg.RuleName == "" {
		cfg.RuleName = DefaultScheduleRuleName
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if cfg.Account == "" {
		cfg.Account = DefaultAccount
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = cfg.Interval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Scheduler{cfg: cfg, handler: h, log: cfg.Logger.With("component", "scheduler", "rule", cfg.RuleName)}, nil
}

// RuleARN returns arn:aws:events:<region>:<account>:rule/<RuleName>.
func (s *Scheduler) RuleARN() string {
	return fmt.Sprintf("arn:aws:events:%s:%s:rule/%s", s.cfg.Region, s.cfg.Account, s.cfg.RuleName)
}

// ScheduledEventJSON returns the scheduled event JSON for time t.
func (s *Scheduler) ScheduledEventJSON(t time.Time) []byte {
	b, _ := json.Marshal(eventEnvelope{
		Version: "0", ID: uuid.NewString(), DetailType: "Scheduled Event", Source: "aws.events",
		Account: s.cfg.Account, Time: t.UTC().Format(time.RFC3339), Region: s.cfg.Region,
		Resources: []string{s.RuleARN()}, Detail: json.RawMessage(`{}`),
	})
	return b
}

// Run invokes the handler every Interval until ctx ends, then returns nil.
func (s *Scheduler) Run(ctx context.Context) error {
	if s.cfg.RunAtStart {
		s.tryTrigger(ctx)
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.tryTrigger(ctx)
		}
	}
}

func (s *Scheduler) tryTrigger(ctx context.Context) {
	if !s.runMu.TryLock() {
		s.log.Warn("previous run still in progress; tick skipped")
		return
	}
	defer s.runMu.Unlock()
	_ = s.run(ctx)
}

// Trigger runs the handler once now (waiting for a run in progress to
// finish first) and returns its error. Useful in tests and the demo's drain.
func (s *Scheduler) Trigger(ctx context.Context) error {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	return s.run(ctx)
}

func (s *Scheduler) run(ctx context.Context) (err error) {
	now := time.Now()
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(s.ScheduledEventJSON(now), &ev); err != nil {
		return fmt.Errorf("decode scheduled event: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("handler panicked: %v", r)
			}
		}()
		err = s.handler(cctx, ev)
	}()
	if err == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		// Lambda discards the answer of a timed-out invocation.
		err = fmt.Errorf("Task timed out after %.2f seconds", s.cfg.Timeout.Seconds()) //nolint:staticcheck // ST1005: Lambda's own message, word for word
	}
	s.mu.Lock()
	s.stats.Runs++
	s.stats.LastRun = now
	s.stats.LastErr = ""
	if err != nil {
		s.stats.Failures++
		s.stats.LastErr = err.Error()
	}
	s.mu.Unlock()
	if err != nil {
		s.log.Error("scheduled run failed", "error", err, "duration", time.Since(now))
	} else {
		s.log.Debug("scheduled run done", "duration", time.Since(now))
	}
	return err
}

// Stats returns a snapshot of the run counters.
func (s *Scheduler) Stats() SchedulerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}
