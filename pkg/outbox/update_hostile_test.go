package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

func sAttr(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func nAttr(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

func oneEvent(_ context.Context, _ outbox.Current) (outbox.Change, error) {
	return outbox.Change{Events: []outbox.Event{{Type: "Touched", Version: 1, Payload: map[string]any{}}}}, nil
}

// TestUpdateHostileInputsWriteNothing: inputs and changes Update must refuse
// with a clear error, writing neither the aggregate nor the outbox.
func TestUpdateHostileInputsWriteNothing(t *testing.T) {
	env, w, wallets, ob := walletTables(t, outbox.WriterConfig{})
	ctx := context.Background()
	// w-1 exists at version 1.
	if _, err := w.Update(ctx, walletInput(wallets, "w-1"), deposit(10)); err != nil {
		t.Fatal(err)
	}
	events := func(n int, payload any) []outbox.Event {
		evs := make([]outbox.Event, n)
		for i := range evs {
			evs[i] = outbox.Event{Type: "AmountDeposited", Version: 1, Payload: payload}
		}
		return evs
	}
	for _, tc := range []struct {
		name   string
		in     func(outbox.UpdateInput) outbox.UpdateInput
		change outbox.ChangeFunc
		want   error
	}{
		{"item with another key", nil, func(context.Context, outbox.Current) (outbox.Change, error) {
			return outbox.Change{Item: map[string]types.AttributeValue{"id": sAttr("w-2"), "balance": nAttr("1")}, Events: events(1, map[string]any{})}, nil
		}, outbox.ErrInvalidUpdate},
		{"item key of another type", nil, func(context.Context, outbox.Current) (outbox.Change, error) {
			return outbox.Change{Item: map[string]types.AttributeValue{"id": nAttr("1"), "balance": nAttr("1")}, Events: events(1, map[string]any{})}, nil
		}, outbox.ErrInvalidUpdate},
		{"event version 0", nil, func(context.Context, outbox.Current) (outbox.Change, error) {
			return outbox.Change{Events: []outbox.Event{{Type: "X", Version: 0, Payload: map[string]any{}}}}, nil
		}, outbox.ErrInvalidEnvelope},
		{"payload not an object", nil, func(context.Context, outbox.Current) (outbox.Change, error) {
			return outbox.Change{Events: events(1, []int{1})}, nil
		}, outbox.ErrInvalidEnvelope},
		{"payload over the entry limit", nil, func(context.Context, outbox.Current) (outbox.Change, error) {
			return outbox.Change{Events: events(1, map[string]string{"x": strings.Repeat("a", 300*1024)})}, nil
		}, outbox.ErrEntryTooLarge},
		{"100 events and the aggregate", nil, func(context.Context, outbox.Current) (outbox.Change, error) {
			return outbox.Change{Events: events(100, map[string]any{})}, nil
		}, outbox.ErrTransactionTooLarge},
		{"write on the aggregate's item (Update)", nil, func(ctx context.Context, cur outbox.Current) (outbox.Change, error) {
			ch, _ := deposit(1)(ctx, cur)
			ch.Writes = []types.TransactWriteItem{{Update: &types.Update{TableName: aws.String(wallets),
				Key: map[string]types.AttributeValue{"id": sAttr("w-1")}, UpdateExpression: aws.String("SET flag = :t"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":t": sAttr("x")}}}}
			return ch, nil
		}, outbox.ErrDuplicateAction},
		{"write on the aggregate's item (Put)", nil, func(ctx context.Context, cur outbox.Current) (outbox.Change, error) {
			return outbox.Change{Writes: []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String(wallets),
				Item: map[string]types.AttributeValue{"id": sAttr("w-1"), "version": nAttr("7")}}}}, Events: events(1, map[string]any{})}, nil
		}, outbox.ErrDuplicateAction},
		{"write on the aggregate's item (ConditionCheck)", nil, func(ctx context.Context, cur outbox.Current) (outbox.Change, error) {
			return outbox.Change{Writes: []types.TransactWriteItem{{ConditionCheck: &types.ConditionCheck{TableName: aws.String(wallets),
				Key: map[string]types.AttributeValue{"id": sAttr("w-1")}, ConditionExpression: aws.String("attribute_exists(id)")}}}, Events: events(1, map[string]any{})}, nil
		}, outbox.ErrDuplicateAction},
		{"write on an outbox record", nil, func(ctx context.Context, cur outbox.Current) (outbox.Change, error) {
			return outbox.Change{Writes: []types.TransactWriteItem{{Delete: &types.Delete{TableName: aws.String(ob),
				Key: map[string]types.AttributeValue{"pk": sAttr("Wallet#w-1"), "sk": sAttr(fmt.Sprintf("%020d#%03d", 2, 0))}}}}, Events: events(1, map[string]any{})}, nil
		}, outbox.ErrDuplicateAction},
		{"empty key", func(in outbox.UpdateInput) outbox.UpdateInput { in.Key = map[string]types.AttributeValue{}; return in }, oneEvent, outbox.ErrInvalidUpdate},
		{"version attribute is the key", func(in outbox.UpdateInput) outbox.UpdateInput { in.VersionAttribute = "id"; return in }, oneEvent, outbox.ErrInvalidUpdate},
		{"no aggregate type", func(in outbox.UpdateInput) outbox.UpdateInput { in.AggregateType = ""; return in }, oneEvent, outbox.ErrInvalidUpdate},
		{"bracket in the version attribute", func(in outbox.UpdateInput) outbox.UpdateInput { in.VersionAttribute = "v[0]"; return in }, oneEvent, outbox.ErrInvalidUpdate},
		{"no table", func(in outbox.UpdateInput) outbox.UpdateInput { in.Table = ""; return in }, oneEvent, outbox.ErrInvalidUpdate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := walletInput(wallets, "w-1")
			if tc.in != nil {
				in = tc.in(in)
			}
			_, err := w.Update(ctx, in, tc.change)
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if err == nil {
				t.Fatal("no error")
			}
			t.Logf("err: %v", err)
			if v, b := wallet(t, env, wallets, "w-1"); v != 1 || b != 10 {
				t.Fatalf("wallet version %d balance %d, want 1 and 10", v, b)
			}
			if got := fmt.Sprint(sequences(t, env, ob, "Wallet#w-1")); got != "[1]" {
				t.Fatalf("outbox sequences %s, want [1]", got)
			}
		})
	}
}

