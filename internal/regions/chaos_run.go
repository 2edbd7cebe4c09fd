package regions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/mrec"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
)

// chaosRun is one Chaos run's state.
type chaosRun struct {
	cfg ChaosConfig
	rt  *Runtime
	rep *ChaosReport
	mu  sync.Mutex // guards rep's counters during a phase
	// extra are Chaos's own findings, added to the audit.
	extra []Finding
	// takenOver are the event ids B published under the takeover.
	takenOver map[string]bool
}

func (c *chaosRun) phase(name string) {
	c.rep.Phases = append(c.rep.Phases, name)
	c.cfg.Progress(name)
}

func (c *chaosRun) run(ctx context.Context) error {
	rt, cfg, q := c.rt, c.cfg, c.cfg.Events/4
	for i := range cfg.Accounts {
		region := []string{RegionA, RegionB}[i%2]
		if err := rt.Bank.Open(ctx, region, AccountID(i), 1000); err != nil {
			return fmt.Errorf("regions: open %s in %s: %w", AccountID(i), region, err)
		}
		c.rep.Written[region]++
	}
	c.phase(fmt.Sprintf("steady: %d operations", q))
	if err := c.drive(ctx, 1, q); err != nil {
		return err
	}
	c.phase(fmt.Sprintf("replication paused both ways: %d operations", q))
	if err := rt.repl.Pause(); err != nil {
		return err
	}
	if err := c.drive(ctx, 2, q); err != nil {
		return err
	}
	// Long enough for each reconciler to run past ReconcileAfter: no timer
	// may make it publish the other Region's records.
	if err := sleep(ctx, c.cfg.ReconcileAfter+1500*time.Millisecond); err != nil {
		return err
	}
	if n := c.foreignPublished(); n > 0 {
		c.extra = append(c.extra, Finding{Kind: KindForeignDuringPause, Subject: "pause",
			Detail: fmt.Sprintf("%d events published by a Region other than their origin while replication was paused", n)})
	}
	if err := rt.repl.Resume(); err != nil {
		return err
	}
	if err := c.settle(ctx); err != nil {
		return err
	}
	if err := c.loseA(ctx, q); err != nil {
		return err
	}
	c.phase(fmt.Sprintf("after recovery: %d operations", cfg.Events-3*q))
	if err := c.drive(ctx, 4, cfg.Events-3*q); err != nil {
		return err
	}
	c.phase("settle and audit")
	if err := c.settle(ctx); err != nil {
		return err
	}
	obs, err := Observe(ctx, rt)
	if err != nil {
		return err
	}
	c.rep.Duplicates = duplicates(obs)
	c.rep.Audit = Audit(obs)
	c.rep.Audit.Findings = append(c.rep.Audit.Findings, c.extra...)
	sortFindings(c.rep.Audit.Findings)
	return nil
}

