package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// walletTables creates a wallet table keyed by "id" (not pk/sk) and an
// outbox table, and returns a Writer on them.
func walletTables(t *testing.T, cfg outbox.WriterConfig) (*ddbtest.Env, *outbox.Writer, string, string) {
	t.Helper()
	env := ddbtest.New(t)
	wallets, ob := ddbtest.Name("wallets"), ddbtest.Name("outbox")
	env.CreateTable(t, &dynamodb.CreateTableInput{
		TableName:            aws.String(wallets),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	env.CreateTable(t, outbox.CreateTableInput(ob))
	cfg.Table, cfg.Source = ob, "com.example.wallet"
	return env, newWriter(t, env.DDB, cfg), wallets, ob
}

func walletInput(table, id string) outbox.UpdateInput {
	return outbox.UpdateInput{AggregateType: "Wallet", AggregateID: id, Table: table,
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}}
}

// deposit adds amount to the wallet's balance and records AmountDeposited.
func deposit(amount int) outbox.ChangeFunc {
	return func(_ context.Context, cur outbox.Current) (outbox.Change, error) {
		balance := 0
		if v, ok := cur.Item["balance"].(*types.AttributeValueMemberN); ok {
			balance, _ = strconv.Atoi(v.Value)
		}
		return outbox.Change{
			Item:   map[string]types.AttributeValue{"balance": &types.AttributeValueMemberN{Value: strconv.Itoa(balance + amount)}},
			Events: []outbox.Event{{Type: "AmountDeposited", Version: 1, Payload: map[string]int{"amount": amount}}},
		}, nil
	}
}

// sequences returns the outbox records' sequences of one aggregate, sorted,
// and the wallet's version and balance.
func sequences(t *testing.T, env *ddbtest.Env, ob, aggregate string) []int64 {
	t.Helper()
	out, err := env.DDB.Query(context.Background(), &dynamodb.QueryInput{
		TableName: aws.String(ob), KeyConditionExpression: aws.String("pk = :pk"), ConsistentRead: aws.Bool(true),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: aggregate}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, it := range out.Items {
		r, err := outbox.RecordFromItem(it)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, r.Envelope.Sequence)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs
}

func wallet(t *testing.T, env *ddbtest.Env, table, id string) (version, balance int) {
	t.Helper()
	out, err := env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item == nil {
		return -1, 0
	}
	version, _ = strconv.Atoi(out.Item["version"].(*types.AttributeValueMemberN).Value)
	balance, _ = strconv.Atoi(out.Item["balance"].(*types.AttributeValueMemberN).Value)
	return version, balance
}

// TestUpdateCreatesAndUpdatesWithGapFreeSequences: a create (version 0 → 1)
// and an update of the existing aggregate with two events (1 → 3) are the
// same path; the outbox holds sequences 1, 2, 3 and the item version 3.
func TestUpdateCreatesAndUpdatesWithGapFreeSequences(t *testing.T) {
	env, w, wallets, ob := walletTables(t, outbox.WriterConfig{})
	ctx := context.Background()
	res, err := w.Update(ctx, walletInput(wallets, "w-1"), deposit(10))
	if err != nil || res.Version != 1 || res.Attempts != 1 || res.Events[0].Sequence != 1 {
		t.Fatalf("create: %+v %v", res, err)
	}
	res, err = w.Update(ctx, walletInput(wallets, "w-1"), func(_ context.Context, cur outbox.Current) (outbox.Change, error) {
		if !cur.Exists() || cur.Version != 1 {
			return outbox.Change{}, fmt.Errorf("read %+v, want version 1", cur)
		}
		return outbox.Change{Events: []outbox.Event{
			{Type: "WalletFrozen", Version: 1, Payload: map[string]any{}},
			{Type: "WalletUnfrozen", Version: 1, Payload: map[string]any{}},
		}}, nil // Item nil: the item stays, its version moves
	})
	if err != nil || res.Version != 3 || res.Events[0].Sequence != 2 || res.Events[1].Sequence != 3 {
		t.Fatalf("update: %+v %v", res, err)
	}
	if v, b := wallet(t, env, wallets, "w-1"); v != 3 || b != 10 {
		t.Fatalf("wallet version %d balance %d, want 3 and 10", v, b)
	}
	if got := fmt.Sprint(sequences(t, env, ob, "Wallet#w-1")); got != "[1 2 3]" {
		t.Fatalf("outbox sequences %s, want [1 2 3]", got)
	}
}

// TestUpdateConcurrentUpdaters: updaters racing on one aggregate (all read
// the same version first: a barrier holds each first change until every one
// has read) either succeed or return ErrConflict after the bound; the final
// version is the number of events written, and the outbox holds sequences
// 1..n without gap or duplicate. With one attempt, exactly one wins.
func TestUpdateConcurrentUpdaters(t *testing.T) {
	for _, tc := range []struct {
		name     string
		attempts int
	}{{"one attempt", 1}, {"retries", 30}} {
		t.Run(tc.name, func(t *testing.T) {
			env, w, wallets, ob := walletTables(t, outbox.WriterConfig{UpdateMaxAttempts: tc.attempts})
			const updaters = 6
			var barrier sync.WaitGroup
			barrier.Add(updaters)
			var ok, conflicts, calls atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, updaters)
			for i := range updaters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					first := true
					_, err := w.Update(context.Background(), walletInput(wallets, "w-1"), func(ctx context.Context, cur outbox.Current) (outbox.Change, error) {
						calls.Add(1)
						if first {
							first = false
							barrier.Done()
							barrier.Wait()
						}
						return deposit(i+1)(ctx, cur)
					})
					switch {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, outbox.ErrConflict):
						if _, isTx := outbox.AsTxError(err); !isTx {
							errs <- fmt.Errorf("ErrConflict without its *TxError: %v", err)
						}
						conflicts.Add(1)
					default:
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			n := ok.Load()
			if n+conflicts.Load() != updaters || n < 1 {
				t.Fatalf("%d succeeded, %d conflicts, of %d", n, conflicts.Load(), updaters)
			}
			if tc.attempts == 1 && (n != 1 || calls.Load() != updaters) {
				t.Fatalf("one attempt each: %d succeeded, %d changes run; want 1 and %d", n, calls.Load(), updaters)
			}
			if tc.attempts > 1 && calls.Load() <= updaters {
				t.Fatalf("%d changes run by %d racing updaters: no conflict was retried", calls.Load(), updaters)
			}
			v, _ := wallet(t, env, wallets, "w-1")
			seqs := sequences(t, env, ob, "Wallet#w-1")
			if int64(v) != n || int64(len(seqs)) != n {
				t.Fatalf("version %d, %d outbox records, %d successful updates", v, len(seqs), n)
			}
			for i, s := range seqs {
				if s != int64(i+1) {
					t.Fatalf("sequences %v: want 1..%d without gap or duplicate", seqs, n)
				}
			}
		})
	}
}

// TestUpdateChangeErrorWritesNothing: the change's own error is returned
// as it is, and neither the aggregate nor the outbox is written.
func TestUpdateChangeErrorWritesNothing(t *testing.T) {
	env, w, wallets, ob := walletTables(t, outbox.WriterConfig{})
	ctx := context.Background()
	if _, err := w.Update(ctx, walletInput(wallets, "w-1"), deposit(5)); err != nil {
		t.Fatal(err)
	}
	insufficient := errors.New("insufficient funds")
	_, err := w.Update(ctx, walletInput(wallets, "w-1"), func(context.Context, outbox.Current) (outbox.Change, error) {
		return outbox.Change{}, insufficient
	})
	if !errors.Is(err, insufficient) {
		t.Fatalf("err %v, want the change's error", err)
	}
	if v, b := wallet(t, env, wallets, "w-1"); v != 1 || b != 5 {
		t.Fatalf("wallet version %d balance %d after a failed change, want 1 and 5", v, b)
	}
	if got := fmt.Sprint(sequences(t, env, ob, "Wallet#w-1")); got != "[1]" {
		t.Fatalf("outbox sequences %s, want [1]", got)
	}
	// No event: refused before sending.
	if _, err := w.Update(ctx, walletInput(wallets, "w-1"), func(context.Context, outbox.Current) (outbox.Change, error) {
		return outbox.Change{}, nil
	}); !errors.Is(err, outbox.ErrNoEvents) {
		t.Fatalf("change without events: %v", err)
	}
}

// TestUpdateCallersConditionIsNotRetried: a condition of the caller's own
// writes that fails is the caller's answer (a *TxError on its action), run
// once, not a conflict; a version attribute that is not a number is refused.
func TestUpdateCallersConditionIsNotRetried(t *testing.T) {
	env, w, wallets, _ := walletTables(t, outbox.WriterConfig{})
	ctx := context.Background()
	calls := 0
	_, err := w.Update(ctx, walletInput(wallets, "w-1"), func(ctx context.Context, cur outbox.Current) (outbox.Change, error) {
		calls++
		ch, _ := deposit(1)(ctx, cur)
		ch.Writes = []types.TransactWriteItem{{ConditionCheck: &types.ConditionCheck{
			TableName: aws.String(wallets), ConditionExpression: aws.String("attribute_exists(id)"),
			Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "missing"}},
		}}}
		return ch, nil
	})
	te, ok := outbox.AsTxError(err)
	if !ok || !te.ConditionFailed(1) || errors.Is(err, outbox.ErrConflict) || calls != 1 {
		t.Fatalf("err %v after %d changes; want the ConditionCheck's failure, once", err, calls)
	}
	if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(wallets), Item: map[string]types.AttributeValue{
		"id": &types.AttributeValueMemberS{Value: "w-2"}, "version": &types.AttributeValueMemberS{Value: "one"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Update(ctx, walletInput(wallets, "w-2"), deposit(1)); !errors.Is(err, outbox.ErrInvalidUpdate) {
		t.Fatalf("string version: %v", err)
	}
}
