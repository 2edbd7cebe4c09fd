package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
)

// Takeover commands (docs/MULTI-REGION.md, choice 4): an operator's
// decision, never a timer. Only the survivor writes the takeover item, so
// these commands run with the survivor's Region as the client's Region.

// regionsFlag registers -regions, defaulting to OUTBOX_REGIONS.
func regionsFlag(fs *flag.FlagSet) *string {
	return fs.String("regions", os.Getenv(config.EnvRegions), "the global table's Regions, comma-separated, e.g. eu-west-1,eu-central-1 (default $"+config.EnvRegions+"): required by takeover and release, whose -failed and survivor must be in it; their heartbeat ages are printed")
}

// byFlag registers -by, defaulting to $USER.
func byFlag(fs *flag.FlagSet) *string {
	return fs.String("by", os.Getenv("USER"), "who decides, recorded on the takeover item, e.g. \"$USER/INC-123\" (default $USER; required when $USER is empty)")
}

// checkBy refuses an empty -by ($USER empty and no -by) and an
// all-whitespace one: the takeover item records who decided.
func checkBy(name, by string) error {
	if strings.TrimSpace(by) == "" {
		return usageErr("%s: -by is required (who decides, recorded on the takeover item; $USER is empty or -by is blank): e.g. -by \"$USER/INC-123\"", name)
	}
	return nil
}

// takeoverRegions parses the Region list a takeover command needs (-regions
// or OUTBOX_REGIONS): absent or malformed is a usage error.
func takeoverRegions(name, regions string) ([]string, error) {
	if regions == "" {
		return nil, usageErr("%s: -regions A,B (or $%s) is required: the global table's Regions, to check -failed and the survivor", name, config.EnvRegions)
	}
	list, err := config.ParseRegions(regions)
	if err != nil {
		return nil, usageErr("%s: -regions: %v", name, err)
	}
	return list, nil
}

// takeoverPair checks -failed and -survivor (defaulting to the clients'
// Region): both in regions (the global table's Regions), different, and
// the command running in the survivor's Region. A bad name or pair is a
// usage error.
func takeoverPair(name, failed, survivor, clientRegion string, regions []string) (string, error) {
	if failed == "" {
		return "", usageErr("%s: -failed REGION is required", name)
	}
	if err := config.ValidRegionName(failed); err != nil {
		return "", usageErr("%s: -failed: %v", name, err)
	}
	if !slices.Contains(regions, failed) {
		return "", usageErr("%s: -failed %s is not one of the Regions %s (-regions or $%s)", name, failed, strings.Join(regions, ","), config.EnvRegions)
	}
	if survivor == "" {
		survivor = clientRegion
	}
	if err := config.ValidRegionName(survivor); err != nil {
		return "", usageErr("%s: -survivor: %v", name, err)
	}
	if survivor == failed {
		return "", usageErr("%s: -survivor %s is the failed Region: a Region cannot take over itself (set -region or -survivor to the surviving Region)", name, survivor)
	}
	if survivor != clientRegion {
		return "", usageErr("%s: the client's Region is %s, the survivor %s: only the survivor writes its takeover items; run with -region %s", name, clientRegion, survivor, survivor)
	}
	if !slices.Contains(regions, survivor) {
		return "", usageErr("%s: the survivor %s (-survivor, or the client's Region: -region or AWS_REGION) is not one of the Regions %s (-regions or $%s)", name, survivor, strings.Join(regions, ","), config.EnvRegions)
	}
	return survivor, nil
}