// loseA is the Region-loss phase: A's stack down, its last writes, A cut
// off, B writing, the takeover, A's recovery and the release.
func (c *chaosRun) loseA(ctx context.Context, q int) error {
	rt, cfg := c.rt, c.cfg
	c.phase(fmt.Sprintf("%s down: %d last writes unpublished, then lost to replication", RegionA, cfg.LastWrites))
	if err := rt.Suspend(RegionA); err != nil {
		return err
	}
	var homeA []string
	for i := 0; i < cfg.Accounts; i += 2 {
		homeA = append(homeA, AccountID(i))
	}
	for i := range cfg.LastWrites {
		if err := rt.Bank.Deposit(ctx, homeA[i%len(homeA)], 1); err != nil {
			return fmt.Errorf("regions: %s's last write %d: %w", RegionA, i, err)
		}
		c.rep.Written[RegionA]++
	}
	c.rep.LastWrites = cfg.LastWrites
	if err := sleep(ctx, max(cfg.Replication.DelayMedian, mrec.DefaultDelayMedian)); err != nil {
		return err
	}
	if err := rt.repl.Lose(RegionA); err != nil {
		return err
	}
	c.phase(fmt.Sprintf("%s lost: %d operations in %s, wrong-Region writes refused", RegionA, q, RegionB))
	if err := c.drive(ctx, 3, q); err != nil {
		return err
	}
	c.phase(fmt.Sprintf("takeover: %s survives %s (lag margin %s)", RegionB, RegionA, cfg.LagMargin))
	if err := c.takeover(ctx); err != nil {
		return err
	}
	if s, ok := rt.repl.(replicationStats); ok {
		st := s.Stats()
		c.rep.HeldAtLoss, c.rep.HeldFromA = st.Held, st.Direction(RegionA, RegionB).Held
	}
	c.phase(fmt.Sprintf("%s recovered: replication and stack resumed, adoption, release", RegionA))
	if err := rt.repl.Recover(RegionA); err != nil {
		return err
	}
	if err := c.settle(ctx); err != nil { // B's marks are in A
		return err
	}
	// A's relay misses the records B took over (as if their stream
	// records had been lost with A), so its reconciler finds them pending
	// and adopts B's marks instead of sending them again.
	rt.A.Stack.MissRecords(func(e outbox.Envelope) bool { return c.takenOver[e.EventID] })
	if err := rt.Resume(RegionA); err != nil {
		return err
	}
	if err := c.settle(ctx); err != nil {
		return err
	}
	rt.A.Stack.MissRecords(nil)
	ownA := ownPublished(rt.A)
	for id := range c.takenOver {
		if ownA[id] == 0 {
			c.rep.Adopted++
		}
	}
	if err := reconciler.ReleaseTakeover(ctx, rt.B.Stack.DDB, OutboxTable, RegionA, RegionB, "chaos-regions", time.Now()); err != nil {
		return err
	}
	return c.settle(ctx)
}

