package operator

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestRequeueInRegion, against Dynoxide: in multi-Region mode a published
// record is requeued only in its origin Region (relay.ErrNotOrigin
// elsewhere, the record unchanged), into its Region's pending shard with
// redrive_generation bumped; a view whose generation moved since it was
// read is refused (relay.ErrRedriveConflict). ReadStatus with a Region
// counts that Region's shards only.
func TestRequeueInRegion(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	ctx := context.Background()
	table := ddbtest.Name("outbox")
	in := outbox.CreateTableInput(table)
	in.StreamSpecification = nil
	env.CreateTable(t, in)
	const a, b = "eu-west-1", "eu-central-1"
	put := func(id, agg, origin, status string) EventView {
		e := outbox.Envelope{EventID: id, EventType: "OrderPaid", EventVersion: 1, AggregateType: "Order", AggregateID: agg,
			Sequence: 1, OccurredAt: time.Now().Add(-time.Hour).UTC(), Payload: json.RawMessage(`{"a":1}`)}
		r := outbox.NewRecord(e, 0, 4)
		r.Status = status
		item := r.Item()
		item[outbox.AttrOriginRegion] = &types.AttributeValueMemberS{Value: origin}
		if status == outbox.StatusPending {
			item[outbox.AttrPendingShard] = &types.AttributeValueMemberS{Value: outbox.PendingShardIn(origin, id, 4)}
		} else {
			delete(item, outbox.AttrPendingShard)
		}
		if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
		views, err := FindEvent(ctx, env.DDB, table, id)
		if err != nil || len(views) != 1 {
			t.Fatalf("FindEvent %s: %v %v", id, views, err)
		}
		return views[0]
	}
	get := func(v EventView) map[string]types.AttributeValue {
		out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: v.Key.AttributeValues(), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item
	}
	vb := put("e-b", "o-b", b, outbox.StatusPublished)
	if _, err := Requeue(ctx, env.DDB, table, 4, []EventView{vb}, time.Now(), RequeueInRegion(a)); !errors.Is(err, relay.ErrNotOrigin) {
		t.Fatalf("requeue of B's record in A: %v, want ErrNotOrigin", err)
	}
	if it := get(vb); attrS(it, outbox.AttrStatus) != outbox.StatusPublished {
		t.Fatalf("B's record after a refused requeue: %v", it)
	}
	res, err := Requeue(ctx, env.DDB, table, 4, []EventView{vb}, time.Now(), RequeueInRegion(b))
	if err != nil || res[0].Outcome != ReplayRequeued {
		t.Fatalf("requeue in B: %+v %v", res, err)
	}
	if it := get(vb); attrS(it, outbox.AttrStatus) != outbox.StatusPending || !strings.HasPrefix(attrS(it, outbox.AttrPendingShard), b+"#p") ||
		attrN(it, outbox.AttrRedriveGeneration) != "1" {
		t.Fatalf("requeued record %v", it)
	}
	// The view is now stale (generation 0 read, 1 stored): even once the
	// record is PUBLISHED again, the stale view is refused.
	if _, err := env.DDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: vb.Key.AttributeValues(),
		UpdateExpression: aws.String("SET #s = :p REMOVE pending_shard"), ExpressionAttributeNames: map[string]string{"#s": outbox.AttrStatus},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: outbox.StatusPublished}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Requeue(ctx, env.DDB, table, 4, []EventView{vb}, time.Now(), RequeueInRegion(b)); !errors.Is(err, relay.ErrRedriveConflict) {
		t.Fatalf("requeue from a stale view: %v, want ErrRedriveConflict", err)
	}
	if it := get(vb); attrS(it, outbox.AttrStatus) != outbox.StatusPublished || attrN(it, outbox.AttrRedriveGeneration) != "1" {
		t.Fatalf("record after a conflict: %v", it)
	}

	// Status per Region: each counts its own shards.
	put("e-a1", "o-a1", a, outbox.StatusPending)
	put("e-a2", "o-a2", a, outbox.StatusPending)
	put("e-b2", "o-b2", b, outbox.StatusPending)
	for _, tc := range []struct {
		region string
		want   int
	}{{a, 2}, {b, 1}, {"", 0}} {
		st, err := ReadStatus(ctx, env.DDB, nil, StatusOptions{Table: table, Shards: 4, Region: tc.region})
		if err != nil || st.Pending != tc.want {
			t.Errorf("status of %q: %d pending, %v; want %d", tc.region, st.Pending, err, tc.want)
		}
	}
	if _, err := ReadStatus(ctx, env.DDB, nil, StatusOptions{Table: table, Shards: 4, Region: "eu-west"}); err == nil {
		t.Error("a misspelled Region was accepted")
	}
	if _, err := ReadStatus(ctx, env.DDB, nil, StatusOptions{Table: table, Shards: 4, LegacyOwner: true}); err == nil || !strings.Contains(err.Error(), "LegacyOwner") {
		t.Errorf("LegacyOwner without a Region: %v, want an error naming it", err)
	}
}
