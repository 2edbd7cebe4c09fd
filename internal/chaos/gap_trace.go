package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
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

// letterEvent reads the aggregate type, id and sequence of the envelope in
// a consumer queue message body (the EventBridge event JSON).
func letterEvent(body string) (aggregateType, aggregateID string, sequence int64, err error) {
	var ev struct {
		Detail struct {
			AggregateType string `json:"aggregate_type"`
			AggregateID   string `json:"aggregate_id"`
			Sequence      int64  `json:"sequence"`
		} `json:"detail"`
	}
	if err := json.Unmarshal([]byte(body), &ev); err != nil {
		return "", "", 0, fmt.Errorf("dead letter body: %w", err)
	}
	if ev.Detail.AggregateID == "" || ev.Detail.Sequence < 1 {
		return "", "", 0, fmt.Errorf("dead letter body names no aggregate id and sequence")
	}
	return ev.Detail.AggregateType, ev.Detail.AggregateID, ev.Detail.Sequence, nil
}

// gapTrace counts how each sequence_gap dead letter traces to the event it
// waited for.
type gapTrace struct {
	// gaps counts the sequence_gap dead letters.
	gaps int
	// toParked counts gaps whose first missing event was parked by the
	// relay; toDeadLettered those whose first missing event reached the
	// same consumer's DLQ (for any reason, a sequence_gap of its own
	// included: a chain); closedLate those whose missing event was on its
	// way (neither parked nor dead-lettered) and applied by the consumer
	// after the gap was dead-lettered: the hold bound was shorter than its
	// delay (held behind its own predecessor, or late upstream).
	toParked, toDeadLettered, closedLate int
	// problems name each gap that traces to none of these: its missing
	// event never reached the consumer.
	problems []string
}

// lastApplied returns an ordered consumer's last applied sequence of an
// aggregate after the run (0 when none).
type lastApplied func(consumer, aggregateType, aggregateID string) (int64, error)

// traceGaps traces every sequence_gap dead letter in letters to the event it
// waited for, the first missing sequence of its aggregate: parked (parked:
// aggregate id → sequences), dead-lettered by the same consumer, or applied
// by that consumer after all (last). A gap that traces to none of these
// waited for an event that never came.
func traceGaps(letters []deadLetterSeen, parked map[string][]int64, last lastApplied) gapTrace {
	var t gapTrace
	deadLettered := map[eventKey]bool{}
	for _, l := range letters {
		_, agg, seq, err := letterEvent(l.letter.Body)
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
		typ, agg, seq, err := letterEvent(l.letter.Body)
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
			n, err := last(l.consumer, typ, agg)
			switch {
			case err != nil:
				t.problems = append(t.problems, fmt.Sprintf("sequence_gap: %s %s: reading its last applied sequence: %v", l.consumer, agg, err))
			case n >= from:
				t.closedLate++
			default:
				t.problems = append(t.problems, fmt.Sprintf("sequence_gap: %s dead-lettered %s sequence %d waiting for sequence %d, which was neither parked, dead-lettered nor ever applied",
					l.consumer, agg, seq, from))
			}
		}
	}
	return t
}

// stackLastApplied reads an ordered consumer's ordering item from the
// consumer's own table (dedup.SequenceKey), without injected faults.
func stackLastApplied(ctx context.Context, s *devstack.Stack) lastApplied {
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(s.Endpoint))
	return func(consumer, aggregateType, aggregateID string) (int64, error) {
		out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:      aws.String(s.StateTables[consumer]),
			Key:            map[string]types.AttributeValue{dedup.AttrPK: &types.AttributeValueMemberS{Value: dedup.SequenceKey(consumer, aggregateType, aggregateID)}},
			ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return 0, err
		}
		n, ok := out.Item[dedup.AttrLastSequence].(*types.AttributeValueMemberN)
		if !ok {
			return 0, nil
		}
		return strconv.ParseInt(n.Value, 10, 64)
	}
}

// redriveParkedPredecessors does what an operator does when an ordered
// consumer holds an aggregate's later events behind a parked one (its
// cause fixed): it lists the parked records (relay.ListParked, as
// outboxctl parked does) and redrives each one that has a later record of
// the same aggregate (relay.Redrive, as outboxctl redrive does), so the
// reconciler publishes it and the held events can follow. A parked record
// that is its aggregate's last event holds nothing back and stays parked.
// It returns every parked record's sequence by aggregate id, as found
// before the redrive (for traceGaps), and how many were redriven.
func redriveParkedPredecessors(ctx context.Context, s *devstack.Stack) (map[string][]int64, int, error) {
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(s.Endpoint)) // the operator's client: no injected faults
	table := s.Settings.OutboxTable
	recs, err := relay.ListParked(ctx, ddb, table, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("chaos: list parked: %w", err)
	}
	parked := map[string][]int64{}
	redriven := 0
	for _, pr := range recs {
		got, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: pr.Key.AttributeValues(), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, redriven, fmt.Errorf("chaos: read parked %s %s: %w", pr.Key.PK, pr.Key.SK, err)
		}
		rec, err := outbox.RecordFromItem(got.Item)
		if err != nil {
			continue // undecodable: nothing an ordered consumer could wait for
		}
		parked[rec.Envelope.AggregateID] = append(parked[rec.Envelope.AggregateID], rec.Envelope.Sequence)
		expr, err := expression.NewBuilder().WithKeyCondition(expression.Key(outbox.AttrPK).Equal(expression.Value(pr.Key.PK)).
			And(expression.Key(outbox.AttrSK).GreaterThan(expression.Value(pr.Key.SK)))).Build()
		if err != nil {
			return nil, redriven, err
		}
		later, err := ddb.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(table), KeyConditionExpression: expr.KeyCondition(),
			ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), Limit: aws.Int32(1), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, redriven, fmt.Errorf("chaos: later records of %s: %w", pr.Key.PK, err)
		}
		if len(later.Items) == 0 {
			continue
		}
		if err := relay.Redrive(ctx, ddb, table, s.Settings.PendingShards, pr.Key, time.Now(), relay.RedriveInRegion(s.Settings.Region)); err != nil {
			return nil, redriven, err
		}
		redriven++
	}
	return parked, redriven, nil
}
