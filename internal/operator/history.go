package operator

import (
	"context"
	"errors"
	"fmt"
)

// AggregateHistory is an aggregate's published history as the outbox
// table holds it, and what it no longer holds.
type AggregateHistory struct {
	// Events are the aggregate's outbox records in sequence order.
	Events []EventView
	// Note, when set, says which sequences the table no longer has (or
	// never had) and where they are.
	Note string
}

// History returns an aggregate's events from the outbox table: one
// consistent Query of the aggregate's partition (its events sorted by
// sequence; cost: the aggregate's items / 4 KB × 0.5 read units), with
// sequence, type, occurred-at time, event id, status and publish time.
//
// Why the outbox table and not the archive: an EventBridge archive has no
// API to read events (only StartReplay, to a bus's rules), while the
// outbox table is already the per-aggregate event log, keyed by aggregate
// and sequence. Published records expire after PublishedRetention (7
// days by default): for a longer audit trail, raise it (storage: about
// 1 KB per event); what expired is still in the archive, for a replay to a
// consumer that records it. Note says when the lowest sequence found is
// above 1, or a sequence is missing in between. It returns the Query's
// error; an aggregate with no record is not an error (Events empty, Note
// set).
func History(ctx context.Context, ddb DynamoDBAPI, table, aggregateType, aggregateID string) (AggregateHistory, error) {
	views, err := AggregateEvents(ctx, ddb, table, aggregateType, aggregateID, 0)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return AggregateHistory{}, err
	}
	h := AggregateHistory{Events: views}
	expired := "published records expire from the outbox table after PublishedRetention (7 days by default); the archive keeps them for a replay (outboxctl backfill)"
	switch {
	case len(views) == 0:
		h.Note = "no record of this aggregate in " + table + ": a wrong id or type, or " + expired
	case views[0].Sequence > 1:
		h.Note = fmt.Sprintf("sequences 1..%d are no longer in %s: %s", views[0].Sequence-1, table, expired)
	}
	for i := 1; i < len(views); i++ {
		if views[i].Sequence != views[i-1].Sequence+1 {
			h.Note = fmt.Sprintf("sequences %d..%d are missing from %s (expired early, or deleted)", views[i-1].Sequence+1, views[i].Sequence-1, table)
		}
	}
	return h, nil
}
