package mrec

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ErrUnknownRegion is returned by Pause, Resume, Lose and Recover for a
// Region name not in Config.Regions.
var ErrUnknownRegion = errors.New("mrec: unknown Region")

// ErrClosed is returned by Settle after Close.
var ErrClosed = errors.New("mrec: replicator closed")

// version is an item's last-writer-wins version: the replicator's timestamp
// of the write (see the package doc) and the Region it was made in.
type version struct {
	ts     int64
	origin string
}

// newer reports whether v wins over o: the later timestamp, ties broken by
// the greater Region name.
func (v version) newer(o version) bool {
	if v.ts != o.ts {
		return v.ts > o.ts
	}
	return v.origin > o.origin
}

// tableKey names an item within a Region; itemKey names it in one Region.
type tableKey struct{ table, key string }
type itemKey struct {
	region string
	tableKey
}

// regionState is one Region's replicator state (guarded by Replicator.mu).
type regionState struct {
	Region
	lost bool
	// echo holds the images the replicator wrote into this Region and has
	// not yet read back from its stream: tableKey → image hash → count.
	echo  map[tableKey]map[uint64]int
	sem   chan struct{} // concurrent writes into this Region
	stats RegionStats
}

// Replicator replicates Config.Tables between Config.Regions until Close.
// Its methods are safe for concurrent use.
type Replicator struct {
	cfg     Config
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	regions map[string]*regionState
	dirs    []*direction
	readers []*streamReader
	ver     map[itemKey]version // last-writer-wins versions, outside the items
	known   map[itemKey]uint64  // hash of the image last seen in each Region
	clock   int64               // last timestamp handed out (Unix ns)
}

// Start checks that every table exists in every Region with a
// NEW_IMAGE or NEW_AND_OLD_IMAGES stream, then starts reading every shard of
// every stream (at cfg.StartingPosition) and replicating. It returns an
// error wrapping ErrInvalidConfig for a bad cfg, or the DescribeTable error
// or stream problem of the first table that fails. ctx bounds only the
// checks; the replicator runs until Close.
func Start(ctx context.Context, cfg Config) (*Replicator, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &Replicator{
		cfg: cfg, ctx: rctx, cancel: cancel,
		regions: map[string]*regionState{},
		ver:     map[itemKey]version{},
		known:   map[itemKey]uint64{},
	}
	for _, reg := range cfg.Regions {
		r.regions[reg.Name] = &regionState{
			Region: reg,
			echo:   map[tableKey]map[uint64]int{},
			sem:    make(chan struct{}, cfg.Workers),
			stats:  RegionStats{Name: reg.Name},
		}
		for _, t := range cfg.Tables {
			arn, err := streamARN(ctx, reg, t)
			if err != nil {
				cancel()
				return nil, err
			}
			r.readers = append(r.readers, &streamReader{region: reg.Name, table: t, arn: arn, shards: map[string]*shardState{}, wake: make(chan struct{}, 1)})
		}
	}
	for _, from := range cfg.Regions {
		for _, to := range cfg.Regions {
			if from.Name != to.Name {
				r.dirs = append(r.dirs, newDirection(from.Name, to.Name))
			}
		}
	}
	for _, d := range r.dirs {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.dispatch(d) }()
	}
	for _, sr := range r.readers {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.runStream(sr) }()
	}
	cfg.Logger.Info("mrec: replicator started", "regions", len(cfg.Regions), "tables", cfg.Tables, "starting_position", cfg.StartingPosition)
	return r, nil
}

func streamARN(ctx context.Context, reg Region, table string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	out, err := reg.DDB.DescribeTable(cctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return "", fmt.Errorf("mrec: describe table %s in %s: %w", table, reg.Name, err)
	}
	spec := out.Table.StreamSpecification
	if spec == nil || !aws.ToBool(spec.StreamEnabled) || aws.ToString(out.Table.LatestStreamArn) == "" {
		return "", fmt.Errorf("mrec: table %s in %s has no stream", table, reg.Name)
	}
	if v := spec.StreamViewType; v != ddbtypes.StreamViewTypeNewImage && v != ddbtypes.StreamViewTypeNewAndOldImages {
		return "", fmt.Errorf("mrec: table %s in %s has stream view type %s (want NEW_IMAGE or NEW_AND_OLD_IMAGES)", table, reg.Name, v)
	}
	return aws.ToString(out.Table.LatestStreamArn), nil
}

// Close stops reading and delivering and waits for every goroutine (a write
// in flight completes or is cancelled). Writes still held or pending are
// dropped with the replicator. Close always returns nil; it is safe to call
// twice.
func (r *Replicator) Close() error {
	r.cancel()
	r.wg.Wait()
	return nil
}