func runTakeover(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("takeover")
	table := tableFlag(fs)
	failed := fs.String("failed", "", "the Region declared down (required)")
	survivor := fs.String("survivor", "", "the Region taking over: must equal the client's Region (-region or AWS_REGION), its default, and differ from -failed")
	margin := fs.Duration("lag-margin", time.Minute, "publish only the failed Region's records older than the survivor's RECONCILE_AFTER plus this (0 to "+reconciler.MaxLagMargin.String()+"): above the replication lag you observe")
	by := byFlag(fs)
	regions := regionsFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := needTable("takeover", *table); err != nil {
		return err
	}
	if *failed == "" {
		return usageErr("takeover: -failed REGION is required")
	}
	list, err := takeoverRegions("takeover", *regions)
	if err != nil {
		return err
	}
	if err := checkBy("takeover", *by); err != nil {
		return err
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	s, err := takeoverPair("takeover", *failed, *survivor, c.region, list)
	if err != nil {
		return err
	}
	d := reconciler.TakeoverDecl{Failed: *failed, Survivor: s, LagMargin: *margin, DeclaredBy: *by}
	if err := d.Validate(); err != nil {
		return usageErr("takeover: %v", err)
	}
	now := time.Now()
	if err := reconciler.DeclareTakeover(ctx, c.ddb, *table, d, now); err != nil {
		if errors.Is(err, reconciler.ErrTakeoverActive) {
			return fmt.Errorf("%w; see it with: outboxctl -region %s takeovers -table %s -regions %s; end it with: outboxctl -region %s release -table %s -failed %s -regions %s",
				err, s, *table, strings.Join(list, ","), s, *table, d.Failed, strings.Join(list, ","))
		}
		return err
	}
	hbs, hbErr := reconciler.ReadHeartbeats(ctx, c.ddb, *table, list)
	fmt.Fprintf(e.out, "takeover of %s by %s declared (lag margin %s, by %s)\n", d.Failed, d.Survivor, d.LagMargin, orDash(d.DeclaredBy))
	writeHeartbeats(e.out, s, hbs, hbErr, now)
	fmt.Fprintf(e.out, `what happens now:
  - %[2]s's reconciler, from its next run, also sweeps %[1]s's replicated pending records older than
    its RECONCILE_AFTER plus %[3]s, publishes each once and records a takeover mark of its own;
    it never writes %[1]s's records. Consumers deduplicate on event_id: a record %[1]s published
    whose status had not replicated yet is delivered twice, applied once.
  - a record %[1]s wrote that has not replicated here is published once %[1]s is back (by %[1]s).
  - writes of aggregates homed in %[1]s stay refused in %[2]s until %[1]s is back.
when %[1]s is back:
  - its reconciler adopts %[2]s's published marks: marks those records published without re-sending.
  - release the takeover (in %[2]s):
      outboxctl -region %[2]s release -table %[4]s -failed %[1]s -survivor %[2]s -regions %[5]s
`, d.Failed, d.Survivor, d.LagMargin, *table, strings.Join(list, ","))
	return nil
}

func runRelease(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("release")
	table := tableFlag(fs)
	failed := fs.String("failed", "", "the Region that was declared down (required)")
	survivor := fs.String("survivor", "", "the Region that took over: must equal the client's Region (-region or AWS_REGION), its default")
	by := byFlag(fs)
	regions := regionsFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := needTable("release", *table); err != nil {
		return err
	}
	if *failed == "" {
		return usageErr("release: -failed REGION is required")
	}
	list, err := takeoverRegions("release", *regions)
	if err != nil {
		return err
	}
	if err := checkBy("release", *by); err != nil {
		return err
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	s, err := takeoverPair("release", *failed, *survivor, c.region, list)
	if err != nil {
		return err
	}
	now := time.Now()
	if err := reconciler.ReleaseTakeover(ctx, c.ddb, *table, *failed, s, *by, now); err != nil {
		return err
	}
	hbs, hbErr := reconciler.ReadHeartbeats(ctx, c.ddb, *table, list)
	fmt.Fprintf(e.out, "takeover of %s by %s released: %s's next reconciler run no longer sweeps %s's records\n", *failed, s, s, *failed)
	writeHeartbeats(e.out, s, hbs, hbErr, now)
	fmt.Fprintf(e.out, "%s's reconciler keeps adopting %s's published marks (the takeover item stays, RELEASED)\n", *failed, s)
	return nil
}

func runTakeovers(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("takeovers")
	table := tableFlag(fs)
	regions := regionsFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := needTable("takeovers", *table); err != nil {
		return err
	}
	if _, err := config.ParseRegions(*regions); err != nil {
		return usageErr("takeovers: -regions: %v", err)
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	// The client's Region must be one of -regions (when given): a Region
	// misspelled in the list then shows instead of a heartbeat "none".
	if _, err := multiRegion("takeovers", *regions, c.region); err != nil {
		return err
	}
	list, _ := config.ParseRegions(*regions)
	tks, err := reconciler.ListTakeovers(ctx, c.ddb, *table)
	if err != nil {
		return err
	}
	names := list
	active := 0
	for _, t := range tks {
		names = regionList(strings.Join(names, ","), t.Failed, t.Survivor)
		released := "-"
		if !t.ReleasedAt.IsZero() {
			released = t.ReleasedAt.UTC().Format(time.RFC3339) + " by " + orDash(t.ReleasedBy)
		}
		if t.Active() {
			active++
		}
		fmt.Fprintf(e.out, "%s\t%s -> %s\tlag margin %s\tdeclared %s by %s\treleased %s\n", t.State, t.Failed, t.Survivor, t.LagMargin,
			t.DeclaredAt.UTC().Format(time.RFC3339), orDash(t.DeclaredBy), released)
	}
	fmt.Fprintf(e.out, "%d takeover(s), %d active\n", len(tks), active)
	now := time.Now()
	hbs, hbErr := reconciler.ReadHeartbeats(ctx, c.ddb, *table, names)
	writeHeartbeats(e.out, c.region, hbs, hbErr, now)
	return nil
}

// regionList returns the valid names of the comma-separated list and
// extra, each once, in order.
func regionList(list string, extra ...string) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range append(strings.Split(list, ","), extra...) {
		r = strings.TrimSpace(r)
		if r == "" || seen[r] || config.ValidRegionName(r) != nil {
			continue
		}
		seen[r] = true
		out = append(out, r)
	}
	return out
}

// writeHeartbeats prints each Region's last reconciler run as the
// client's Region's replica has it: for another Region its age bounds the
// replication lag into the client's Region plus one schedule period.
func writeHeartbeats(w io.Writer, here string, hbs []reconciler.Heartbeat, err error, now time.Time) {
	fmt.Fprintf(w, "heartbeats (last multi-Region reconciler run, as %s's replica has it):\n", here)
	for _, h := range hbs {
		if h.At.IsZero() {
			fmt.Fprintf(w, "  %-16s none (never ran in multi-Region mode, or not replicated here)\n", h.Region)
			continue
		}
		fmt.Fprintf(w, "  %-16s %s ago (%s)\n", h.Region, h.Age(now).Round(time.Second), h.At.Format(time.RFC3339))
	}
	if err != nil {
		fmt.Fprintf(w, "  error reading heartbeats: %v\n", err)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// multiRegion returns the clients' Region when regions (-regions,
// OUTBOX_REGIONS) is set: multi-Region mode, where redrive, replay and
// status act on that Region's records and shards only. "" when regions is
// empty (single-Region mode). A malformed list, or a client Region not in
// it, is a usage error.
func multiRegion(name, regions, clientRegion string) (string, error) {
	list, err := config.ParseRegions(regions)
	if err != nil {
		return "", usageErr("%s: -regions: %v", name, err)
	}
	if list == nil {
		return "", nil
	}
	for _, r := range list {
		if r == clientRegion {
			return r, nil
		}
	}
	return "", usageErr("%s: the client's Region %s is not one of -regions %s (set -region)", name, clientRegion, regions)
}
