package chaos

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

func letter(consumer, agg string, seq int64, reason, errText string) deadLetterSeen {
	body := fmt.Sprintf(`{"version":"0","id":"x","detail-type":"OrderPaid","source":"orders","detail":{"aggregate_type":"order","aggregate_id":%q,"sequence":%d}}`, agg, seq)
	return deadLetterSeen{consumer: consumer, letter: sqsconsumer.DeadLetter{MessageID: fmt.Sprintf("m-%s-%d", agg, seq), Body: body, Reason: reason, Error: errText}}
}

func gapText(consumer, agg string, last, seq int64) string {
	return (&dedup.GapError{Consumer: consumer, AggregateType: "order", AggregateID: agg, Last: last, Sequence: seq, EventID: "e"}).Error()
}

func TestParseMissingReadsGapErrorText(t *testing.T) {
	from, to, err := parseMissing(gapText("ledger", "o-1", 1, 5))
	if err != nil || from != 2 || to != 4 {
		t.Fatalf("parseMissing = %d..%d, %v; want 2..4", from, to, err)
	}
	if _, _, err := parseMissing("consumer outage"); err == nil {
		t.Fatal("parseMissing accepted text without a range")
	}
}

func TestTraceGaps(t *testing.T) {
	letters := []deadLetterSeen{
		// o-1: sequence 2 reached the notifier's DLQ (outage), 3 waited for it.
		letter("notifier", "o-1", 2, sqsconsumer.ReasonMaxReceiveCount, ""),
		letter("notifier", "o-1", 3, ReasonSequenceGap, gapText("notifier", "o-1", 1, 3)),
		// o-5 on the ledger: 4 waited for 2..3 and 2 is parked.
		letter("ledger", "o-5", 4, ReasonSequenceGap, gapText("ledger", "o-5", 1, 4)),
		// a chain: o-2's 3 waited for 2, itself a sequence_gap dead letter
		// waiting for 1, which the consumer rejected.
		letter("ledger", "o-2", 1, "unsupported_version", "v9"),
		letter("ledger", "o-2", 2, ReasonSequenceGap, gapText("ledger", "o-2", 0, 2)),
		letter("ledger", "o-2", 3, ReasonSequenceGap, gapText("ledger", "o-2", 1, 3)),
		// o-3: waits for 2, which only the *notifier* dead-lettered, and
		// the ledger never applied: it waited for an event that never came.
		letter("notifier", "o-3", 2, sqsconsumer.ReasonMaxReceiveCount, ""),
		letter("ledger", "o-3", 3, ReasonSequenceGap, gapText("ledger", "o-3", 1, 3)),
		// o-6: waits for 2, neither parked nor dead-lettered, which the
		// ledger applied later: the gap closed after its bound.
		letter("ledger", "o-6", 3, ReasonSequenceGap, gapText("ledger", "o-6", 1, 3)),
		// o-4: the error text lost its range.
		letter("ledger", "o-4", 2, ReasonSequenceGap, "truncated"),
	}
	parked := map[string][]int64{"o-5": {2}, "o-3": {1}}
	last := func(consumer, typ, agg string) (int64, error) {
		if consumer == "ledger" && typ == "order" && agg == "o-6" {
			return 3, nil
		}
		return 1, nil
	}
	got := traceGaps(letters, parked, last)
	if got.gaps != 7 || got.toParked != 1 || got.toDeadLettered != 3 || got.closedLate != 1 || len(got.problems) != 2 {
		t.Fatalf("traceGaps = %+v; want 7 gaps: 1 to parked, 3 to dead letters, 1 closed late, 2 problems", got)
	}
	if !strings.Contains(got.problems[0], "o-3 sequence 3 waiting for sequence 2") {
		t.Errorf("problem %q does not name o-3's missing sequence", got.problems[0])
	}
}