// TestUpdateKeyWithExtraAttribute: a Key naming an attribute that is not
// part of the table's key is refused (DynamoDB's ValidationException on
// the read), nothing written.
func TestUpdateKeyWithExtraAttribute(t *testing.T) {
	env, w, wallets, ob := walletTables(t, outbox.WriterConfig{})
	in := walletInput(wallets, "w-1")
	in.Key["balance"] = nAttr("1")
	_, err := w.Update(context.Background(), in, deposit(1))
	if err == nil {
		t.Fatal("no error")
	}
	t.Logf("err: %v", err)
	if v, _ := wallet(t, env, wallets, "w-1"); v != -1 {
		t.Fatalf("wallet written: version %d", v)
	}
	if got := sequences(t, env, ob, "Wallet#w-1"); len(got) != 0 {
		t.Fatalf("outbox %v", got)
	}
}

// TestUpdateCallersVersionIsOverwritten: a Change.Item carrying the version
// attribute (any type, any number) gets Update's version, not the caller's.
func TestUpdateCallersVersionIsOverwritten(t *testing.T) {
	env, w, wallets, ob := walletTables(t, outbox.WriterConfig{})
	ctx := context.Background()
	for i, v := range []types.AttributeValue{nAttr("42"), sAttr("x"), nAttr("0")} {
		res, err := w.Update(ctx, walletInput(wallets, "w-1"), func(context.Context, outbox.Current) (outbox.Change, error) {
			return outbox.Change{Item: map[string]types.AttributeValue{"balance": nAttr("1"), "version": v},
				Events: []outbox.Event{{Type: "X", Version: 1, Payload: map[string]any{}}}}, nil
		})
		if err != nil || res.Version != int64(i+1) {
			t.Fatalf("update %d: %+v %v", i, res, err)
		}
	}
	if v, _ := wallet(t, env, wallets, "w-1"); v != 3 {
		t.Fatalf("version %d, want 3", v)
	}
	if got := fmt.Sprint(sequences(t, env, ob, "Wallet#w-1")); got != "[1 2 3]" {
		t.Fatalf("outbox sequences %s", got)
	}
}

