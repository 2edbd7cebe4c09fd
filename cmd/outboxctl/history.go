package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// envArchiveName names the outbox's archive (the stack output
// ArchiveName; make dev prints it).
const envArchiveName = "OUTBOX_ARCHIVE_NAME"

// timeFlag is an RFC 3339 time flag (zero when not given).
type timeFlag struct{ t time.Time }

func (f *timeFlag) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f *timeFlag) Set(v string) error {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return fmt.Errorf("want an RFC 3339 time such as 2026-01-02T15:04:05Z: %w", err)
	}
	f.t = t
	return nil
}

func runBackfill(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("backfill")
	archive := fs.String("archive", os.Getenv(envArchiveName), "the archive's name or ARN (default $"+envArchiveName+"; the stack output ArchiveName)")
	rule := fs.String("rule", "", "the consumer's rule: its name on -bus, or its ARN; only this rule receives the replay")
	bus := fs.String("bus", os.Getenv(config.EnvEventBusName), "with a rule name: its event bus (default $"+config.EnvEventBusName+")")
	var from, to timeFlag
	fs.Var(&from, "from", "replay events whose time is at or after this (RFC 3339; default: the archive's creation)")
	fs.Var(&to, "to", "replay events whose time is before this (RFC 3339; default: now)")
	settle := fs.Duration("settle", operator.DefaultArchiveSettle, "start the replay only once -to is this old: EventBridge archives events with a delay and advises 10 minutes (negative: at once)")
	name := fs.String("name", "", "the replay's name (default backfill-<rule>-<time>)")
	poll := fs.Duration("poll", operator.DefaultReplayPoll, "how often to report the replay's progress")
	ordersTable := fs.String("orders-table", os.Getenv(appenv.EnvOrdersTable), "check which orders began before what the archive holds (its creation, its retention window, -from; a Scan): their history is not in it (default $"+appenv.EnvOrdersTable+")")
	source := fs.String("source", config.String(config.EnvEventSource, appenv.EventSource), "the Source the outbox publishes with, to judge the archive's pattern against the rule's (default $"+config.EnvEventSource+" or "+appenv.EventSource+")")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *archive == "" || *rule == "" {
		return usageErr("backfill: -archive and -rule are required")
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	opts := operator.BackfillOptions{Archive: *archive, Rule: *rule, Bus: *bus, From: from.t, To: to.t, Settle: *settle, Name: *name, Poll: *poll}
	// The rule first: a wrong name is the likelier mistake, and its error
	// lists the bus's rules; the start-point check only matters once the
	// replay can run. Backfill gets the rule's ARN, which it takes as is.
	ruleARN, _, err := operator.ResolveRule(ctx, c.eb, *rule, *bus)
	if err != nil {
		return err
	}
	opts.Rule = ruleARN
	if err := printStartGap(ctx, e, c, opts, *ordersTable, *source); err != nil {
		return err
	}
	p, err := operator.Backfill(ctx, c.eb, opts, func(p operator.ReplayProgress, note string) {
		if note != "" {
			fmt.Fprintln(e.out, note)
			return
		}
		printProgress(e, p)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "replay %s COMPLETED: events of [%s, %s) replayed to %s; the consumer applies them from its queue (its dedup markers absorb what it already applied)\n",
		p.Name, p.From.Format(time.RFC3339), p.To.Format(time.RFC3339), *rule)
	return nil
}

// printStartGap says what the archive cannot give the consumer: the
// event types its pattern leaves out of the rule's, and (with an orders
// table) the orders that began before the earliest event the backfill
// delivers (the archive's creation, its retention window or -from,
// whichever is latest).
func printStartGap(ctx context.Context, e *cmdEnv, c clients, o operator.BackfillOptions, ordersTable, source string) error {
	r, err := operator.CheckArchiveReach(ctx, c.eb, operator.ReachOptions{Archive: o.Archive, Rule: o.Rule, Bus: o.Bus, Source: source, From: o.From})
	if err != nil {
		return fmt.Errorf("backfill: %w", err)
	}
	if ordersTable != "" {
		g, err := operator.FindStartGap(ctx, c.ddb, ordersTable, r)
		if err != nil {
			return err
		}
		fmt.Fprintln(e.out, g.String())
		return nil
	}
	for _, line := range []string{r.PatternGap(), r.PatternNote} {
		if line != "" {
			fmt.Fprintln(e.out, line)
		}
	}
	fmt.Fprintln(e.out, "start point not checked: give -orders-table (or $"+appenv.EnvOrdersTable+") to list the orders that began before what the archive holds (its creation, its retention window, -from): their first events are not in it")
	return nil
}

func printProgress(e *cmdEnv, p operator.ReplayProgress) {
	last := "-"
	if !p.LastReplayed.IsZero() {
		last = p.LastReplayed.Format(time.RFC3339)
	}
	line := fmt.Sprintf("%s\t%s\t%5.1f%%\tlast event replayed %s\trange [%s, %s)", p.Name, p.State, p.Percent, last, p.From.Format(time.RFC3339), p.To.Format(time.RFC3339))
	if p.Reason != "" {
		line += "\t" + p.Reason
	}
	fmt.Fprintln(e.out, line)
}

func runReplays(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("replays")
	prefix := fs.String("prefix", "", "only replays whose name starts with this")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	ps, err := operator.Replays(ctx, c.eb, *prefix)
	for _, p := range ps {
		printProgress(e, p)
	}
	fmt.Fprintf(e.out, "%d replay(s)\n", len(ps))
	return err
}

func runHistory(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("history")
	table := tableFlag(fs)
	aggregateType := fs.String("aggregate-type", order.AggregateType, "the aggregate type")
	// the aggregate id may come before or after the flags
	var id string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		id, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("history: %v", err)
	}
	if id == "" && fs.NArg() > 0 {
		id = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return usageErr("history: %v", err)
		}
	}
	if fs.NArg() > 0 {
		return usageErr("history: unexpected argument %q", fs.Arg(0))
	}
	if id == "" {
		return usageErr("history: the aggregate id is required (outboxctl history -table T ORDER_ID)")
	}
	if err := needTable("history", *table); err != nil {
		return err
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	h, err := operator.History(ctx, c.ddb, *table, *aggregateType, id)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.out, "sequence\ttype\toccurred at\tevent id\tstatus\tpublished at")
	for _, v := range h.Events {
		pub := "-"
		if !v.PublishedAt.IsZero() {
			pub = v.PublishedAt.Format(time.RFC3339Nano)
		}
		fmt.Fprintf(e.out, "%d\t%s\t%s\t%s\t%s\t%s\n", v.Sequence, v.EventType, v.OccurredAt.Format(time.RFC3339Nano), v.EventID, v.Status, pub)
	}
	fmt.Fprintf(e.out, "%d event(s) of %s %s\n", len(h.Events), *aggregateType, id)
	if h.Note != "" {
		fmt.Fprintln(e.out, h.Note)
	}
	return nil
}
