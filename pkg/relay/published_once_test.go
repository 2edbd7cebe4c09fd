package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestMarkPublishedKeepsTheFirstPublish: a record already PUBLISHED keeps
// the bus_event_id, published_at and TTL of the publish that marked it,
// whichever path a later mark takes (UpdateItem for one mark, PartiQL
// BatchExecuteStatement for several), and the later mark counts as done.
// Against Dynoxide.
func TestMarkPublishedKeepsTheFirstPublish(t *testing.T) {
	t.Parallel()
	env, table, counter, ddb := costEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	envs := writeEnvelopes(t, ctx, env.DDB, table, "once", 3)

	cfg := testConfig().Marker
	cfg.Table = table
	cfg.Logger = quietLogger()
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg.Now = func() time.Time { return first }
	m1, err := relay.NewMarker(ddb, &fakeSQS{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mark := func(e outbox.Envelope, bus string) relay.Mark {
		return relay.Mark{Key: outbox.KeyFor(e.AggregateType, e.AggregateID, e.Sequence, 0), Envelope: e,
			Result: relay.Result{Status: relay.Published, EventID: bus}}
	}
	noErrors(t, m1.MarkAll(ctx, []relay.Mark{mark(envs[0], "first-0"), mark(envs[1], "first-1")}))
	cfg.Now = func() time.Time { return first.Add(time.Hour) }
	m2, err := relay.NewMarker(ddb, &fakeSQS{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		marks []relay.Mark
		path  string
	}{
		{"UpdateItem (one mark)", []relay.Mark{mark(envs[0], "second-0")}, "UpdateItem"},
		{"BatchExecuteStatement (several marks)", []relay.Mark{mark(envs[0], "third-0"), mark(envs[1], "third-1"), mark(envs[2], "first-2")}, "BatchExecuteStatement"},
	}
	for _, tt := range tests { // sequential: they share the table
		before := counter.Snapshot().Calls("DynamoDB", tt.path)
		noErrors(t, m2.MarkAll(ctx, tt.marks))
		if counter.Snapshot().Calls("DynamoDB", tt.path) == before {
			t.Errorf("%s: no %s call", tt.name, tt.path)
		}
		for i, want := range []string{"first-0", "first-1"} {
			item := getItem(t, ctx, env.DDB, table, envs[i])
			if got := item[outbox.AttrBusEventID].(*ddbtypes.AttributeValueMemberS).Value; got != want {
				t.Errorf("%s: record %d bus_event_id %q, want %q (a PUBLISHED record was overwritten)", tt.name, i, got, want)
			}
			if got := item[outbox.AttrPublishedAt].(*ddbtypes.AttributeValueMemberS).Value; got != first.Format(time.RFC3339Nano) {
				t.Errorf("%s: record %d published_at %q, want the first publish's", tt.name, i, got)
			}
		}
	}
	if item := getItem(t, ctx, env.DDB, table, envs[2]); item[outbox.AttrStatus].(*ddbtypes.AttributeValueMemberS).Value != outbox.StatusPublished {
		t.Errorf("pending record in the same batch not marked: %v", item)
	}
}

func getItem(t *testing.T, ctx context.Context, ddb *dynamodb.Client, table string, e outbox.Envelope) map[string]ddbtypes.AttributeValue {
	t.Helper()
	out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table),
		Key: outbox.KeyFor(e.AggregateType, e.AggregateID, e.Sequence, 0).AttributeValues(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}