// Pause holds replication from Region from to Region to: writes read in
// from are kept (and coalesced per key) and delivered on Resume. A write
// already being applied completes. It returns an error wrapping
// ErrUnknownRegion for a bad name.
func (r *Replicator) Pause(from, to string) error { return r.setPaused(from, to, true) }

// Resume ends Pause(from, to); the held writes are delivered (their delays
// have run out), subject to last writer wins.
func (r *Replicator) Resume(from, to string) error { return r.setPaused(from, to, false) }

func (r *Replicator) setPaused(from, to string, paused bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.dirs {
		if d.from == from && d.to == to {
			d.paused = paused
			d.signal()
			return nil
		}
	}
	return fmt.Errorf("%w: direction %s -> %s", ErrUnknownRegion, from, to)
}

// Lose cuts Region name off: its own unreplicated writes are held (never
// dropped) and nothing is delivered into it, until Recover. Its stream is
// still read, so its writes made meanwhile are held too.
func (r *Replicator) Lose(name string) error { return r.setLost(name, true) }

// Recover ends Lose(name): held writes flow in both directions, subject to
// last writer wins.
func (r *Replicator) Recover(name string) error { return r.setLost(name, false) }

func (r *Replicator) setLost(name string, lost bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs, ok := r.regions[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownRegion, name)
	}
	rs.lost = lost
	for _, d := range r.dirs {
		d.signal()
	}
	return nil
}

// blockedLocked reports whether direction d delivers nothing now.
func (r *Replicator) blockedLocked(d *direction) bool {
	return d.paused || r.regions[d.from].lost || r.regions[d.to].lost
}

// tick returns a timestamp (Unix ns) later than every earlier one.
func (r *Replicator) tick() int64 {
	now := time.Now().UnixNano()
	if now <= r.clock {
		now = r.clock + 1
	}
	r.clock = now
	return now
}

// settlePoll is how often Settle checks its watermark.
const settlePoll = 5 * time.Millisecond

// Settle waits until every write made before the call has been delivered,
// suppressed by last writer wins or coalesced into a newer write that has
// been delivered, in every direction not held (paused or touching a lost
// Region) at the time it checks; held writes are counted in Stats.Held
// instead. The watermark is taken from the streams: Settle first waits
// until, after the call, every stream has been described and every shard
// has been polled up to its end (a GetRecords started after the call
// returned less than a full page), then until every write read by then is
// done. It returns under continuous writes, and ctx's error (wrapped) or
// ErrClosed if the wait ends first.
func (r *Replicator) Settle(ctx context.Context) error {
	mark := time.Now()
	wait := func(what string, done func() bool) error {
		t := time.NewTicker(settlePoll)
		defer t.Stop()
		for !done() {
			select {
			case <-ctx.Done():
				return fmt.Errorf("mrec: settle: waiting for %s: %w", what, ctx.Err())
			case <-r.ctx.Done():
				return ErrClosed
			case <-t.C:
			}
		}
		return nil
	}
	for _, sr := range r.readers {
		sr.signal() // describe the streams now, not at the next period
	}
	if err := wait("the streams to be read", func() bool { return r.readersPast(mark) }); err != nil {
		return err
	}
	r.mu.Lock()
	target := make(map[*direction]uint64, len(r.dirs))
	for _, d := range r.dirs {
		target[d] = d.next
	}
	r.mu.Unlock()
	return wait("the deliveries", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, d := range r.dirs {
			if !r.blockedLocked(d) && d.oldestOutstanding() < target[d] {
				return false
			}
		}
		return true
	})
}

// Stats returns a snapshot of the counters, per direction and per Region
// (sorted by name), with totals.
func (r *Replicator) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s Stats
	for _, d := range r.dirs {
		ds := d.stats
		ds.From, ds.To = d.from, d.to
		ds.Pending = len(d.pending) + len(d.inflight)
		if r.blockedLocked(d) {
			ds.Held = len(d.pending)
		}
		s.add(ds)
		s.Directions = append(s.Directions, ds)
	}
	for _, rs := range r.regions {
		s.Regions = append(s.Regions, rs.stats)
	}
	sort.Slice(s.Directions, func(i, j int) bool {
		a, b := s.Directions[i], s.Directions[j]
		return a.From < b.From || a.From == b.From && a.To < b.To
	})
	sort.Slice(s.Regions, func(i, j int) bool { return s.Regions[i].Name < s.Regions[j].Name })
	return s
}
