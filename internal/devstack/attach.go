package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/renameio/v2/maybe"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
)

// StateFile is where `outboxdev dev` records the running stack (API URL,
// DynamoDB endpoint, table prefix) so that `outboxdev demo -attach` (make
// demo ARGS=-attach) can drive it from another terminal.
const StateFile = ".outboxdev/dev.json"

// State describes a running stack.
type State struct {
	URL      string `json:"url"`
	Endpoint string `json:"endpoint"`
	Prefix   string `json:"prefix"`
	PID      int    `json:"pid"`
	// Console is the console's URL ("" without one); ReconcileEvery and
	// ReconcileAfter the reconciler's schedule and stale age, for what
	// demo -attach says it waits for.
	Console        string        `json:"console,omitempty"`
	ReconcileEvery time.Duration `json:"reconcile_every,omitempty"`
	ReconcileAfter time.Duration `json:"reconcile_after,omitempty"`
	// Started is when the stack's schedules started: the reconciler runs
	// at Started + k × ReconcileEvery.
	Started time.Time `json:"started,omitempty"`
}

// NextReconcile returns when the reconciler of the stack st describes
// runs next after now (zero without ReconcileEvery or Started).
func (st State) NextReconcile(now time.Time) time.Time {
	if st.ReconcileEvery <= 0 || st.Started.IsZero() {
		return time.Time{}
	}
	n := now.Sub(st.Started)/st.ReconcileEvery + 1
	return st.Started.Add(n * st.ReconcileEvery)
}

// WriteState records s (its URL, endpoint and table prefix) in path.
func WriteState(path string, s *Stack, prefix string) error {
	b, err := json.MarshalIndent(State{URL: s.URL, Endpoint: s.Endpoint, Prefix: prefix, PID: os.Getpid(), Console: s.ConsoleURL(),
		ReconcileEvery: s.reconcileEvery, ReconcileAfter: s.Settings.ReconcileAfter, Started: s.started}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return maybe.WriteFile(path, b, 0o644) // atomic: demo -attach never reads a cut file
}

// ErrNoRunningStack is returned by ReadState when no dev stack is running.
var ErrNoRunningStack = errors.New("devstack: no running dev stack (start one with `make dev`)")

// ReadState returns the state of the running dev stack, or an error wrapping
// ErrNoRunningStack when the file is missing or its process is gone.
func ReadState(path string) (State, error) {
	var st State
	b, err := os.ReadFile(path)
	if err != nil {
		return st, fmt.Errorf("%w: %v", ErrNoRunningStack, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%w: %s: %v", ErrNoRunningStack, path, err)
	}
	if st.PID > 0 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", st.PID)); err != nil && errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat("/proc/self"); serr == nil { // Linux: the process is gone
				return st, fmt.Errorf("%w: process %d of %s has exited", ErrNoRunningStack, st.PID, path)
			}
		}
	}
	return st, nil
}

// Attach returns a Stack that audits the tables of a stack running elsewhere
// (its components are not here: Drain is not available; use WaitSettled).
func Attach(st State) *Stack {
	s := &Stack{URL: st.URL, Endpoint: st.Endpoint}
	s.DDB = dynamodb.NewFromConfig(dynoxide.AWSConfig(st.Endpoint))
	s.Settings = app.Settings{
		OutboxTable: st.Prefix + "-outbox", OrdersTable: st.Prefix + "-orders",
		LedgerTable: st.Prefix + "-ledger", NotificationsTable: st.Prefix + "-notifications",
	}
	return s
}

// WaitSettled audits until nothing is pending and two audits in a row agree,
// polling every interval: the way to wait for a stack whose pipeline runs in
// another process. It returns the last audit, or ctx's error.
func (s *Stack) WaitSettled(ctx context.Context, interval time.Duration) (Audit, error) {
	return s.WaitSettledReporting(ctx, interval, nil)
}

// WaitSettledReporting is WaitSettled calling report (when not nil) with
// each audit that does not settle yet: what the wait is for.
func (s *Stack) WaitSettledReporting(ctx context.Context, interval time.Duration, report func(Audit)) (Audit, error) {
	var last Audit
	for {
		a, err := s.Audit(ctx)
		if err != nil {
			return a, err
		}
		if a.Pending == 0 && a.Lost == 0 && a.Summary() == last.Summary() {
			return a, nil
		}
		if report != nil {
			report(a)
		}
		last = a
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-time.After(interval):
		}
	}
}
