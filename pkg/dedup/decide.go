package dedup

import (
	"fmt"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Ordered apply as one decision (promise I4; docs/ORDERING.md "The
// decision table").
//
// An ordered Apply first sends its transaction on the fast path: marker,
// effects, and the gate conditioned on last_sequence = sequence-1 and on
// no successor waiting. When DynamoDB cancels it, classify reads the
// cancellation reasons; when the reasons say "the marker exists" or "the
// gate did not hold", the ordering item is read (strongly consistent) and
// decide turns what was read against the arrival into one action. Every
// path of an ordered Apply — a live delivery, a duplicate, a replay in any
// order, a drain of the buffer, a starting point — goes through these two
// functions; a new edge case is a new row with a test, not a new branch.

// txVerdict is what the cancellation reasons of an ordered Apply
// transaction say, strongest first.
type txVerdict int

const (
	// verdictMarker: the marker's condition failed: the event was applied
	// before (read the gate: it may have to adopt it).
	verdictMarker txVerdict = iota + 1
	// verdictGate: the gate's condition failed. The gate decides, whatever
	// the effects' conditions said: an effect conditioned on its
	// predecessor's effect fails together with the gate while the
	// predecessor is committing, and that failure is not the effect's own
	// answer.
	verdictGate
	// verdictPermanent: ValidationError or ItemCollectionSizeLimitExceeded
	// (outside the marker and the gate): repeating cannot fix it.
	verdictPermanent
	// verdictEffect: an effect's condition failed while the gate held
	// (its reason None): the effect's own, authoritative answer.
	verdictEffect
	// verdictRetry: conflicts, throttling or unnamed reasons.
	verdictRetry
	// verdictFatal: a code repeating cannot fix and nobody decides on
	// (outbox.TxError.Retryable is false).
	verdictFatal
)

// classify reads a cancelled ordered Apply transaction whose gate is
// action gate. CancellationReasons hold one entry per action, in request
// order, with a null code for an action that did not fail (DynamoDB API
// Reference, CancellationReason): so the gate's None means its condition
// held.
func classify(te *outbox.TxError, gate int) txVerdict {
	switch {
	case te.ConditionFailed(MarkerIndex):
		return verdictMarker
	case te.ConditionFailed(gate):
		return verdictGate
	case te.Invalid() || te.CollectionFull():
		return verdictPermanent
	case effectConditionFailed(te, gate):
		return verdictEffect
	case te.Retryable():
		return verdictRetry
	}
	return verdictFatal
}

// position is where an arrival's sequence stands against the gate's last
// applied sequence.
type position int

const (
	behind position = iota // sequence <= last: the gate is past it
	next                   // sequence == last+1: its turn
	ahead                  // sequence > last+1: its predecessors are missing
)

func (p position) String() string { return [...]string{"behind", "next", "ahead"}[p] }

func positionOf(seq, last int64) position {
	switch {
	case seq <= last:
		return behind
	case seq == last+1:
		return next
	}
	return ahead
}

// observation is what an ordered Apply knows when it decides: whether the
// event was applied before (its marker exists, or its buffer item was
// stored as applied), where it stands against the gate, and whether
// events of the aggregate wait in the buffer (the gate's buffered set is
// not empty: the fast path's attribute_not_exists(buffered) fails).
type observation struct {
	applied bool
	pos     position
	waiting bool
}

func (o observation) String() string {
	return fmt.Sprintf("applied=%v position=%s waiting=%v", o.applied, o.pos, o.waiting)
}

// action is what an ordered Apply does next.
type action int

const (
	// actDuplicate: acknowledge; nothing is written.
	actDuplicate action = iota + 1
	// actAdopt: the event was applied (unordered, before a restore, or by
	// an earlier delivery whose gate update was lost to a starting point):
	// the gate takes it — last_sequence = sequence, its buffer item
	// removed if it has one — without applying it again.
	actAdopt
	// actApply: send the transaction again with the gate conditioned only
	// on last_sequence = sequence-1 (successors wait; its own buffer item,
	// if any, is deleted in the same transaction); the successors are
	// drained after it commits.
	actApply
	// actRetry: the ordering item moved between the transaction and the
	// read (a race, like a conflict): send the transaction again as it
	// was, bounded by MaxAttempts.
	actRetry
	// actBuffer: store the event in the resequencer buffer until its
	// predecessors are applied; without a Resequencer, or past its
	// limits, refuse it with a *GapError (held in its queue).
	actBuffer
	// actBufferApplied: store the event in the buffer as applied, so the
	// gate adopts it in turn (never applied again, never dropped).
	actBufferApplied
)

var actionNames = map[action]string{actDuplicate: "duplicate", actAdopt: "adopt", actApply: "apply", actRetry: "retry",
	actBuffer: "buffer", actBufferApplied: "buffer-applied"}

func (a action) String() string { return actionNames[a] }

// decisionRow is one row of the ordered-apply decision table. waiting is
// matched only when set (nil: any).
type decisionRow struct {
	applied bool
	pos     position
	waiting *bool
	act     action
	why     string
}

var yes, no = true, false

// decisions is the ordered-apply decision table: the state read (the
// event applied or not, its position against the gate, events waiting)
// against the arrival, giving the action. It is exhaustive: every
// observation matches exactly one row (TestDecisionTableIsExhaustive).
var decisions = []decisionRow{
	{applied: true, pos: behind, act: actDuplicate,
		why: "applied, and the gate is past it"},
	{applied: true, pos: next, act: actAdopt,
		why: "applied while the gate was not keeping count (unordered, replayed history, a starting point): the gate takes it without applying it again"},
	{applied: true, pos: ahead, act: actBufferApplied,
		why: "applied, arriving ahead of the gate (a replay in another order): kept and adopted in turn, so the gate closes over any order"},
	{applied: false, pos: behind, act: actDuplicate,
		why: "the gate is past it: applied before its marker expired, or before the consumer's starting point"},
	{applied: false, pos: next, waiting: &yes, act: actApply,
		why: "its turn, with successors waiting in the buffer: apply it past the buffer condition, then drain them"},
	{applied: false, pos: next, waiting: &no, act: actRetry,
		why: "its turn, nothing waiting: the gate moved after the transaction read it (its predecessor committed meanwhile); its effects' conditions are judged again"},
	{applied: false, pos: ahead, act: actBuffer,
		why: "its predecessors are missing: it waits in the buffer (or in its queue)"},
}

// decide returns the action of the one row matching o, and an error when
// no row matches (unreachable: TestDecisionTableIsExhaustive).
func decide(o observation) (action, string, error) {
	for _, r := range decisions {
		if r.applied == o.applied && r.pos == o.pos && (r.waiting == nil || *r.waiting == o.waiting) {
			return r.act, r.why, nil
		}
	}
	return 0, "", fmt.Errorf("dedup: no ordered-apply decision for %s", o)
}

// observe builds the observation of an arrival of sequence seq from the
// gate state read.
func observe(seq int64, applied bool, st GateState) observation {
	return observation{applied: applied, pos: positionOf(seq, st.Last), waiting: len(st.Buffered) > 0}
}
