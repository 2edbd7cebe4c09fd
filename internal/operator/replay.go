package operator

import (
	"context"
	"fmt"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// Publisher is the publish path Replay sends through: *relay.Publisher
// (the relay's own PutEvents packing, retries and permanent-code rules).
type Publisher interface {
	Publish(ctx context.Context, envs []outbox.Envelope) []relay.Result
}

// Replay outcomes.
const (
	ReplayPublished = "replayed" // the bus accepted it again
	ReplaySkipped   = "skipped"  // not PUBLISHED, or not decodable: nothing sent
	ReplayFailed    = "failed"   // the bus refused it, or the call failed
)

// ReplayResult is what Replay did with one record.
type ReplayResult struct {
	View EventView
	// Outcome is ReplayPublished, ReplaySkipped or ReplayFailed.
	Outcome string
	// BusEventID is the EventBridge EventId of the replayed event (a new
	// one: EventBridge assigns one per accepted entry; consumers
	// deduplicate on the outbox event_id, which is the same).
	BusEventID string
	// Reason says why a record was skipped or failed.
	Reason string
}

// Replay publishes the stored envelope of every PUBLISHED view again
// directly through pub (PutEvents from the caller's principal: the local
// stack, or a role the bus policy admits; Requeue is the path on AWS), in the order given (one Publish call: the Publisher packs
// up to 10 entries per PutEvents), and leaves the records unchanged. A
// PENDING record is skipped (the relay or the reconciler publishes it), a
// PARKED one too (redrive it: its status then follows the publish), and a
// record that does not decode as an envelope. It returns one result per
// view; the error is non-nil when any replay failed.
func Replay(ctx context.Context, pub Publisher, views []EventView) ([]ReplayResult, error) {
	results := make([]ReplayResult, len(views))
	var envs []outbox.Envelope
	var idx []int
	for i, v := range views {
		results[i] = ReplayResult{View: v, Outcome: ReplaySkipped}
		if reason := replayable(v); reason != "" {
			results[i].Reason = reason
			continue
		}
		rec, _ := outbox.RecordFromItem(v.item) // replayable decoded it
		envs = append(envs, rec.Envelope)
		idx = append(idx, i)
	}
	if len(envs) == 0 {
		return results, nil
	}
	failed := 0
	for j, r := range pub.Publish(ctx, envs) {
		res := &results[idx[j]]
		if r.Status == relay.Published {
			res.Outcome, res.BusEventID = ReplayPublished, r.EventID
			continue
		}
		failed++
		res.Outcome = ReplayFailed
		res.Reason = fmt.Sprintf("%s %s: %s (%d attempts)", r.Status, r.ErrorCode, r.ErrorMessage, r.Attempts)
	}
	if failed > 0 {
		return results, fmt.Errorf("replay: %d of %d event(s) not accepted by the bus", failed, len(envs))
	}
	return results, nil
}
