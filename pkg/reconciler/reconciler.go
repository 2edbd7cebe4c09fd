// Package reconciler sweeps the outbox for records the relay missed: it
// queries the sparse pending index shard by shard (never a Scan) for records
// created longer ago than a threshold, re-publishes them through the relay's
// Publisher and marks or parks them through the relay's Marker. It also
// measures the backlog (pending count, age of the oldest pending record) and
// emits it as CloudWatch embedded metric format (EMF) lines.
//
// Part of the outbox library, the packages a team imports for its own tables
// (outbox, relay, reconciler, dedup, streamimage, idempotency); they never
// import the example orders application or the local tooling. The runnable
// example sweeps up a record the relay missed, against a local server.
//
// # Invariants
//
//   - Only records still in the pending index are considered; a published or
//     parked record has no pending_shard and is not in the index.
//   - Re-publishing an event the relay also published is allowed: consumers
//     deduplicate on event_id (promise I3). The relay's stream path does not
//     claim records.
//   - One publish per stale record across reconciler runs: before
//     re-publishing, a run claims the record on the base table with one
//     conditional UpdateItem (SET claimed_until = now + ClaimLease IF status
//     = PENDING AND (claimed_until absent OR claimed_until < now)). A run
//     retried by Lambda that overlaps the next scheduled one, or a slow run,
//     finds the record claimed and leaves it; a stale, eventually consistent
//     pending-index copy of a record already PUBLISHED or PARKED fails the
//     claim and is never re-published. The claim returns the base table's
//     item, which is what gets published. One write per stale record; none
//     when nothing is stale (the happy path). On AWS the construct also
//     runs at most one reconciler at a time (reserved concurrency 1, set in
//     infra/outboxcdk); the claim covers what that does not (a run still
//     finishing when the next starts after a throttle, a manual invoke).
//   - Per-aggregate order (I4): due records of every shard are read in
//     created_at order (merged across shards), an aggregate's records are
//     published in sequence order (relay.Publisher.PublishInOrder: an event never before its predecessor was answered),
//     and once one of an aggregate's records is not published or not
//     claimable (another run holds it), its later records are held back
//     for the rest of the run.
//   - The stale age has a floor: ReconcileAfter >= config.MinReconcileAfter
//     (2 min), tied to the event source mapping's retry window, so the
//     reconciler does not race the relay on fresh records. Tests and the
//     local stack lower it with Config.AllowShortReconcileAfter.
//   - Every run is bounded: Budget in time, MaxPagesPerShard pages of at most
//     PageSize items per shard. A run cut short reports Truncated.
//   - Publish, then mark, within the deadline: re-publishing (and reading
//     new pages) stops min(marker reserve, half the run) before the run's
//     deadline (Budget or the invocation deadline, whichever is first); the
//     marker reserve is relay.MarkerConfig.Reserve. Records published in a
//     run are then marked in it rather than left pending and re-sent by the
//     next run. The half-run cap keeps short local runs (devstack) useful.
//
// # Multi-Region mode
//
// With Config.Region set (config.RegionFromEnv: OUTBOX_REGIONS lists the
// global table's Regions, docs/MULTI-REGION.md) the reconciler sweeps only
// its own Region's pending shards (outbox.RegionShardName) and claims only
// records whose origin_region is its Region: one writing Region per record.
// Each run writes a heartbeat (HeartbeatKey). Takeover is an operator's
// decision, never a timer: DeclareTakeover (outboxctl takeover) writes a
// takeover item in the surviving Region; while it is ACTIVE the survivor's
// runs also sweep the failed Region's shards for records older than
// ReconcileAfter plus the takeover's lag margin, claim each by a takeover
// mark of their own (MarkKey), publish it through the same Publisher and
// mark the mark PUBLISHED, never writing the failed Region's record.
// ReleaseTakeover ends it. Once back, the failed Region's reconciler adopts
// the survivor's PUBLISHED marks: it marks its own record published without
// sending it again. Single-Region mode (Region "") is unchanged.
//
// Records written before the table switched to multi-Region mode carry no
// origin_region and sit in the single-Region shards (outbox.ShardName).
// They have one writing Region too, the legacy owner: the first Region of
// OUTBOX_REGIONS (Config.LegacyOwner). Its reconciler sweeps those shards
// as well, claiming only records without an origin Region, so a switch
// does not strand what was pending (promise I2). No takeover covers them:
// while the legacy owner is down they wait for it.
//
// # Example
//
//	rc, err := reconciler.New(ddb, r.Publisher(), r.Marker(), reconciler.Config{Table: table})
//	lambda.Start(rc.Handle)
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.opentelemetry.io/otel/attribute"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// QueryAPI is the DynamoDB method the reconciler reads the pending index
// with, with the SDK's exact signature (*dynamodb.Client satisfies it).
type QueryAPI interface {
	Query(ctx context.Context, params *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// ClaimAPI is the DynamoDB method the reconciler claims a stale record with
// on the base table, with the SDK's exact signature.
type ClaimAPI interface {
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// DynamoDBAPI is every DynamoDB method the reconciler calls
// (*dynamodb.Client satisfies it). Implementations must be safe for
// concurrent use.
type DynamoDBAPI interface {
	QueryAPI
	ClaimAPI
}

// Publisher publishes envelopes without letting an aggregate's events
// overtake each other; *relay.Publisher satisfies it. It must be safe for
// concurrent use and return one result per envelope, in order (see
// relay.Publisher.PublishInOrder; keys give the order within an aggregate).
type Publisher interface {
	PublishInOrder(ctx context.Context, envs []outbox.Envelope, keys []outbox.Key) []relay.Result
}

// Marker records publish outcomes; *relay.Marker satisfies it. It returns
// one error per mark, in order. A Marker that also has a
// Reserve() time.Duration method (as *relay.Marker does) gets that much of
// the run's time kept for marking, at most half the run: publishing stops
// that long before the run's deadline.
type Marker interface {
	MarkAll(ctx context.Context, marks []relay.Mark) []error
}

// MultiRegionAPI is what a multi-Region reconciler (Config.Region set)
// calls besides DynamoDBAPI, with the SDK's exact signatures
// (*dynamodb.Client satisfies it): GetItem (a failed Region's record,
// strongly consistent in this Region's replica, before a takeover publish),
// PutItem (heartbeat, takeover marks), BatchGetItem (takeover marks of a
// page of own records, to adopt). New detects it on its DynamoDBAPI with a
// type assertion and refuses a Region without it.
type MultiRegionAPI interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, params *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	BatchGetItem(ctx context.Context, params *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

// reserver is the optional Marker method giving its marking reserve.
type reserver interface{ Reserve() time.Duration }

// Config configures a Reconciler. Zero values take the defaults.
type Config struct {
	// Table is the outbox table name. Required.
	Table string
	// Region is this reconciler's Region in multi-Region mode
	// (config.RegionFromEnv; "" = single-Region mode): it sweeps only its
	// own Region's pending shards (outbox.RegionShardName), and the failed
	// Region's during a takeover it survives (docs/MULTI-REGION.md).
	Region string
	// LegacyOwner makes this Region the legacy owner in multi-Region mode
	// (ConfigFromEnv sets it when Region is the first Region of
	// OUTBOX_REGIONS, config.RegionsFromEnv()[0]; exactly one Region's
	// reconciler must have it): records without an origin Region
	// (outbox.AttrOriginRegion), written before the table switched to
	// multi-Region mode and still in the single-Region pending shards
	// (outbox.ShardName), belong to it. Its runs also sweep those shards,
	// claim only records without an origin Region, re-publish and mark
	// them like their own (Report.Legacy), and count them in the gauges.
	// No other Region's reconciler touches them. It requires Region.
	LegacyOwner bool
	// PendingShards is the number of pending index shards; it must match the
	// writers'. Default config.DefaultPendingShards (16), at most
	// config.MaxPendingShards.
	PendingShards int
	// ReconcileAfter is the age (now − created_at_ms) past which a pending
	// record is re-published. Default config.DefaultReconcileAfter (5 min);
	// at least config.MinReconcileAfter (2 min, the event source mapping's
	// shortest retry window) unless AllowShortReconcileAfter is set. Set it
	// to at least the deployed mapping's MaximumRecordAge plus the relay's
	// function timeout (infra/outboxcdk checks this).
	ReconcileAfter time.Duration
	// AllowShortReconcileAfter lets ReconcileAfter go below
	// config.MinReconcileAfter. For tests and the local stack only (e.g. a
	// chaos run where the reconciler races the relay on purpose); never set
	// it on AWS: the function reads no variable for it.
	AllowShortReconcileAfter bool
	// ClaimLease is how long a run's claim on a record keeps other runs off
	// it (claimed_until = now + ClaimLease, epoch milliseconds). It must
	// outlast the run that claimed it: at least Budget. Default 2 × Budget
	// (90 s with the default budget, longer than the function timeout the
	// construct sets, Budget + 15 s). A record a run claimed but could not
	// publish waits for the lease to end before the next run retries it.
	ClaimLease time.Duration
	// ClaimConcurrency bounds the claim (UpdateItem) calls in flight.
	// Default 8.
	ClaimConcurrency int
	// Budget bounds one run. Default config.DefaultReconcileBudget (45 s).
	Budget time.Duration
	// PageSize is the Query Limit (items per page, 1..1000). Default 100.
	PageSize int
	// MaxPagesPerShard bounds the pages read per shard per run, for both the
	// due-record sweep and the count. Default 10.
	MaxPagesPerShard int
	// CallTimeout bounds each Query call. Default 5 s.
	CallTimeout time.Duration
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the EMF lines. Default config.MetricsWriter()
	// (Lambda's log stream in Lambda, nothing elsewhere; config.EnvMetrics
	// overrides); io.Discard disables.
	Metrics io.Writer
	// MarkRetention is how long a PUBLISHED takeover mark lives (its TTL,
	// expires_at) in multi-Region mode: it must outlast the failed Region's
	// outage, or the recovered Region re-sends what the survivor published
	// (a duplicate consumers absorb, I3). Default DefaultMarkRetention.
	MarkRetention time.Duration
	// Now returns the current time. Default time.Now.
	Now func() time.Time
}

// DefaultMarkRetention is Config.MarkRetention's default: 30 days.
const DefaultMarkRetention = 30 * 24 * time.Hour

func (c *Config) setDefaults() {
	if c.MarkRetention == 0 {
		c.MarkRetention = DefaultMarkRetention
	}
	if c.PendingShards == 0 {
		c.PendingShards = config.DefaultPendingShards
	}
	if c.ReconcileAfter == 0 {
		c.ReconcileAfter = config.DefaultReconcileAfter
	}
	if c.Budget == 0 {
		c.Budget = config.DefaultReconcileBudget
	}
	if c.ClaimLease == 0 {
		c.ClaimLease = 2 * c.Budget
	}
	if c.ClaimConcurrency == 0 {
		c.ClaimConcurrency = 8
	}
	if c.PageSize == 0 {
		c.PageSize = 100
	}
	if c.MaxPagesPerShard == 0 {
		c.MaxPagesPerShard = 10
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = config.MetricsWriter()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports a configuration error.
func (c Config) Validate() error {
	switch {
	case c.Table == "":
		return errors.New("reconciler: Config.Table is required")
	case c.PendingShards < 1 || c.PendingShards > config.MaxPendingShards:
		return fmt.Errorf("reconciler: PendingShards %d out of range 1..%d", c.PendingShards, config.MaxPendingShards)
	case c.ReconcileAfter < 0:
		return errors.New("reconciler: ReconcileAfter must not be negative")
	case c.ReconcileAfter < config.MinReconcileAfter && !c.AllowShortReconcileAfter:
		return fmt.Errorf("reconciler: ReconcileAfter %s is below %s (config.MinReconcileAfter): the reconciler would race the relay on records the event source mapping is still delivering", c.ReconcileAfter, config.MinReconcileAfter)
	case c.Budget <= 0:
		return errors.New("reconciler: Budget must be positive")
	case c.ClaimLease < c.Budget:
		return fmt.Errorf("reconciler: ClaimLease %s is below Budget %s: a claim must outlast the run that took it", c.ClaimLease, c.Budget)
	case c.ClaimConcurrency < 1:
		return fmt.Errorf("reconciler: ClaimConcurrency %d must be >= 1", c.ClaimConcurrency)
	case c.PageSize < 1 || c.PageSize > 1000:
		return fmt.Errorf("reconciler: PageSize %d out of range 1..1000", c.PageSize)
	case c.MaxPagesPerShard < 1:
		return fmt.Errorf("reconciler: MaxPagesPerShard %d must be >= 1", c.MaxPagesPerShard)
	case c.CallTimeout <= 0:
		return errors.New("reconciler: CallTimeout must be positive")
	case c.MarkRetention < time.Hour:
		return fmt.Errorf("reconciler: MarkRetention %s is below an hour", c.MarkRetention)
	}
	if c.Region != "" {
		if err := config.ValidRegionName(c.Region); err != nil {
			return fmt.Errorf("reconciler: Config.Region: %w", err)
		}
	}
	if c.LegacyOwner && c.Region == "" {
		return errors.New("reconciler: Config.LegacyOwner needs Config.Region (multi-Region mode); single-Region mode sweeps the single-Region shards anyway")
	}
	return nil
}

// Report summarises one run.
type Report struct {
	// Pending is the number of records in the pending index (any age) left
	// after the run's repair, when each shard was counted (a lower bound if
	// Truncated).
	Pending int
	// OldestPendingAge is now − created_at_ms of the oldest record still
	// pending after the repair; zero when none is. It grows only while
	// records stay pending through runs (the reconciler alarm's signal).
	OldestPendingAge time.Duration
	// Resent counts records re-published and marked published.
	Resent int
	// Parked counts records parked (permanent failure or undecodable).
	Parked int
	// Failed counts records left pending (retryable publish failure, claim
	// or marking error, or held back behind an earlier record of their
	// aggregate); the next run retries them once their claim lapses.
	Failed int
	// HeldBack counts the records among Failed that were not sent because
	// an earlier record of their aggregate was not published or was claimed
	// by another run.
	HeldBack int
	// Skipped counts due records the run did not claim: already published
	// or parked (a stale index copy), gone, or claimed by another run.
	Skipped int
	// Truncated is true when the budget or the page bound stopped the run
	// before every due record or every pending record was visited.
	Truncated bool
	// TakenOver counts a failed Region's records this run published during
	// a takeover it survives (each recorded by a PUBLISHED takeover mark;
	// the record itself is never written). Multi-Region mode only.
	TakenOver int
	// Adopted counts own records marked published without being sent
	// because a survivor's takeover mark says it published them.
	// Multi-Region mode only.
	Adopted int
	// Takeovers are the active takeovers this run swept for, by failed
	// Region.
	Takeovers []string
	// Legacy counts records without an origin Region (written before the
	// switch to multi-Region mode) this run re-published and marked
	// published from the single-Region pending shards; they are also
	// counted in Resent. Legacy owner only (Config.LegacyOwner).
	Legacy int
}

// Reconciler re-publishes stale pending outbox records. It is safe for
// concurrent use: overlapping runs claim each record before re-publishing
// it, so a record is re-published by one run only. One run at a time is the
// intended schedule (on AWS the construct sets reserved concurrency 1).
type Reconciler struct {
	ddb    DynamoDBAPI
	pub    Publisher
	marker Marker
	cfg    Config
	emf    *relay.EMF
	// reserve is kept before the run's deadline for marking (0 when the
	// marker does not say).
	reserve time.Duration
	// multi is ddb's MultiRegionAPI (nil in single-Region mode).
	multi MultiRegionAPI
}

// New returns a Reconciler, or an error if cfg does not validate, a
// dependency is nil, or Config.Region is set and ddb is not a
// MultiRegionAPI.
func New(ddb DynamoDBAPI, pub Publisher, marker Marker, cfg Config) (*Reconciler, error) {
	if ddb == nil || pub == nil || marker == nil {
		return nil, errors.New("reconciler: New: nil dependency")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rc := &Reconciler{ddb: ddb, pub: pub, marker: marker, cfg: cfg, emf: relay.NewEMF(cfg.Metrics, cfg.Table)}
	if m, ok := marker.(reserver); ok {
		rc.reserve = m.Reserve()
	}
	if cfg.Region != "" {
		m, ok := ddb.(MultiRegionAPI)
		if !ok {
			return nil, fmt.Errorf("reconciler: Config.Region %s needs a client with GetItem, PutItem and BatchGetItem (MultiRegionAPI)", cfg.Region)
		}
		rc.multi = m
	}
	return rc, nil
}

// Handle is the scheduled (EventBridge Scheduler / rule) Lambda entry point:
// it runs one reconciliation and returns Run's error, if any.
func (r *Reconciler) Handle(ctx context.Context, ev events.EventBridgeEvent) error {
	_, err := r.Run(ctx)
	if err != nil {
		return fmt.Errorf("reconcile (scheduled event %s): %w", ev.ID, err)
	}
	return nil
}

// Run first repairs: it pages through the records with created_at_ms < now −
// ReconcileAfter of every pending index shard ("p00".."pNN", or
// "<Region>#p00".. in multi-Region mode: outbox.RegionShardName; at most
// MaxPagesPerShard pages of PageSize each), merged in created_at order, and
// claims, re-publishes (in order per aggregate) and marks them (see sweep).
// Then, with the budget left, it gauges: counts every shard's pending
// records (Select COUNT) and reads its oldest record (ascending, Limit 1),
// a few shards at a time. It logs and emits (EMF) PendingCount, OldestPendingAgeSeconds
// and ReconcilerResent (ParkedRecords is emitted by the Marker per record). It returns the report and the joined
// Query errors, if any (a failing shard does not stop the others); running
// out of budget is not an error but sets Report.Truncated.
//
// Multi-Region mode (Config.Region set) adds, in this order: a heartbeat
// (HeartbeatKey(Region), PutItem); the takeovers read from the table
// (ListTakeovers); adoption in the own sweep, when any takeover of this
// Region was ever declared: a due record that a survivor's PUBLISHED
// takeover mark covers is marked published without being sent; and, for
// each ACTIVE takeover naming this Region as survivor, a sweep of the
// failed Region's shards (outbox.RegionShardName(failed, i)) for records
// older than ReconcileAfter + the takeover's lag margin, each claimed by a
// takeover mark (MarkKey), published through the same Publisher and then
// recorded by marking the mark PUBLISHED; the failed Region's record is
// never written. It emits TakeoverPublished, TakeoverAdopted and
// ActiveTakeovers besides the single-Region metrics. The legacy owner
// (Config.LegacyOwner) first sweeps the single-Region shards
// (outbox.ShardName) for records without an origin Region, with the same
// cutoff, claim, publish and mark as its own (claim conditioned on
// attribute_not_exists(origin_region) instead of origin_region = Region),
// and its gauges count those shards too.
func (r *Reconciler) Run(ctx context.Context) (rep Report, err error) {
	ctx, span := outboxtrace.Tracer().Start(ctx, "outbox reconcile")
	defer func() {
		span.SetAttributes(attribute.Int("outbox.reconcile.pending", rep.Pending), attribute.Int("outbox.reconcile.resent", rep.Resent),
			attribute.Int("outbox.reconcile.parked", rep.Parked), attribute.Bool("outbox.reconcile.truncated", rep.Truncated))
		span.End()
	}()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Budget)
	defer cancel()
	// Publishing stops early enough for marking (see the package invariants).
	// Its publish spans are named as re-sends (relay.WithResend).
	deadline, _ := ctx.Deadline()
	pubCtx, cancelPub := context.WithDeadline(relay.WithResend(ctx), deadline.Add(-min(r.reserve, time.Until(deadline)/2)))
	defer cancelPub()
	now := r.cfg.Now()
	cutoff := now.Add(-r.cfg.ReconcileAfter).UnixMilli()
	// Repair first: the sweep gets the whole budget, and the gauges below
	// get what is left. Counting first let a tight budget (or a slow store)
	// spend every run on the gauges and never reach the sweep, so a pending
	// record was never re-sent.
	var errs []error
	own := r.ownLane()
	var takeovers []*lane
	if r.cfg.Region != "" {
		// Multi-Region: the heartbeat first (cheap, and written even when
		// the run is cut short), then the takeovers this Region is part of.
		if err := r.heartbeat(ctx, now); err != nil {
			errs = append(errs, err)
		}
		var err error
		if takeovers, err = r.takeoverLanes(ctx, own); err != nil {
			errs = append(errs, err)
		}
	}
	if r.cfg.LegacyOwner {
		// Records from before the switch first: an aggregate's older
		// records go out before its newer ones where both are due.
		errs = append(errs, r.sweep(ctx, pubCtx, r.legacyLane(), cutoff, &rep)...)
	}
	errs = append(errs, r.sweep(ctx, pubCtx, own, cutoff, &rep)...)
	for _, l := range takeovers {
		rep.Takeovers = append(rep.Takeovers, l.failed)
		errs = append(errs, r.sweep(ctx, pubCtx, l, takeoverCutoff(now, r.cfg.ReconcileAfter, l.lagMargin), &rep)...)
	}
	oldest, countErrs := r.gauge(ctx, &rep)
	errs = append(errs, countErrs...)
	if oldest >= 0 {
		rep.OldestPendingAge = max(now.Sub(time.UnixMilli(oldest)), 0)
	}
	if ctx.Err() != nil {
		rep.Truncated = true
	}
	r.cfg.Logger.InfoContext(ctx, "reconciler: run finished",
		"pending", rep.Pending, "oldest_pending_age_seconds", rep.OldestPendingAge.Seconds(),
		"resent", rep.Resent, "parked", rep.Parked, "failed", rep.Failed, "held_back", rep.HeldBack,
		"skipped", rep.Skipped, "truncated", rep.Truncated)
	metrics := map[string]relay.Metric{
		config.MetricPendingCount:     {Value: float64(rep.Pending), Unit: relay.UnitCount},
		config.MetricOldestPendingAge: {Value: rep.OldestPendingAge.Seconds(), Unit: relay.UnitSeconds},
		config.MetricReconcilerResent: {Value: float64(rep.Resent), Unit: relay.UnitCount},
	}
	if r.cfg.Region != "" {
		metrics[MetricTakeoverPublished] = relay.Metric{Value: float64(rep.TakenOver), Unit: relay.UnitCount}
		metrics[MetricTakeoverAdopted] = relay.Metric{Value: float64(rep.Adopted), Unit: relay.UnitCount}
		metrics[MetricActiveTakeovers] = relay.Metric{Value: float64(len(rep.Takeovers)), Unit: relay.UnitCount}
		r.cfg.Logger.InfoContext(ctx, "reconciler: multi-Region run", "region", r.cfg.Region,
			"taken_over", rep.TakenOver, "adopted", rep.Adopted, "takeovers", rep.Takeovers,
			"legacy_owner", r.cfg.LegacyOwner, "legacy", rep.Legacy)
	}
	r.emf.Emit(metrics)
	return rep, errors.Join(errs...)
}

func (r *Reconciler) query(ctx context.Context, in *dynamodb.QueryInput) (*dynamodb.QueryOutput, error) {
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	return r.ddb.Query(callCtx, in)
}

func str(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}
