package wallet_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/examples/wallet"
	"github.com/ddb-outbox/ddb-outbox/examples/wallet/statement"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt/localstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

const (
	accountsTable  = "accounts"
	statementTable = "wallet-statement"
)

// startWallet starts the wallet's outbox on a local stack (Dynoxide, the
// library's relay and reconciler, a local bus, the statement consumer's
// queue, DLQ and sweep) and returns it with the wallet's service.
//
// The reconciler's schedule is an hour, so only ReconcileNow runs it: a
// record the relay missed reaches the consumer only when the test says so.
// ReconcileAfter is 1 ms (the local stack allows it; on AWS it is at least
// 2 min).
func startWallet(t *testing.T) (*localstack.Stack, *wallet.Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := localstack.Start(ctx, localstack.Config{
		OutboxTable: "wallet-outbox",
		Tables:      []*dynamodb.CreateTableInput{wallet.AccountsTable(accountsTable)},
		Source:      "com.example.wallet",
		BusName:     "wallet-bus",
		Consumers: []localstack.Consumer{{
			Name:          statement.Name,
			Ordered:       true,
			AggregateType: wallet.AggregateType, // every event type of Account
			StateTable:    statementTable,       // created as dedup.CreateTableInput: pk + state index
			NewHandler: func(env localstack.ConsumerEnv) (sqsconsumer.EventHandler, error) {
				// The variables the consumer construct sets on AWS, read
				// as the Lambda main reads them.
				for k, v := range env.Environment() {
					t.Setenv(k, v)
				}
				cfg, err := dedup.ConsumerConfigFromEnv()
				if err != nil {
					return nil, err
				}
				return statement.NewHandler(env.DDB, cfg)
			},
		}},
		ReconcileEvery: time.Hour,
		ReconcileAfter: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)

	w, err := outbox.NewWriter(st.DDB, outbox.WriterConfig{
		Table: st.OutboxTable, Source: st.Source, PendingShards: st.PendingShards,
		Keys: []outbox.TableKeys{wallet.TableKeys(accountsTable)},
		// Many writers on one account at once (the concurrency test):
		// enough attempts for each to win a round.
		UpdateMaxAttempts: 40,
	})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := wallet.NewService(w, accountsTable)
	if err != nil {
		t.Fatal(err)
	}
	return st, svc
}

// TestWalletEndToEnd runs the wallet on its local stack:
//   - versioned writes: accounts opened, deposits and withdrawals, concurrent
//     deposits to one account with no lost update and gap-free sequences,
//     a withdrawal above the balance refused with nothing written;
//   - a record the relay misses is caught by the reconciler, and the
//     ordered consumer holds the account's later event until it arrives;
//   - an event the bus refuses is parked, the account's later event waits,
//     and once redriven the event is applied once;
//   - at the end the statement's balance and sequence equal the accounts
//     table's for every account, with one line per event, nothing on any DLQ.
func TestWalletEndToEnd(t *testing.T) {
	st, svc := startWallet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	md := outbox.Metadata{Actor: "e2e"}

	for _, id := range []string{"alice", "bob", "carol"} {
		res, err := svc.Open(ctx, id, id, "EUR", md)
		if err != nil || res.Version != 1 || res.Events[0].Sequence != 1 {
			t.Fatalf("Open(%s) = version %d, %v; want version 1, sequence 1", id, res.Version, err)
		}
	}
	if _, err := svc.Open(ctx, "alice", "alice", "EUR", md); !errors.Is(err, wallet.ErrAccountExists) {
		t.Fatalf("second Open(alice) = %v, want ErrAccountExists", err)
	}
	mustDeposit(ctx, t, svc, "bob", 500)
	mustDeposit(ctx, t, svc, "carol", 300)

	// Concurrent deposits to one account: each Update reads the version,
	// and the transaction conditioned on it lets one writer win per
	// version; the others retry on a fresh read.
	const writers, each = 6, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	versions := map[int64]bool{}
	var total, attempts int64
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				amount := int64(100*w + i + 1)
				res, err := svc.Deposit(ctx, "alice", amount, md)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				versions[res.Version] = true
				total += amount
				attempts += int64(res.Attempts)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent deposit: %v", err)
	}
	t.Logf("%d concurrent deposits took %d transactions (conflicts retried)", writers*each, attempts)
	acc, err := wallet.Get(ctx, st.DDB, accountsTable, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if acc.Balance != total || acc.Version != 1+writers*each || len(versions) != writers*each {
		t.Fatalf("alice after %d concurrent deposits: balance %d version %d, %d distinct result versions; want %d, %d, %d",
			writers*each, acc.Balance, acc.Version, len(versions), total, 1+writers*each, writers*each)
	}
	if seqs := outboxSequences(ctx, t, st, "alice"); !gapFree(seqs, acc.Version) {
		t.Fatalf("alice's outbox sequences %v, want 1..%d", seqs, acc.Version)
	}

	// The domain refuses a withdrawal above the balance; nothing is written.
	if _, err := svc.Withdraw(ctx, "bob", 501, md); !errors.Is(err, wallet.ErrInsufficientFunds) {
		t.Fatalf("Withdraw(bob, 501) = %v, want ErrInsufficientFunds", err)
	}
	if seqs := outboxSequences(ctx, t, st, "bob"); !gapFree(seqs, 2) {
		t.Fatalf("bob's outbox sequences after a refused withdrawal: %v, want 1..2", seqs)
	}
	if err := st.Drain(ctx); err != nil {
		t.Fatal(err)
	}

	// A record the relay misses (bob's withdrawal, sequence 3): nothing
	// publishes it but the reconciler, and the ordered consumer keeps bob's
	// sequence 4 in its buffer meanwhile.
	st.MissRecords(func(e outbox.Envelope) bool { return e.AggregateID == "bob" && e.Sequence == 3 })
	mustWithdraw(ctx, t, svc, "bob", 200) // sequence 3, missed
	mustDeposit(ctx, t, svc, "bob", 50)   // sequence 4
	if err := st.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if b := balance(ctx, t, st, "bob"); b.Sequence != 2 || b.Balance != 500 {
		t.Fatalf("bob's statement with sequence 3 missed: %+v, want sequence 2, balance 500", b)
	}
	if n, err := st.Pending(ctx); n != 1 || err != nil {
		t.Fatalf("Pending = %d, %v; want 1 (the missed record)", n, err)
	}
	if got := buffered(ctx, t, st, "bob"); len(got) != 1 || got[0] != 4 {
		t.Fatalf("bob's buffered sequences %v, want [4]", got)
	}
	st.MissRecords(nil)
	if err := st.ReconcileNow(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if b := balance(ctx, t, st, "bob"); b.Sequence != 4 || b.Balance != 350 {
		t.Fatalf("bob's statement after the reconciler: %+v, want sequence 4, balance 350", b)
	}

	// An event the bus refuses for good is parked (carol's withdrawal,
	// sequence 3); carol's sequence 4 waits behind it.
	if err := st.RejectDetailTypes(wallet.EventAmountWithdrawn); err != nil {
		t.Fatal(err)
	}
	mustWithdraw(ctx, t, svc, "carol", 120) // sequence 3, parked
	mustDeposit(ctx, t, svc, "carol", 20)   // sequence 4
	if err := st.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	parked, err := st.Parked(ctx)
	if err != nil || len(parked) != 1 || parked[0].EventType != wallet.EventAmountWithdrawn {
		t.Fatalf("Parked = %+v, %v; want carol's withdrawal", parked, err)
	}
	if b := balance(ctx, t, st, "carol"); b.Sequence != 2 || b.Balance != 300 {
		t.Fatalf("carol's statement with sequence 3 parked: %+v, want sequence 2, balance 300", b)
	}
	if !st.StopRejecting() {
		t.Fatal("StopRejecting: no rejection was active")
	}
	if n, err := st.RedriveParked(ctx); n != 1 || err != nil {
		t.Fatalf("RedriveParked = %d, %v; want 1", n, err)
	}
	if err := st.ReconcileNow(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Settle(ctx); err != nil {
		t.Fatal(err)
	}

	// The statement equals the accounts table, line by line.
	for _, id := range []string{"alice", "bob", "carol"} {
		acc, err := wallet.Get(ctx, st.DDB, accountsTable, id)
		if err != nil {
			t.Fatal(err)
		}
		b := balance(ctx, t, st, id)
		if b.Balance != acc.Balance || b.Sequence != acc.Version {
			t.Errorf("%s: statement balance %d at sequence %d, accounts table %d at version %d", id, b.Balance, b.Sequence, acc.Balance, acc.Version)
		}
		lines, err := statement.Lines(ctx, st.DDB, statementTable, id, b.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		var running int64
		for _, l := range lines {
			running += l.Amount
			if l.Balance != running {
				t.Errorf("%s line %d (%s %d): balance %d, running sum %d", id, l.Sequence, l.EventType, l.Amount, l.Balance, running)
			}
		}
	}
	if b := balance(ctx, t, st, "carol"); b.Balance != 200 {
		t.Errorf("carol's balance %d, want 300-120+20 = 200 (the redriven withdrawal applied once)", b.Balance)
	}
	for name, q := range st.Consumers {
		if n := q.DLQ.Len(); n != 0 {
			t.Errorf("consumer %s's DLQ holds %d messages, want 0", name, n)
		}
	}
	for name, q := range st.RuleDLQs {
		if n := q.Len(); n != 0 {
			t.Errorf("rule DLQ of %s holds %d messages, want 0", name, n)
		}
	}
}

func mustDeposit(ctx context.Context, t *testing.T, svc *wallet.Service, id string, amount int64) {
	t.Helper()
	if _, err := svc.Deposit(ctx, id, amount, outbox.Metadata{}); err != nil {
		t.Fatalf("Deposit(%s, %d): %v", id, amount, err)
	}
}

func mustWithdraw(ctx context.Context, t *testing.T, svc *wallet.Service, id string, amount int64) {
	t.Helper()
	if _, err := svc.Withdraw(ctx, id, amount, outbox.Metadata{}); err != nil {
		t.Fatalf("Withdraw(%s, %d): %v", id, amount, err)
	}
}

func balance(ctx context.Context, t *testing.T, st *localstack.Stack, id string) statement.Balance {
	t.Helper()
	b, ok, err := statement.GetBalance(ctx, st.DDB, statementTable, id)
	if err != nil || !ok {
		t.Fatalf("statement balance of %s: ok %v, %v", id, ok, err)
	}
	return b
}

// outboxSequences lists the sequences of an account's outbox records.
func outboxSequences(ctx context.Context, t *testing.T, st *localstack.Stack, id string) []int64 {
	t.Helper()
	out, err := st.DDB.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.OutboxTable),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: wallet.AggregateType + "#" + id}},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, item := range out.Items {
		r, err := outbox.RecordFromItem(item)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, r.Envelope.Sequence)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs
}

func gapFree(seqs []int64, last int64) bool {
	if int64(len(seqs)) != last {
		return false
	}
	for i, s := range seqs {
		if s != int64(i)+1 {
			return false
		}
	}
	return true
}

// buffered lists the sequences of account id's events waiting in the
// statement consumer's resequencer buffer.
func buffered(ctx context.Context, t *testing.T, st *localstack.Stack, id string) []int64 {
	t.Helper()
	all, err := st.Buffered(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, e := range all[statement.Name] {
		if e.AggregateID == id {
			seqs = append(seqs, e.Sequence)
		}
	}
	return seqs
}
