package reconciler_test

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
)

// callRecorder wraps the real client and records every read the reconciler
// sends. It has all of *dynamodb.Client's methods (embedded), so a
// reconciler that asked for Scan or any other read, by interface or type
// assertion, is recorded here too.
type callRecorder struct {
	*dynamodb.Client
	mu      sync.Mutex
	queries []*dynamodb.QueryInput
	scans   []*dynamodb.ScanInput
}

func (c *callRecorder) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.mu.Lock()
	c.queries = append(c.queries, in)
	c.mu.Unlock()
	return c.Client.Query(ctx, in, opts...)
}

func (c *callRecorder) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c.mu.Lock()
	c.scans = append(c.scans, in)
	c.mu.Unlock()
	return c.Client.Scan(ctx, in, opts...)
}

var exprToken = regexp.MustCompile(`[#:][0-9A-Za-z_]+`)

// resolveKeyCondition substitutes names and values into a Query's key
// condition: e.g. "(pending_shard = S:03) AND (created_at_ms < N:1700000000000)".
func resolveKeyCondition(in *dynamodb.QueryInput) string {
	return exprToken.ReplaceAllStringFunc(aws.ToString(in.KeyConditionExpression), func(k string) string {
		if n, ok := in.ExpressionAttributeNames[k]; ok {
			return n
		}
		switch v := in.ExpressionAttributeValues[k].(type) {
		case *ddbtypes.AttributeValueMemberS:
			return "S:" + v.Value
		case *ddbtypes.AttributeValueMemberN:
			return "N:" + v.Value
		}
		return k
	})
}

// TestSweepIsABoundedQueryPerShard: each shard's sweep reads the pending
// index with a Query whose key condition pins the shard and bounds the
// creation time (created_at_ms < or <= the cutoff, now - ReconcileAfter),
// and no Scan is ever sent. The count and oldest-age Queries touch every
// shard too, so "every shard queried" alone would not see a sweep done by a
// Scan and a filter.
func TestSweepIsABoundedQueryPerShard(t *testing.T) {
	t.Parallel()
	f := setup(t, 4)
	var old []outbox.Envelope
	for i := range 8 {
		old = append(old, f.write(t, fmt.Sprint("old", i), time.Hour))
	}
	f.write(t, "young", 0)

	rec := &callRecorder{Client: f.env.DDB}
	now := time.Now()
	const after = 10 * time.Minute
	rep, err := f.reconciler(t, rec, io.Discard, func(c *reconciler.Config) {
		c.ReconcileAfter = after
		c.Now = func() time.Time { return now }
	}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Resent != len(old) {
		t.Fatalf("report %+v, want %d resent", rep, len(old))
	}

	if len(rec.scans) != 0 {
		t.Errorf("the reconciler sent %d Scans (first %+v): it must only Query the pending index", len(rec.scans), rec.scans[0])
	}
	cutoff := now.Add(-after).UnixMilli()
	bound := regexp.MustCompile(`\b` + regexp.QuoteMeta(outbox.AttrCreatedAt) + ` (<|<=) N:(-?[0-9]+)`)
	shardKey := regexp.MustCompile(`\b` + regexp.QuoteMeta(outbox.AttrPendingShard) + ` = S:([^) ]+)`)
	swept := map[string]bool{}
	for _, in := range rec.queries {
		if aws.ToString(in.TableName) != f.table || aws.ToString(in.IndexName) != outbox.PendingIndexName {
			t.Errorf("Query of table %s index %s, want the pending index %s of %s",
				aws.ToString(in.TableName), aws.ToString(in.IndexName), outbox.PendingIndexName, f.table)
		}
		if in.FilterExpression != nil {
			t.Errorf("Query with a filter %q: the key condition must do the selecting", aws.ToString(in.FilterExpression))
		}
		cond := resolveKeyCondition(in)
		m := bound.FindStringSubmatch(cond)
		if m == nil {
			continue // a count or oldest-age Query
		}
		if ms, _ := strconv.ParseInt(m[2], 10, 64); ms != cutoff && !(m[1] == "<=" && ms == cutoff-1) {
			t.Errorf("sweep key condition %q: bound %s %s, want %s %d (now - ReconcileAfter)", cond, m[1], m[2], "<", cutoff)
		}
		if m := shardKey.FindStringSubmatch(cond); m != nil {
			swept[m[1]] = true
		} else {
			t.Errorf("sweep key condition %q does not pin a shard", cond)
		}
	}
	for i := range f.shards {
		if !swept[outbox.ShardName(i)] {
			t.Errorf("shard %s: no sweep Query bounding %s below the cutoff; queries: %v", outbox.ShardName(i), outbox.AttrCreatedAt, resolved(rec.queries))
		}
	}
}

func resolved(ins []*dynamodb.QueryInput) []string {
	var s []string
	for _, in := range ins {
		s = append(s, resolveKeyCondition(in))
	}
	return s
}