// TestUpdateBadStoredVersions: a stored version that is not a whole,
// non-negative number is refused before the change runs.
func TestUpdateBadStoredVersions(t *testing.T) {
	env, w, wallets, ob := walletTables(t, outbox.WriterConfig{})
	ctx := context.Background()
	for i, v := range []types.AttributeValue{sAttr("1"), nAttr("-1"), nAttr("1.5"), nAttr("99999999999999999999"), &types.AttributeValueMemberNULL{Value: true}} {
		id := fmt.Sprintf("w-%d", i)
		if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(wallets), Item: map[string]types.AttributeValue{"id": sAttr(id), "version": v, "balance": nAttr("0")}}); err != nil {
			t.Fatal(err)
		}
		ran := false
		_, err := w.Update(ctx, walletInput(wallets, id), func(ctx context.Context, cur outbox.Current) (outbox.Change, error) {
			ran = true
			return deposit(1)(ctx, cur)
		})
		if !errors.Is(err, outbox.ErrInvalidUpdate) || ran {
			t.Errorf("version %#v: err %v, change ran %v", v, err, ran)
		}
		if got := sequences(t, env, ob, "Wallet#"+id); len(got) != 0 {
			t.Errorf("version %#v: outbox %v", v, got)
		}
	}
}

// TestUpdateVersionAtSafeIntegerLimit: an aggregate at version 2^53-1 cannot
// take another event (its sequence would not survive JSON consumers).
func TestUpdateVersionAtSafeIntegerLimit(t *testing.T) {
	env, w, wallets, ob := walletTables(t, outbox.WriterConfig{})
	ctx := context.Background()
	if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(wallets), Item: map[string]types.AttributeValue{"id": sAttr("w-1"), "version": nAttr("9007199254740991")}}); err != nil {
		t.Fatal(err)
	}
	_, err := w.Update(ctx, walletInput(wallets, "w-1"), oneEvent)
	if !errors.Is(err, outbox.ErrUnsafeNumber) {
		t.Fatalf("err %v", err)
	}
	if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(wallets), Item: map[string]types.AttributeValue{"id": sAttr("w-2"), "version": nAttr("9223372036854775807")}}); err != nil {
		t.Fatal(err)
	}
	// Stored beyond MaxSafeInteger (here MaxInt64, where version+1
	// overflows): not a version this library wrote.
	_, err = w.Update(ctx, walletInput(wallets, "w-2"), oneEvent)
	if !errors.Is(err, outbox.ErrInvalidUpdate) {
		t.Fatalf("MaxInt64: %v", err)
	}
	for _, id := range []string{"Wallet#w-1", "Wallet#w-2"} {
		if got := sequences(t, env, ob, id); len(got) != 0 {
			t.Errorf("outbox %v", got)
		}
	}
}

