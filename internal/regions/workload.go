package regions

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
)

// Workload is a seeded random run of the bank: Accounts accounts opened
// in turn in RegionA and RegionB (each then written in its home Region),
// then Ops deposits and withdrawals on random accounts, with Steps run
// between them (faults and repairs at given operation indexes).
type Workload struct {
	// Accounts is the number of accounts (default 4); Ops the number of
	// deposits and withdrawals after they are opened (default 40).
	Accounts, Ops int
	// Seed seeds the random choices (the same seed, the same operations).
	Seed uint64
	// MaxAmount bounds each amount, 1..MaxAmount (default 100). Opening
	// balances are MaxAmount.
	MaxAmount int64
	// Steps run before the operation of their index (At 0: before the
	// first deposit or withdrawal; At Ops: after the last).
	Steps []Step
}

// Step is an action on the runtime during a Workload: a fault (Suspend a
// Region, pause replication) or its repair.
type Step struct {
	// At is the index of the operation the step runs before.
	At int
	// Name names the step in errors and RunStats.Steps.
	Name string
	// Do is the action; its error ends the run.
	Do func(ctx context.Context, rt *Runtime) error
}

// SuspendStep and ResumeStep take Region region down and back at
// operation at (Runtime.Suspend, Runtime.Resume).
func SuspendStep(at int, region string) Step {
	return Step{At: at, Name: "suspend " + region, Do: func(_ context.Context, rt *Runtime) error { return rt.Suspend(region) }}
}

// ResumeStep brings Region region back at operation at.
func ResumeStep(at int, region string) Step {
	return Step{At: at, Name: "resume " + region, Do: func(_ context.Context, rt *Runtime) error { return rt.Resume(region) }}
}

// ReplicationStep runs f on the runtime's Replication at operation at (an
// error when the runtime has none): e.g. Replication.Pause, or Lose of a
// Region.
func ReplicationStep(at int, name string, f func(Replication) error) Step {
	return Step{At: at, Name: name, Do: func(_ context.Context, rt *Runtime) error {
		if rt.repl == nil {
			return errors.New("the runtime has no replication")
		}
		return f(rt.repl)
	}}
}

// RunStats counts what a Workload did.
type RunStats struct {
	// Written counts the operations committed; Refused those the bank
	// refused (ErrInsufficientFunds); Skipped those whose home Region was
	// suspended (a Region that is down takes no writes).
	Written, Refused, Skipped int
	// Steps are the names of the steps run, in order.
	Steps []string
}

func (w *Workload) setDefaults() {
	if w.Accounts <= 0 {
		w.Accounts = 4
	}
	if w.Ops <= 0 {
		w.Ops = 40
	}
	if w.MaxAmount <= 0 {
		w.MaxAmount = 100
	}
}

// AccountID is the id of the workload's i-th account.
func AccountID(i int) string { return fmt.Sprintf("acc-%03d", i) }

// Run runs w on rt: it opens the accounts, then runs the operations and
// steps. It does not settle: call Runtime.Settle (after resuming what the
// steps left down), then Observe and Audit. It returns the stats and the
// first error that is neither ErrInsufficientFunds nor a skip: a writer's
// error, a step's, or ctx's.
func (rt *Runtime) Run(ctx context.Context, w Workload) (RunStats, error) {
	w.setDefaults()
	var st RunStats
	rnd := rand.New(rand.NewPCG(w.Seed, w.Seed^0x9e3779b97f4a7c15))
	for i := range w.Accounts {
		region := []string{RegionA, RegionB}[i%2]
		if rt.Region(region).Stack.Suspended() {
			st.Skipped++
			continue
		}
		if err := rt.Bank.Open(ctx, region, AccountID(i), w.MaxAmount); err != nil {
			return st, fmt.Errorf("regions: open %s in %s: %w", AccountID(i), region, err)
		}
		st.Written++
	}
	for op := 0; op <= w.Ops; op++ {
		for _, s := range w.Steps {
			if s.At != op {
				continue
			}
			if err := s.Do(ctx, rt); err != nil {
				return st, fmt.Errorf("regions: step %q at %d: %w", s.Name, op, err)
			}
			st.Steps = append(st.Steps, s.Name)
		}
		if op == w.Ops {
			break
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
		id := AccountID(rnd.IntN(w.Accounts))
		amount := 1 + rnd.Int64N(w.MaxAmount)
		deposit := rnd.IntN(2) == 0
		home, err := rt.Bank.Home(id)
		if err != nil || rt.Region(home).Stack.Suspended() {
			st.Skipped++
			continue
		}
		if deposit {
			err = rt.Bank.Deposit(ctx, id, amount)
		} else {
			err = rt.Bank.Withdraw(ctx, id, amount)
		}
		switch {
		case errors.Is(err, ErrInsufficientFunds):
			st.Refused++
		case err != nil:
			return st, fmt.Errorf("regions: operation %d on %s: %w", op, id, err)
		default:
			st.Written++
		}
	}
	return st, nil
}
