package relay_test

import (
	"context"
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

// TestRedriveGenerationHostile: the stored generation Redrive and Requeue
// read before bumping it. Absent or 0 reads 0; anything that is not a whole
// number, and the int64 maximum (whose bump, gen+1, would wrap to the
// minimum and leave a negative generation that every later read refuses),
// is an error, so nothing is written.
func TestRedriveGenerationHostile(t *testing.T) {
	t.Parallel()
	n := func(v string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{outbox.AttrRedriveGeneration: &types.AttributeValueMemberN{Value: v}}
	}
	cases := []struct {
		name string
		item map[string]types.AttributeValue
		want int64
		err  bool
	}{
		{"absent", map[string]types.AttributeValue{}, 0, false},
		{"zero", n("0"), 0, false},
		{"seven", n("7"), 7, false},
		{"one below the maximum", n("9223372036854775806"), 9223372036854775806, false},
		{"maximum: cannot be bumped", n("9223372036854775807"), 0, true},
		{"beyond int64", n("9223372036854775808"), 0, true},
		{"negative", n("-1"), 0, true},
		{"fraction", n("1.5"), 0, true},
		{"exponent", n("1e3"), 0, true},
		{"not a number", n("abc"), 0, true},
		{"a string", map[string]types.AttributeValue{outbox.AttrRedriveGeneration: &types.AttributeValueMemberS{Value: "1"}}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := relay.RedriveGeneration(c.item)
			if (err != nil) != c.err || got != c.want {
				t.Fatalf("RedriveGeneration = %d, %v; want %d, error %v", got, err, c.want, c.err)
			}
		})
	}
}

// TestRedriveStampedRecordWithoutRegion: a record stamped with an origin
// Region was written in multi-Region mode. Redriven without RedriveInRegion
// (an operator whose shell lacks OUTBOX_REGIONS) it went to the plain
// "pNN" shard, which no multi-Region reconciler sweeps, so it stayed
// PENDING for ever, written from any Region. It is refused (ErrNotOrigin)
// and left PARKED; an unstamped record is redriven as before.
func TestRedriveStampedRecordWithoutRegion(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	ctx := context.Background()
	table := ddbtest.Name("outbox")
	in := outbox.CreateTableInput(table)
	in.StreamSpecification = nil
	env.CreateTable(t, in)
	e := envelope(t, "stamped", 1, 10)
	rec := outbox.NewRecordIn(regionA, e, 0, 4)
	rec.Status, rec.PendingShard = outbox.StatusParked, ""
	if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: rec.Item()}); err != nil {
		t.Fatal(err)
	}
	err := relay.Redrive(ctx, env.DDB, table, 4, rec.Key, time.Now())
	if !errors.Is(err, relay.ErrNotOrigin) || !strings.Contains(err.Error(), regionA) {
		t.Fatalf("single-Region redrive of a record stamped %s: %v, want ErrNotOrigin naming it", regionA, err)
	}
	out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: rec.Key.AttributeValues(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := out.Item[outbox.AttrStatus].(*types.AttributeValueMemberS); st == nil || st.Value != outbox.StatusParked {
		t.Fatalf("record after the refusal: %v, want PARKED", out.Item)
	}
	if err := relay.Redrive(ctx, env.DDB, table, 4, rec.Key, time.Now(), relay.RedriveInRegion(regionA)); err != nil {
		t.Fatalf("redrive in its origin: %v", err)
	}
}
