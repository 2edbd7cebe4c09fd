package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
)

// TestTakeoverCommands, against Dynoxide: takeover declares (the item in
// the table, the runbook and heartbeat ages printed), a second takeover is
// refused, takeovers lists it, release ends it; misspelled Regions, a
// survivor equal to the failed Region and a survivor other than the
// client's Region are usage errors that write nothing.
func TestTakeoverCommands(t *testing.T) {
	for _, v := range append([]string{"AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "OUTBOX_REGIONS", "OUTBOX_TABLE_NAME"}, endpointVars...) {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	env := ddbtest.New(t)
	table := ddbtest.Name("ctl-takeover")
	env.CreateTable(t, outbox.CreateTableInput(table))
	const a, b = "eu-west-1", "eu-central-1"
	ctx := context.Background()
	// A's heartbeat, 3 minutes old, as replicated into B.
	hb := reconciler.HeartbeatKey(a).AttributeValues()
	hb[reconciler.AttrHeartbeatAtMs] = &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(-3*time.Minute).UnixMilli(), 10)}
	if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: hb}); err != nil {
		t.Fatal(err)
	}
	runCtl := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"-endpoint", env.Endpoint}, args...), &out, &errOut)
		return out.String() + errOut.String(), err
	}

	ab := a + "," + b
	for _, tc := range []struct {
		name  string
		args  []string
		user  string // $USER
		wants []string
	}{
		{"misspelled failed", []string{"-region", b, "takeover", "-table", table, "-regions", ab, "-failed", "eu-west"}, "alice", []string{"-failed"}},
		{"misspelled survivor", []string{"-region", b, "takeover", "-table", table, "-regions", ab, "-failed", a, "-survivor", "eu-central"}, "alice", []string{"-survivor"}},
		{"itself", []string{"-region", a, "takeover", "-table", table, "-regions", ab, "-failed", a}, "alice", []string{"cannot take over itself"}},
		{"not the client's Region", []string{"-region", a, "takeover", "-table", table, "-regions", ab, "-failed", "us-east-1", "-survivor", b}, "alice", []string{"not one of the Regions " + ab}},
		{"survivor not the client's Region", []string{"-region", a, "takeover", "-table", table, "-regions", ab, "-failed", b, "-survivor", "us-east-1"}, "alice", []string{"run with -region us-east-1"}},
		{"no failed", []string{"-region", b, "takeover", "-table", table, "-regions", ab}, "alice", []string{"-failed REGION is required"}},
		{"negative margin", []string{"-region", b, "takeover", "-table", table, "-regions", ab, "-failed", a, "-lag-margin", "-1m"}, "alice", []string{"negative"}},
		{"absurd margin", []string{"-region", b, "takeover", "-table", table, "-regions", ab, "-failed", a, "-lag-margin", "48h"}, "alice", []string{"above"}},
		{"release misspelled", []string{"-region", b, "release", "-table", table, "-regions", ab, "-failed", "euwest1"}, "alice", []string{"-failed"}},
		// Newcomer trial: Regions that are well-shaped but not the table's.
		{"failed misspelled, well-shaped", []string{"-region", b, "takeover", "-table", table, "-regions", ab, "-failed", "eu-wset-1"}, "alice", []string{"-failed eu-wset-1 is not one of the Regions " + ab}},
		{"failed not in -regions", []string{"-region", b, "takeover", "-table", table, "-regions", ab, "-failed", "us-east-1"}, "alice", []string{"-failed us-east-1 is not one of the Regions " + ab}},
		{"client Region misspelled", []string{"-region", "eu-centrl-1", "takeover", "-table", table, "-regions", ab, "-failed", a}, "alice", []string{"survivor eu-centrl-1", "not one of the Regions " + ab}},
		{"release survivor not in -regions", []string{"-region", "eu-centrl-1", "release", "-table", table, "-regions", ab, "-failed", a}, "alice", []string{"survivor eu-centrl-1", "not one of the Regions " + ab}},
		{"no -regions", []string{"-region", b, "takeover", "-table", table, "-failed", a}, "alice", []string{"-regions A,B (or $OUTBOX_REGIONS) is required"}},
		{"release without -regions", []string{"-region", b, "release", "-table", table, "-failed", a}, "alice", []string{"-regions A,B (or $OUTBOX_REGIONS) is required"}},
		{"one Region", []string{"-region", b, "takeover", "-table", table, "-regions", b, "-failed", a}, "alice", []string{"names one Region"}},
		{"takeovers misspelled -regions", []string{"-region", b, "takeovers", "-table", table, "-regions", a + ",eu-centrl-1"}, "alice", []string{"not one of -regions " + a + ",eu-centrl-1"}},
		{"takeovers one Region", []string{"-region", b, "takeovers", "-table", table, "-regions", a}, "alice", []string{"names one Region"}},
		{"no -by, no $USER", []string{"-region", b, "takeover", "-table", table, "-regions", ab, "-failed", a}, "", []string{"-by is required", `-by "$USER/INC-123"`}},
		{"blank -by", []string{"-region", b, "takeover", "-table", table, "-regions", ab, "-failed", a, "-by", "  \t"}, "alice", []string{"-by is required"}},
		{"release blank -by", []string{"-region", b, "release", "-table", table, "-regions", ab, "-failed", a, "-by", " "}, "alice", []string{"-by is required"}},
	} {
		t.Setenv("USER", tc.user)
		out, err := runCtl(tc.args...)
		if !errors.Is(err, errUsage) {
			t.Errorf("%s: err %v (output %q), want a usage error", tc.name, err, out)
			continue
		}
		for _, w := range tc.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: err %v, want it to mention %q", tc.name, err, w)
			}
		}
	}
	t.Setenv("USER", "alice")
	t.Setenv("OUTBOX_REGIONS", "")
	if tks, err := reconciler.ListTakeovers(ctx, env.DDB, table); err != nil || len(tks) != 0 {
		t.Fatalf("refused commands wrote takeovers: %+v %v", tks, err)
	}

	// -survivor defaults to the client's Region.
	out, err := runCtl("-region", b, "takeover", "-table", table, "-failed", a, "-lag-margin", "2m", "-by", "alice", "-regions", a+","+b)
	if err != nil {
		t.Fatalf("takeover: %v\n%s", err, out)
	}
	mustContain(t, "takeover", out, "takeover of "+a+" by "+b+" declared (lag margin 2m0s, by alice)",
		a+"        3m0s ago", b+"     none", "release -table "+table+" -failed "+a+" -survivor "+b, "never writes "+a+"'s records")
	tks, err := reconciler.ListTakeovers(ctx, env.DDB, table)
	if err != nil || len(tks) != 1 || !tks[0].Active() || tks[0].Failed != a || tks[0].Survivor != b || tks[0].LagMargin != 2*time.Minute {
		t.Fatalf("takeovers %+v %v", tks, err)
	}
	// $OUTBOX_REGIONS stands for -regions.
	t.Setenv("OUTBOX_REGIONS", ab)
	_, err = runCtl("-region", b, "takeover", "-table", table, "-failed", a)
	if !errors.Is(err, reconciler.ErrTakeoverActive) {
		t.Fatalf("second takeover: %v, want ErrTakeoverActive", err)
	}
	for _, w := range []string{"outboxctl -region " + b + " takeovers -table " + table, "outboxctl -region " + b + " release -table " + table + " -failed " + a} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("second takeover: %v, want it to say how to see and end the takeover: %q", err, w)
		}
	}
	t.Setenv("OUTBOX_REGIONS", "")
	out, err = runCtl("takeovers", "-region", b, "-table", table)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "takeovers", out, "ACTIVE\t"+a+" -> "+b+"\tlag margin 2m0s", "1 takeover(s), 1 active", a+"        3m0s ago")

	out, err = runCtl("-region", b, "release", "-table", table, "-regions", ab, "-failed", a, "-survivor", b, "-by", "bob")
	if err != nil {
		t.Fatalf("release: %v\n%s", err, out)
	}
	mustContain(t, "release", out, "takeover of "+a+" by "+b+" released")
	if _, err := runCtl("-region", b, "release", "-table", table, "-regions", ab, "-failed", a); !errors.Is(err, reconciler.ErrNoTakeover) {
		t.Fatalf("second release: %v, want ErrNoTakeover", err)
	}
	out, err = runCtl("takeovers", "-region", b, "-table", table)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "takeovers after release", out, "RELEASED\t"+a+" -> "+b, "by bob", "1 takeover(s), 0 active")
}

