package chaos

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"

	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// deadLetterSeen is one message the audit found on a consumer DLQ.
type deadLetterSeen struct {
	consumer string
	letter   sqsconsumer.DeadLetter
}

// eventKey names one event of an aggregate as a consumer saw it.
type eventKey struct {
	consumer, aggregateID string
	sequence              int64
}

// missingRangeRE reads the missing range from a sequence_gap dead letter's
// error text, which dedup.GapError.Error writes as "... waits for sequences
// FROM..TO of TYPE ID".
var missingRangeRE = regexp.MustCompile(`waits for sequences (\d+)\.\.(\d+) of `)

// parseMissing returns the inclusive missing range named in a sequence_gap
// dead letter's error text.
func parseMissing(errText string) (from, to int64, err error) {
	m := missingRangeRE.FindStringSubmatch(errText)
	if m == nil {
		return 0, 0, fmt.Errorf("no missing range in %q", errText)
	}
	from, _ = strconv.ParseInt(m[1], 10, 64)
	to, _ = strconv.ParseInt(m[2], 10, 64)
	return from, to, nil
}

// letterEvent reads the aggregate id and sequence of the envelope in a
// consumer queue message body (the EventBridge event JSON).
func letterEvent(body string) (aggregateID string, sequence int64, err error) {
	var ev struct {
		Detail struct {
			AggregateID string `json:"aggregate_id"`
			Sequence    int64  `json:"sequence"`
		} `json:"detail"`
	}
	if err := json.Unmarshal([]byte(body), &ev); err != nil {
		return "", 0, fmt.Errorf("dead letter body: %w", err)
	}
	if ev.Detail.AggregateID == "" || ev.Detail.Sequence < 1 {
		return "", 0, fmt.Errorf("dead letter body names no aggregate id and sequence")
	}
	return ev.Detail.AggregateID, ev.Detail.Sequence, nil
}

// gapTrace counts how each sequence_gap dead letter traces to the event it
// waited for.
type gapTrace struct {
	// gaps counts the sequence_gap dead letters.
	gaps int
	// toParked counts gaps whose first missing event was parked by the
	// relay; toDeadLettered those whose first missing event reached the
	// same consumer's DLQ (for any reason, a sequence_gap of its own
	// included: a chain).
	toParked, toDeadLettered int
	// problems name each gap that traces to neither.
	problems []string
}

// traceGaps traces every sequence_gap dead letter in letters to the event it
// waited for: the first missing sequence of its aggregate must have been
// parked (parked: aggregate id → sequences) or dead-lettered by the same
// consumer. A gap that traces to neither means an ordered consumer gave up
// on an event that was on its way: a hold bound too short, or a lost event.
func traceGaps(letters []deadLetterSeen, parked map[string][]int64) gapTrace {
	var t gapTrace
	deadLettered := map[eventKey]bool{}
	for _, l := range letters {
		agg, seq, err := letterEvent(l.letter.Body)
		if err == nil {
			deadLettered[eventKey{l.consumer, agg, seq}] = true
		}
	}
	isParked := func(agg string, seq int64) bool {
		for _, s := range parked[agg] {
			if s == seq {
				return true
			}
		}
		return false
	}
	for _, l := range letters {
		if l.letter.Reason != ReasonSequenceGap {
			continue
		}
		t.gaps++
		agg, seq, err := letterEvent(l.letter.Body)
		if err != nil {
			t.problems = append(t.problems, fmt.Sprintf("sequence_gap dead letter %s on %s: %v", l.letter.MessageID, l.consumer, err))
			continue
		}
		from, _, err := parseMissing(l.letter.Error)
		if err != nil {
			t.problems = append(t.problems, fmt.Sprintf("sequence_gap dead letter %s on %s: %v", l.letter.MessageID, l.consumer, err))
			continue
		}
		switch {
		case isParked(agg, from):
			t.toParked++
		case deadLettered[eventKey{l.consumer, agg, from}]:
			t.toDeadLettered++
		default:
			t.problems = append(t.problems, fmt.Sprintf("sequence_gap: %s dead-lettered %s sequence %d waiting for sequence %d, which was neither parked nor dead-lettered",
				l.consumer, agg, seq, from))
		}
	}
	return t
}