// TestUpdateCancelledContext: a context cancelled before the update or
// during its retry wait ends it with the context's error, nothing written by
// the cancelled attempt.
func TestUpdateCancelledContext(t *testing.T) {
	env, w, wallets, ob := walletTables(t, outbox.WriterConfig{UpdateMaxAttempts: 5})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.Update(ctx, walletInput(wallets, "w-1"), deposit(1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before: %v", err)
	}
	// Cancelled while racing: the change moves the version under itself
	// on its first run (a conflict), and cancels the context.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	runs := 0
	_, err := w.Update(ctx, walletInput(wallets, "w-1"), func(c context.Context, cur outbox.Current) (outbox.Change, error) {
		runs++
		if runs == 1 {
			if _, err := w.Update(context.Background(), walletInput(wallets, "w-1"), deposit(5)); err != nil {
				return outbox.Change{}, err
			}
			cancel()
		}
		return deposit(1)(c, cur)
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled mid-retry: %v (runs %d)", err, runs)
	}
	if v, b := wallet(t, env, wallets, "w-1"); v != 1 || b != 5 {
		t.Fatalf("wallet version %d balance %d, want 1 and 5", v, b)
	}
	if got := fmt.Sprint(sequences(t, env, ob, "Wallet#w-1")); got != "[1]" {
		t.Fatalf("outbox %s", got)
	}
}

// TestUpdateChangePanics: a change that panics panics out of Update (it is
// the caller's goroutine), and nothing is written.
func TestUpdateChangePanics(t *testing.T) {
	env, w, wallets, ob := walletTables(t, outbox.WriterConfig{})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("no panic")
			}
		}()
		_, _ = w.Update(context.Background(), walletInput(wallets, "w-1"), func(context.Context, outbox.Current) (outbox.Change, error) {
			panic("boom")
		})
	}()
	if v, _ := wallet(t, env, wallets, "w-1"); v != -1 {
		t.Fatalf("wallet written: %d", v)
	}
	if got := sequences(t, env, ob, "Wallet#w-1"); len(got) != 0 {
		t.Fatalf("outbox %v", got)
	}
}

// TestUpdateConcurrentCreates: creates of one new aggregate racing: every
// one succeeds (retries) with distinct versions, sequences 1..n.
func TestUpdateConcurrentCreates(t *testing.T) {
	env, w, wallets, ob := walletTables(t, outbox.WriterConfig{UpdateMaxAttempts: 50})
	const n = 5
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := w.Update(context.Background(), walletInput(wallets, "w-new"), func(ctx context.Context, cur outbox.Current) (outbox.Change, error) {
				ch, err := deposit(1)(ctx, cur)
				if !cur.Exists() {
					// a create: a fresh item
					ch.Item["created"] = sAttr("yes")
				}
				return ch, err
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if v, b := wallet(t, env, wallets, "w-new"); v != n || b != n {
		t.Fatalf("version %d balance %d, want %d", v, b, n)
	}
	if got, want := fmt.Sprint(sequences(t, env, ob, "Wallet#w-new")), "[1 2 3 4 5]"; got != want {
		t.Fatalf("outbox %s", got)
	}
}

// TestUpdateVersionAttributeWithDot: a version attribute whose name holds a
// dot is a top-level attribute (DynamoDB names may hold dots), read and
// conditioned as such.
func TestUpdateVersionAttributeWithDot(t *testing.T) {
	env, w, wallets, ob := walletTables(t, outbox.WriterConfig{UpdateMaxAttempts: 2})
	ctx := context.Background()
	in := walletInput(wallets, "w-1")
	in.VersionAttribute = "meta.version"
	for i := 1; i <= 3; i++ {
		change := deposit(1)
		if i == 2 {
			change = oneEvent // Item nil: an Update action
		}
		res, err := w.Update(ctx, in, change)
		if err != nil || res.Version != int64(i) {
			t.Fatalf("update %d: %+v %v", i, res, err)
		}
	}
	out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(wallets), Key: in.Key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := out.Item["meta.version"].(*types.AttributeValueMemberN); !ok || v.Value != "3" {
		t.Fatalf("item %v", out.Item)
	}
	if got := fmt.Sprint(sequences(t, env, ob, "Wallet#w-1")); got != "[1 2 3]" {
		t.Fatalf("outbox %s", got)
	}
}