// takeover declares B the survivor of A, waits until A's records are
// older than ReconcileAfter plus the lag margin, runs B's reconciler until
// the backlog is drained (or SettleTimeout passes) and checks that every
// record of A pending in B's replica was published by B (a PUBLISHED
// takeover mark).
func (c *chaosRun) takeover(ctx context.Context) error {
	rt, cfg := c.rt, c.cfg
	if err := reconciler.DeclareTakeover(ctx, rt.B.Stack.DDB, OutboxTable, reconciler.TakeoverDecl{
		Failed: RegionA, Survivor: RegionB, LagMargin: cfg.LagMargin, DeclaredBy: "chaos-regions"}, time.Now()); err != nil {
		return err
	}
	if err := sleep(ctx, cfg.ReconcileAfter+cfg.LagMargin+100*time.Millisecond); err != nil {
		return err
	}
	// Run B's reconciler until every record of A pending in B's replica
	// has B's PUBLISHED mark, as an operator watches the backlog drain
	// (outboxctl takeovers): B's scheduled runs claim records too, and a
	// record another run holds is left to that run (claimed by a peer), so
	// one run need not take over all of them. Bounded by SettleTimeout;
	// what is left then is a finding.
	// A's records in B's replica do not change meanwhile (A is lost to
	// replication and B never writes them): read them once.
	pending, err := pendingOf(ctx, rt.B.Stack.DDB, RegionA)
	if err != nil {
		return err
	}
	var marks map[string]bool
	deadline := time.Now().Add(cfg.SettleTimeout)
	for {
		if _, err := rt.B.Stack.Reconciler.Run(ctx); err != nil {
			return fmt.Errorf("regions: %s's reconciler under the takeover: %w", RegionB, err)
		}
		if marks, err = publishedMarks(ctx, rt.B.Stack.DDB, RegionA, RegionB); err != nil {
			return err
		}
		left := 0
		for _, id := range pending {
			if !marks[id] {
				left++
			}
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	c.rep.TakeoverPending = len(pending)
	c.rep.TakenOver, c.takenOver = len(marks), marks
	for _, id := range pending {
		if !marks[id] {
			c.extra = append(c.extra, Finding{Kind: KindTakeoverUnpublished, Subject: id,
				Detail: fmt.Sprintf("pending in %s's replica, written in %s, no PUBLISHED mark of %s", RegionB, RegionA, RegionB)})
		}
	}
	return nil
}

// drive runs n operations over the workers: worker w owns the accounts
// w, w+Workers, …; an operation on an account whose home is down is
// skipped. Every ProbeEvery-th operation also writes the account in the
// other Region (when it runs), which the fence must refuse.
func (c *chaosRun) drive(ctx context.Context, phase, n int) error {
	cfg := c.cfg
	var wg sync.WaitGroup
	errs := make([]error, cfg.Workers)
	for w := range cfg.Workers {
		ops := n / cfg.Workers
		if w < n%cfg.Workers {
			ops++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = c.worker(ctx, phase, w, ops)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *chaosRun) worker(ctx context.Context, phase, w, ops int) error {
	cfg, rt := c.cfg, c.rt
	rnd := rand.New(rand.NewPCG(cfg.Seed, uint64(phase<<16|w))) //nolint:gosec // G404: a seeded workload, not a secret
	var mine []int
	for i := w; i < cfg.Accounts; i += cfg.Workers {
		mine = append(mine, i)
	}
	for op := range ops {
		if err := ctx.Err(); err != nil {
			return err
		}
		id := AccountID(mine[rnd.IntN(len(mine))])
		amount := 1 + rnd.Int64N(100)
		deposit := rnd.IntN(2) == 0
		home, err := rt.Bank.Home(id)
		if err != nil {
			return err
		}
		if rt.Region(home).Stack.Suspended() {
			c.count(func(r *ChaosReport) { r.Skipped++ })
		} else {
			if deposit {
				err = rt.Bank.Deposit(ctx, id, amount)
			} else {
				err = rt.Bank.Withdraw(ctx, id, amount)
			}
			var tx *outbox.TxError
			switch {
			case errors.Is(err, ErrInsufficientFunds):
				c.count(func(r *ChaosReport) { r.Refused++ })
			case errors.Is(err, outbox.ErrConflict), errors.As(err, &tx):
				// Only a write made elsewhere at this account's sequence
				// (a fence breach) can refuse its home Region's write.
				c.mu.Lock()
				c.extra = append(c.extra, Finding{Kind: KindHomeWriteRefused, Subject: id, Detail: fmt.Sprintf("in %s: %v", home, err)})
				c.mu.Unlock()
			case err != nil:
				return fmt.Errorf("regions: phase %d operation on %s in %s: %w", phase, id, home, err)
			default:
				c.count(func(r *ChaosReport) { r.Written[home]++ })
			}
		}
		if op%cfg.ProbeEvery == cfg.ProbeEvery-1 {
			if err := c.probe(ctx, id, home); err != nil {
				return err
			}
		}
	}
	return nil
}

// probe deposits 1 on account id in the Region that is not its home (when
// that Region runs): the fence must refuse it.
func (c *chaosRun) probe(ctx context.Context, id, home string) error {
	other := RegionA
	if home == RegionA {
		other = RegionB
	}
	if c.rt.Region(other).Stack.Suspended() {
		return nil
	}
	err := c.rt.Bank.DepositIn(ctx, other, id, 1)
	var tx *outbox.TxError
	switch {
	case errors.Is(err, outbox.ErrNotHomeRegion):
		c.count(func(r *ChaosReport) { r.FenceRefusals++ })
	case errors.Is(err, outbox.ErrConflict), errors.As(err, &tx):
		// refused by a condition other than the fence (the sequence's
		// record exists there): nothing written, but not the fence's doing
		c.count(func(r *ChaosReport) { r.FenceConflicts++ })
	case err == nil:
		c.count(func(r *ChaosReport) { r.Written[other]++ })
		c.mu.Lock()
		c.extra = append(c.extra, Finding{Kind: KindFenceBreach, Subject: id, Detail: fmt.Sprintf("homed in %s, written in %s", home, other)})
		c.mu.Unlock()
	case errors.Is(err, ErrInsufficientFunds), errors.Is(err, ErrNoAccount):
		// the account not replicated there yet (unfenced build)
	default:
		return fmt.Errorf("regions: wrong-Region write of %s in %s: %w", id, other, err)
	}
	return nil
}

func (c *chaosRun) count(f func(*ChaosReport)) {
	c.mu.Lock()
	f(c.rep)
	c.mu.Unlock()
}

func (c *chaosRun) settle(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, c.cfg.SettleTimeout)
	defer cancel()
	return c.rt.Settle(sctx)
}

// foreignPublished counts the events on each Region's bus, put there by
// its own relay or reconciler (not forwarded), that were written in the
// other Region.
func (c *chaosRun) foreignPublished() int {
	origin := map[string]string{}
	for _, cm := range c.rt.Bank.Committed() {
		origin[cm.Event.EventID] = cm.Region
	}
	n := 0
	for _, r := range c.rt.Regions() {
		for id := range ownPublished(r) {
			if o, ok := origin[id]; ok && o != r.Name {
				n++
			}
		}
	}
	return n
}

// ownPublished returns the event ids Region r's own relay or reconciler
// put on its bus, with their counts (the events forwarded to it left out).
func ownPublished(r *Region) map[string]int {
	forwarded := map[string]bool{}
	for _, raw := range r.Stack.Bus.ForwardedEvents() {
		var ev struct{ ID string }
		if json.Unmarshal(raw, &ev) == nil {
			forwarded[ev.ID] = true
		}
	}
	out := map[string]int{}
	for _, raw := range r.Stack.Bus.Events() {
		var ev struct {
			ID     string
			Detail struct {
				EventID string `json:"event_id"`
			}
		}
		if json.Unmarshal(raw, &ev) != nil || forwarded[ev.ID] {
			continue
		}
		out[ev.Detail.EventID]++
	}
	return out
}

// duplicates counts the events published more than once, over the
// Regions.
func duplicates(obs Observation) int {
	n := 0
	for _, by := range obs.PublishedBy {
		total := 0
		for _, k := range by {
			total += k
		}
		if total > 1 {
			n++
		}
	}
	return n
}

// pendingOf returns the event ids of origin's outbox records PENDING in
// the replica ddb reads (a consistent scan).
func pendingOf(ctx context.Context, ddb *dynamodb.Client, origin string) ([]string, error) {
	var ids []string
	err := scan(ctx, ddb, OutboxTable, func(item map[string]types.AttributeValue) error {
		if stringOf(item[outbox.AttrOriginRegion]) == origin && stringOf(item[outbox.AttrStatus]) == outbox.StatusPending {
			ids = append(ids, stringOf(item[outbox.AttrEventID]))
		}
		return nil
	})
	return ids, err
}

// publishedMarks returns the event ids of survivor's PUBLISHED takeover
// marks on failed's records, read in the replica ddb reads.
func publishedMarks(ctx context.Context, ddb *dynamodb.Client, failed, survivor string) (map[string]bool, error) {
	pk := reconciler.MarkKey(failed, survivor, "").PK
	out := map[string]bool{}
	expr, err := expression.NewBuilder().WithKeyCondition(expression.Key(outbox.AttrPK).Equal(expression.Value(pk))).Build()
	if err != nil {
		return nil, fmt.Errorf("regions: the takeover marks' key condition: %w", err)
	}
	p := dynamodb.NewQueryPaginator(ddb, &dynamodb.QueryInput{TableName: aws.String(OutboxTable), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values()})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("regions: query the takeover marks: %w", err)
		}
		for _, it := range page.Items {
			if stringOf(it[reconciler.AttrTakeoverState]) == reconciler.MarkPublished {
				out[stringOf(it[reconciler.AttrMarkEventID])] = true
			}
		}
	}
	return out, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
