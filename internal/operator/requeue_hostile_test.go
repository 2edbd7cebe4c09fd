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

// TestRequeueHostile, against Dynoxide: requeues a careless operator or a
// corrupt record may ask for. A record stamped with an origin Region,
// requeued without RequeueInRegion (a shell without OUTBOX_REGIONS), went
// to the plain "pNN" shard that no multi-Region reconciler sweeps and
// stayed PENDING for ever: it is refused (relay.ErrNotOrigin). A stored
// generation at the int64 maximum cannot be bumped: refused, nothing
// written. An unstamped record in single-Region mode is requeued as before.
func TestRequeueHostile(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	ctx := context.Background()
	table := ddbtest.Name("outbox")
	in := outbox.CreateTableInput(table)
	in.StreamSpecification = nil
	env.CreateTable(t, in)
	const a = "eu-west-1"
	put := func(id, origin, gen string) EventView {
		e := outbox.Envelope{EventID: id, EventType: "OrderPaid", EventVersion: 1, AggregateType: "Order", AggregateID: id,
			Sequence: 1, OccurredAt: time.Now().Add(-time.Hour).UTC(), Payload: json.RawMessage(`{"a":1}`)}
		r := outbox.NewRecordIn(origin, e, 0, 4)
		r.Status, r.PendingShard = outbox.StatusPublished, ""
		item := r.Item()
		if gen != "" {
			item[outbox.AttrRedriveGeneration] = &types.AttributeValueMemberN{Value: gen}
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
	status := func(v EventView) (string, string) {
		out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: v.Key.AttributeValues(), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return attrS(out.Item, outbox.AttrStatus), attrN(out.Item, outbox.AttrRedriveGeneration)
	}
	for _, c := range []struct {
		name, id, origin, gen, region string
		refused                       bool
		want                          error // with refused: the error it wraps, nil for any
		wantGen                       string
	}{
		{"stamped, no Region", "stamped", a, "", "", true, relay.ErrNotOrigin, ""},
		{"generation at the int64 maximum", "maxgen", a, "9223372036854775807", a, true, nil, "9223372036854775807"},
		{"unstamped, single-Region", "plain", "", "", "", false, nil, ""},
		{"stamped, in its origin", "origin", a, "", a, false, nil, "1"},
	} {
		v := put(c.id, c.origin, c.gen)
		var opts []RequeueOption
		if c.region != "" {
			opts = append(opts, RequeueInRegion(c.region))
		}
		res, err := Requeue(ctx, env.DDB, table, 4, []EventView{v}, time.Now(), opts...)
		st, gen := status(v)
		switch {
		case c.refused && (err == nil || c.want != nil && (!errors.Is(err, c.want) || !strings.Contains(err.Error(), c.origin)) ||
			st != outbox.StatusPublished || gen != c.wantGen):
			t.Errorf("%s: %v, record %s at generation %q: want refused (%v) naming %s, record unchanged", c.name, err, st, gen, c.want, c.origin)
		case !c.refused && (err != nil || res[0].Outcome != ReplayRequeued || st != outbox.StatusPending || gen != c.wantGen):
			t.Errorf("%s: %+v %v, record %s at generation %q: want requeued at %q", c.name, res, err, st, gen, c.wantGen)
		}
	}
}

// TestAggregateEventsReservedPartitions: an aggregate whose type and id
// spell a multi-Region item's partition ("home" / "Wallet#w-1",
// "takeover" / "eu-west-1#mark", "heartbeat" / "eu-west-1") lists only its
// own records, never the home item, takeover marks or heartbeat stored
// beside them.
func TestAggregateEventsReservedPartitions(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	ctx := context.Background()
	table := ddbtest.Name("outbox")
	in := outbox.CreateTableInput(table)
	in.StreamSpecification = nil
	env.CreateTable(t, in)
	others := []outbox.Key{
		outbox.HomeKey("Wallet", "w-1"),
		{PK: "takeover#eu-west-1#mark", SK: "eu-central-1#e-1"},
		{PK: "heartbeat#eu-west-1", SK: "heartbeat"},
	}
	for _, k := range others {
		if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: k.AttributeValues()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, agg := range [][2]string{{"home", "Wallet#w-1"}, {"takeover", "eu-west-1#mark"}, {"heartbeat", "eu-west-1"}} {
		e := outbox.Envelope{EventID: agg[0] + "-e", EventType: "Happened", EventVersion: 1, AggregateType: agg[0], AggregateID: agg[1],
			Sequence: 1, OccurredAt: time.Now().UTC(), Payload: json.RawMessage(`{}`)}
		if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: outbox.NewRecord(e, 0, 4).Item()}); err != nil {
			t.Fatal(err)
		}
		views, err := AggregateEvents(ctx, env.DDB, table, agg[0], agg[1], 0)
		if err != nil || len(views) != 1 || views[0].EventID != e.EventID {
			t.Errorf("AggregateEvents(%s, %s) = %d views %v: want its one record", agg[0], agg[1], len(views), err)
		}
	}
}
