package relay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestRedriveLegacyRecord: a record parked before the table switched to
// multi-Region mode has no origin Region. In multi-Region mode only the
// legacy owner (RedriveAsLegacyOwner) redrives it, unstamped, back to its
// single-Region shard, which the legacy owner's reconciler sweeps; another
// Region is refused (ErrNotOrigin). RedriveAsLegacyOwner changes nothing
// for stamped records.
func TestRedriveLegacyRecord(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	ctx := context.Background()
	table := ddbtest.Name("outbox")
	in := outbox.CreateTableInput(table)
	in.StreamSpecification = nil
	env.CreateTable(t, in)
	for _, tc := range []struct {
		name      string
		origin    string // "" = unstamped (written before the switch)
		opts      []relay.RedriveOption
		wantErr   error // nil: redriven
		wantShard func(eventID string) string
	}{
		{name: "unstamped, not the legacy owner", opts: []relay.RedriveOption{relay.RedriveInRegion(regionB)}, wantErr: relay.ErrNotOrigin},
		{name: "unstamped, legacy owner", opts: []relay.RedriveOption{relay.RedriveInRegion(regionA), relay.RedriveAsLegacyOwner()},
			wantShard: func(id string) string { return outbox.PendingShard(id, 4) }},
		{name: "stamped by B, legacy owner A", origin: regionB, opts: []relay.RedriveOption{relay.RedriveInRegion(regionA), relay.RedriveAsLegacyOwner()}, wantErr: relay.ErrNotOrigin},
		{name: "stamped by A, legacy owner A", origin: regionA, opts: []relay.RedriveOption{relay.RedriveInRegion(regionA), relay.RedriveAsLegacyOwner()},
			wantShard: func(id string) string { return outbox.PendingShardIn(regionA, id, 4) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := envelope(t, "legacy-"+tc.name, 1, 10)
			rec := outbox.NewRecordIn(tc.origin, e, 0, 4)
			rec.Status, rec.PendingShard = outbox.StatusParked, ""
			if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: rec.Item()}); err != nil {
				t.Fatal(err)
			}
			err := relay.Redrive(ctx, env.DDB, table, 4, rec.Key, time.Now(), tc.opts...)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("redrive: %v, want %v", err, tc.wantErr)
			}
			out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: rec.Key.AttributeValues(), ConsistentRead: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			s := func(name string) string {
				v, _ := out.Item[name].(*types.AttributeValueMemberS)
				if v == nil {
					return ""
				}
				return v.Value
			}
			if tc.wantErr != nil {
				if s(outbox.AttrStatus) != outbox.StatusParked {
					t.Errorf("refused record now %v, want PARKED", out.Item)
				}
				return
			}
			if s(outbox.AttrStatus) != outbox.StatusPending || s(outbox.AttrPendingShard) != tc.wantShard(e.EventID) || s(outbox.AttrOriginRegion) != tc.origin {
				t.Errorf("redriven record %v: want PENDING in %s, origin %q", out.Item, tc.wantShard(e.EventID), tc.origin)
			}
			if g, err := relay.RedriveGeneration(out.Item); err != nil || g != 1 {
				t.Errorf("generation %d, %v: want 1", g, err)
			}
		})
	}
	if err := relay.Redrive(ctx, env.DDB, table, 4, outbox.Key{PK: "x", SK: "y"}, time.Now(), relay.RedriveAsLegacyOwner()); err == nil {
		t.Error("RedriveAsLegacyOwner without RedriveInRegion was accepted")
	}
}
