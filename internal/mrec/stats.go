package mrec

// DirectionStats counts one direction of replication (From → To). Counters
// only grow; Pending and Held are the values at the snapshot.
type DirectionStats struct {
	From, To string
	// Replicated counts puts written into To.
	Replicated int64
	// DeletesReplicated counts deletes written into To (REMOVE records,
	// TTL deletes included); TTLDeletesReplicated counts the TTL ones among
	// them, written as plain deletes.
	DeletesReplicated    int64
	TTLDeletesReplicated int64
	// Unchanged counts deliveries where To already held the image (or held
	// no item for a delete): nothing is written, as DynamoDB writes no
	// stream record for a write that changes nothing.
	Unchanged int64
	// Coalesced counts writes dropped because a newer write of the same key
	// superseded them before delivery (only the newest is written).
	Coalesced int64
	// Reordered counts deliveries of a write older (in this direction's
	// read order, across keys and tables) than one delivered before it.
	Reordered int64
	// SuppressedByLWW counts writes not applied because To's version of the
	// key was newer (last writer wins).
	SuppressedByLWW int64
	// Deferred counts deliveries put back because To held an item the
	// replicator had not yet read from To's stream (a local write in
	// flight); they are retried after Config.PollInterval.
	Deferred int64
	// Adopted counts destination items found that were never read from
	// To's stream (written before Start with StartingPosition Latest, or
	// trimmed), taken as the current state once the stream was read past
	// them; the delivery then proceeds.
	Adopted int64
	// Errors counts failed GetItem/PutItem/DeleteItem calls (retried with
	// backoff).
	Errors int64
	// Pending is the number of writes queued or being written now; Held
	// those of them waiting because the direction is paused or a Region is
	// lost.
	Pending int
	Held    int
}

// RegionStats counts the stream reading of one Region.
type RegionStats struct {
	Name string
	// RecordsRead counts stream records read (all tables).
	RecordsRead int64
	// LocalWrites counts records of writes made in this Region (queued for
	// the other Regions); EchoesSkipped counts records of the replicator's
	// own writes into this Region, skipped so nothing loops.
	LocalWrites   int64
	EchoesSkipped int64
	// BadRecords counts records that could not be mapped to a write (logged
	// and skipped).
	BadRecords int64
	// Shards counts the shards seen; ExpiredIterators and TrimmedData the
	// ExpiredIteratorException and TrimmedDataAccessException answers
	// (after which the shard iterator is acquired again); ReadErrors other
	// failed Streams calls (retried with backoff).
	Shards           int
	ExpiredIterators int64
	TrimmedData      int64
	ReadErrors       int64
}

// Stats is a snapshot of the replicator's counters: totals over the
// directions, then each direction and each Region sorted by name.
type Stats struct {
	Replicated        int64
	DeletesReplicated int64
	Coalesced         int64
	Reordered         int64
	SuppressedByLWW   int64
	Held              int
	Pending           int
	Directions        []DirectionStats
	Regions           []RegionStats
}

func (s *Stats) add(d DirectionStats) {
	s.Replicated += d.Replicated
	s.DeletesReplicated += d.DeletesReplicated
	s.Coalesced += d.Coalesced
	s.Reordered += d.Reordered
	s.SuppressedByLWW += d.SuppressedByLWW
	s.Held += d.Held
	s.Pending += d.Pending
}

// Direction returns the counters of from → to (zero if there is none).
func (s Stats) Direction(from, to string) DirectionStats {
	for _, d := range s.Directions {
		if d.From == from && d.To == to {
			return d
		}
	}
	return DirectionStats{}
}

// Region returns the counters of Region name (zero if there is none).
func (s Stats) Region(name string) RegionStats {
	for _, r := range s.Regions {
		if r.Name == name {
			return r
		}
	}
	return RegionStats{}
}