// TestMultiRegionFlags: with -regions, redrive acts only on records of the
// client's Region (a record of another Region is refused and unchanged);
// a record without an origin Region (parked before the switch) is redriven
// only in the legacy owner, the list's first Region, and stays unstamped
// in its single-Region shard, and the legacy owner's status counts those
// shards too; a client Region outside the list is a usage error.
func TestMultiRegionFlags(t *testing.T) {
	w := newWorld(t)
	const a, b = "eu-west-1", "eu-central-1"
	ctx := context.Background()
	key := outbox.KeyFor("Order", "o-1", 3, 0) // PARKED, no origin: not this Region's
	var out, errOut bytes.Buffer
	err := run(ctx, []string{"-endpoint", w.endpoint, "-region", b, "redrive", "-table", w.table, "-shards", "4", "-regions", a + "," + b, "-pk", key.PK, "-sk", key.SK}, &out, &errOut)
	if err == nil || !strings.Contains(out.String(), "legacy owner") {
		t.Fatalf("redrive of a record without origin outside the legacy owner: %v\n%s", err, out.String())
	}
	got, gerr := w.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(w.table), Key: key.AttributeValues(), ConsistentRead: aws.Bool(true)})
	if gerr != nil {
		t.Fatal(gerr)
	}
	if s, _ := got.Item[outbox.AttrStatus].(*types.AttributeValueMemberS); s == nil || s.Value != outbox.StatusParked {
		t.Fatalf("record after a refused redrive: %v", got.Item)
	}
	err = run(ctx, []string{"-endpoint", w.endpoint, "-region", "us-east-1", "status", "-table", w.table, "-regions", a + "," + b}, &out, &errOut)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "not one of -regions") {
		t.Fatalf("status from a Region outside -regions: %v", err)
	}
	out.Reset()
	if err := run(ctx, []string{"-endpoint", w.endpoint, "-region", a, "status", "-table", w.table, "-shards", "4", "-window", "0", "-regions", a + "," + b}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	// A is the legacy owner: its status also counts the world's records
	// from before the switch (unstamped, pending in pNN); B's does not.
	mustContain(t, "status in A", out.String(), "pending           2", "p00=2")
	out.Reset()
	if err := run(ctx, []string{"-endpoint", w.endpoint, "-region", b, "status", "-table", w.table, "-shards", "4", "-window", "0", "-regions", a + "," + b}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "status in B", out.String(), "pending           0")
	out.Reset()
	if err := run(ctx, []string{"-endpoint", w.endpoint, "-region", a, "redrive", "-table", w.table, "-shards", "4", "-regions", a + "," + b, "-pk", key.PK, "-sk", key.SK}, &out, &errOut); err != nil {
		t.Fatalf("redrive in the legacy owner %s: %v\n%s", a, err, out.String())
	}
	got, gerr = w.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(w.table), Key: key.AttributeValues(), ConsistentRead: aws.Bool(true)})
	if gerr != nil {
		t.Fatal(gerr)
	}
	shard, _ := got.Item[outbox.AttrPendingShard].(*types.AttributeValueMemberS)
	if s, _ := got.Item[outbox.AttrStatus].(*types.AttributeValueMemberS); s == nil || s.Value != outbox.StatusPending || shard == nil || strings.Contains(shard.Value, "#") || got.Item[outbox.AttrOriginRegion] != nil {
		t.Fatalf("record redriven by the legacy owner: %v, want PENDING, unstamped, in a pNN shard", got.Item)
	}
	out.Reset()
	if err := run(ctx, []string{"-endpoint", w.endpoint, "-region", a, "status", "-table", w.table, "-shards", "4", "-window", "0", "-regions", a + "," + b}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "status in A after the redrive", out.String(), "pending           3")
}

// TestTakeoverHelp: takeover -h and release -h say the survivor must be
// the client's Region, and their examples carry -regions and -by, as the
// runbook does.
func TestTakeoverHelp(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"takeover", "release"} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{name, "-h"}, &out, &errOut); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s -h: %v", name, err)
		}
		mustContain(t, name+" -h", out.String(), "must equal the client's Region (-region or AWS_REGION)",
			"-regions eu-west-1,eu-central-1 -failed eu-west-1", `-by "$USER/INC-123"`, "required by takeover and release")
	}
}
