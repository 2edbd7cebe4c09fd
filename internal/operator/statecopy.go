package operator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// StateCopyAPI is the DynamoDB subset CopyConsumerState calls, with the
// SDK's exact signatures; *dynamodb.Client satisfies it.
type StateCopyAPI interface {
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	PutItem(ctx context.Context, params *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

// StateCopy is what CopyConsumerState found and did, by kind of item.
type StateCopy struct {
	// Markers, Gates and Buffered count the items copied: dedup markers,
	// ordering items ("<consumer>#SEQ#…") and buffered events
	// ("<consumer>#BUF#…").
	Markers, Gates, Buffered int
	// Expired counts markers left behind because their TTL had passed
	// (expires_at before now: DynamoDB deletes them within days anyway).
	Expired int
	// Kept counts items the target already had (never overwritten: the
	// consumer may already have written newer state there).
	Kept int
}

func (c StateCopy) String() string {
	return fmt.Sprintf("markers=%d gates=%d buffered=%d expired_markers_left=%d kept_in_target=%d", c.Markers, c.Gates, c.Buffered, c.Expired, c.Kept)
}

// CopyConsumerState copies consumer's dedup state — its markers
// ("<consumer>#<event_id>"), ordering items and buffered events — from the
// table that held it (the shared dedup table of versions before each
// consumer kept its state in its own table) into to, the consumer's own
// table. Each item is written with attribute_not_exists(pk): an item the
// target already holds is kept (Kept), never overwritten. Markers whose
// TTL has passed are left behind (Expired). With dryRun nothing is
// written; the counts say what would be. Run it while the consumer is
// stopped (its event source mapping disabled), before it starts on the
// new table: an ordered consumer that starts without its ordering items
// holds every aggregate's next event as early (docs/ORDERING.md).
//
// It reads from with a consistent Scan filtered on the key prefix (an
// operator tool: the whole table is read). It returns the counts so far
// and an error naming the failed call, or one for an empty consumer name
// or a name holding '#'.
func CopyConsumerState(ctx context.Context, ddb StateCopyAPI, from, to, consumer string, now time.Time, dryRun bool) (StateCopy, error) {
	var c StateCopy
	switch {
	case consumer == "" || strings.ContainsRune(consumer, '#'):
		return c, fmt.Errorf("operator: consumer %q must be a consumer name without '#'", consumer)
	case from == "" || to == "" || from == to:
		return c, fmt.Errorf("operator: copy the state of %s from %q to %q: two different tables are needed", consumer, from, to)
	}
	prefix := consumer + "#"
	f, err := expression.NewBuilder().WithFilter(expression.Name(dedup.AttrPK).BeginsWith(prefix)).Build()
	if err != nil {
		return c, err
	}
	put, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(dedup.AttrPK))).Build()
	if err != nil {
		return c, err
	}
	in := &dynamodb.ScanInput{TableName: aws.String(from), ConsistentRead: aws.Bool(true), FilterExpression: f.Filter(),
		ExpressionAttributeNames: f.Names(), ExpressionAttributeValues: f.Values()}
	for {
		page, err := ddb.Scan(ctx, in)
		if err != nil {
			return c, fmt.Errorf("operator: scan %s for %s's state: %w", from, consumer, err)
		}
		for _, it := range page.Items {
			pk := attrS(it, dedup.AttrPK)
			kind := &c.Markers
			switch {
			case strings.HasPrefix(pk, consumer+dedup.SequenceInfix):
				kind = &c.Gates
			case strings.HasPrefix(pk, consumer+dedup.BufferInfix):
				kind = &c.Buffered
			case expired(it, now):
				c.Expired++
				continue
			}
			if dryRun {
				*kind++
				continue
			}
			_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(to), Item: it, ConditionExpression: put.Condition(),
				ExpressionAttributeNames: put.Names()})
			var ccf *types.ConditionalCheckFailedException
			switch {
			case errors.As(err, &ccf):
				c.Kept++
			case err != nil:
				return c, fmt.Errorf("operator: copy %s into %s: %w", pk, to, err)
			default:
				*kind++
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			return c, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// expired reports whether a marker's TTL (dedup.TTLAttribute, epoch
// seconds) has passed.
func expired(it map[string]types.AttributeValue, now time.Time) bool {
	n, ok := it[dedup.TTLAttribute].(*types.AttributeValueMemberN)
	if !ok {
		return false
	}
	s, err := strconv.ParseInt(n.Value, 10, 64)
	return err == nil && s < now.Unix()
}
