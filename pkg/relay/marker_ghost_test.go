package relay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// countingDDB counts the marker's UpdateItem and BatchExecuteStatement
// calls on a real client.
type countingDDB struct {
	*dynamodb.Client
	updates, batches atomic.Int64
}

func (c *countingDDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.updates.Add(1)
	return c.Client.UpdateItem(ctx, in, opts...)
}

func (c *countingDDB) BatchExecuteStatement(ctx context.Context, in *dynamodb.BatchExecuteStatementInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchExecuteStatementOutput, error) {
	c.batches.Add(1)
	return c.Client.BatchExecuteStatement(ctx, in, opts...)
}

// TestMarkMissingRecordCreatesNothing runs against Dynoxide: marking
// published or parking a record that does not exist (deleted by TTL, or a
// stale copy read from the pending index) is "nothing to do" (nil), and
// leaves no item behind. An UpdateItem without an existence condition would
// create a ghost PUBLISHED or PARKED record holding only the key and the
// marking attributes; a PARKED one never expires.
func TestMarkMissingRecordCreatesNothing(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	table := ddbtest.Name("outbox")
	env.CreateTable(t, outbox.CreateTableInput(table))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cfg := testConfig().Marker
	cfg.Table, cfg.Logger = table, quietLogger()
	ddb := &countingDDB{Client: env.DDB}
	m, err := relay.NewMarker(ddb, &fakeSQS{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !m.BatchStatements() {
		t.Fatal("the marker does not batch against *dynamodb.Client: MarkAll's batch path would go untested")
	}
	missing := func(id string) (outbox.Key, outbox.Envelope) {
		e := envelope(t, id, 1, 10)
		return outbox.KeyFor(e.AggregateType, e.AggregateID, e.Sequence, 0), e
	}
	published := func(id string) relay.Mark {
		k, e := missing(id)
		return relay.Mark{Key: k, Envelope: e, Result: relay.Result{Status: relay.Published, EventID: "bus-" + id}}
	}
	parked := func(id string) relay.Mark {
		k, e := missing(id)
		return relay.Mark{Key: k, Envelope: e, Result: relay.Result{Status: relay.PermanentFailure, ErrorCode: "InvalidArgument", ErrorMessage: "bad"}}
	}

	tests := []struct {
		name                 string
		marks                []relay.Mark
		run                  func([]relay.Mark) []error
		wantUpdates, wantBES int64 // UpdateItem and BatchExecuteStatement calls
	}{
		{"MarkPublished", []relay.Mark{published("mp")}, func(ms []relay.Mark) []error {
			return []error{m.MarkPublished(ctx, ms[0].Key, ms[0].Envelope, ms[0].Result.EventID)}
		}, 1, 0},
		{"Park", []relay.Mark{parked("pk")}, func(ms []relay.Mark) []error {
			return []error{m.Park(ctx, ms[0])}
		}, 1, 0},
		{"MarkAll batch and park", func() []relay.Mark {
			var ms []relay.Mark
			for i := range 3 {
				ms = append(ms, published(fmt.Sprint("batch", i)))
			}
			return append(ms, parked("batch-park"))
		}(), func(ms []relay.Mark) []error { return m.MarkAll(ctx, ms) }, 1, 1},
	}
	for _, tt := range tests {
		// Not parallel: they share the marker, whose batching a failed
		// call could turn off for the cases after it.
		t.Run(tt.name, func(t *testing.T) {
			ddb.updates.Store(0)
			ddb.batches.Store(0)
			for i, err := range tt.run(tt.marks) {
				if err != nil {
					t.Errorf("mark %d (%s): %v, want nil (nothing to do)", i, tt.marks[i].Key.PK, err)
				}
			}
			for _, mk := range tt.marks {
				out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: mk.Key.AttributeValues(), ConsistentRead: aws.Bool(true)})
				if err != nil {
					t.Fatal(err)
				}
				if len(out.Item) != 0 {
					t.Errorf("%s/%s: marking a missing record created %v", mk.Key.PK, mk.Key.SK, out.Item)
				}
			}
			if u, b := ddb.updates.Load(), ddb.batches.Load(); u != tt.wantUpdates || b != tt.wantBES {
				t.Errorf("%d UpdateItem and %d BatchExecuteStatement calls, want %d and %d: not the path meant to be tested", u, b, tt.wantUpdates, tt.wantBES)
			}
		})
	}
	if m.Parked() != 0 {
		t.Errorf("Parked() = %d: a missing record was counted as parked", m.Parked())
	}
	out, err := env.DDB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if out.Count != 0 {
		t.Fatalf("outbox table holds %d items after marking only missing records, want 0: %v", out.Count, out.Items)
	}
}
