package regions

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// The bank's aggregate, its table and events.
const (
	// AccountType is the aggregate type of an account.
	AccountType = "Account"
	// AccountsTable holds the accounts (a global table): id (S, the key),
	// balance (N), home (S, the Region that opened it) and version (N, the
	// sequence of its last event, outbox.Writer.Update's).
	AccountsTable = "bank-accounts"
	// Event types, each with the payload {"amount": n, "balance": b}: the
	// amount moved (the opening balance for AccountOpened) and the balance
	// after it.
	EventOpened    = "AccountOpened"
	EventDeposited = "Deposited"
	EventWithdrawn = "Withdrawn"
)

// ErrInsufficientFunds is returned by Withdraw when the balance is below
// the amount; nothing is written.
var ErrInsufficientFunds = errors.New("regions: insufficient funds")

// ErrNoAccount is returned (wrapped) for an account the Bank did not open.
var ErrNoAccount = errors.New("regions: no such account")

// Payload is every bank event's payload.
type Payload struct {
	Amount  int64 `json:"amount"`
	Balance int64 `json:"balance"`
}

// Committed is one event a writer committed: the Region it was written in
// and its envelope (with its sequence).
type Committed struct {
	Region string
	Event  outbox.Envelope
}

// Bank writes accounts with outbox.Writer.Update, each in its home Region
// (the Region that opened it), and records every event it committed (the
// audit's ground truth). Safe for concurrent use.
type Bank struct {
	rt      *Runtime
	writers map[string]*outbox.Writer

	mu        sync.Mutex
	home      map[string]string
	committed []Committed
}

func newBank(rt *Runtime) (*Bank, error) {
	b := &Bank{rt: rt, writers: map[string]*outbox.Writer{}, home: map[string]string{}}
	for _, r := range rt.Regions() {
		wc := r.Stack.WriterConfig()
		wc.Keys = []outbox.TableKeys{{Table: AccountsTable, Names: []string{"id"}}}
		w, err := outbox.NewWriter(r.Stack.DDB, wc)
		if err != nil {
			return nil, fmt.Errorf("regions: writer in %s: %w", r.Name, err)
		}
		b.writers[r.Name] = w
	}
	return b, nil
}

// Open opens account id in Region region (its home from then on) with the
// opening balance (AccountOpened, sequence 1). It returns the Writer's
// error (an account that exists: outbox.ErrConflict or a *outbox.TxError),
// or ErrUnknownRegion.
func (b *Bank) Open(ctx context.Context, region, id string, balance int64) error {
	if b.writers[region] == nil {
		return fmt.Errorf("%w: %q", ErrUnknownRegion, region)
	}
	err := b.update(ctx, region, id, func(cur outbox.Current) (int64, string, error) {
		if cur.Exists() {
			return 0, "", fmt.Errorf("regions: account %s exists", id)
		}
		return balance, EventOpened, nil
	})
	if err == nil {
		b.mu.Lock()
		b.home[id] = region
		b.mu.Unlock()
	}
	return err
}

// Deposit adds amount to account id in its home Region (Deposited).
func (b *Bank) Deposit(ctx context.Context, id string, amount int64) error {
	home, err := b.Home(id)
	if err != nil {
		return err
	}
	return b.DepositIn(ctx, home, id, amount)
}

// DepositIn adds amount to account id writing in Region region, its home
// or not: outside the home Region the writer's fence refuses it
// (outbox.ErrNotHomeRegion, a *outbox.NotHomeError) and nothing is
// written.
func (b *Bank) DepositIn(ctx context.Context, region, id string, amount int64) error {
	return b.move(ctx, region, id, amount, EventDeposited)
}

// Withdraw takes amount from account id in its home Region (Withdrawn); it
// returns ErrInsufficientFunds when the balance is lower.
func (b *Bank) Withdraw(ctx context.Context, id string, amount int64) error {
	home, err := b.Home(id)
	if err != nil {
		return err
	}
	return b.move(ctx, home, id, -amount, EventWithdrawn)
}

// Home returns account id's home Region, or ErrNoAccount.
func (b *Bank) Home(id string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.home[id]
	if !ok {
		return "", fmt.Errorf("%w: %s", ErrNoAccount, id)
	}
	return h, nil
}

// Committed returns every event the Bank committed, in commit order.
func (b *Bank) Committed() []Committed {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Committed(nil), b.committed...)
}

func (b *Bank) move(ctx context.Context, region, id string, delta int64, eventType string) error {
	if b.writers[region] == nil {
		return fmt.Errorf("%w: %q", ErrUnknownRegion, region)
	}
	return b.update(ctx, region, id, func(cur outbox.Current) (int64, string, error) {
		if !cur.Exists() {
			return 0, "", fmt.Errorf("%w: %s in %s", ErrNoAccount, id, region)
		}
		bal, err := balanceOf(cur.Item)
		if err != nil {
			return 0, "", err
		}
		if bal+delta < 0 {
			return 0, "", fmt.Errorf("%w: %s has %d, %d asked", ErrInsufficientFunds, id, bal, -delta)
		}
		return bal + delta, eventType, nil
	})
}

// update writes one event of account id in region: next computes the new
// balance and the event type from the account as read.
func (b *Bank) update(ctx context.Context, region, id string, next func(outbox.Current) (int64, string, error)) error {
	key := map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}
	res, err := b.writers[region].Update(ctx, outbox.UpdateInput{AggregateType: AccountType, AggregateID: id, Table: AccountsTable, Key: key},
		func(_ context.Context, cur outbox.Current) (outbox.Change, error) {
			balance, eventType, err := next(cur)
			if err != nil {
				return outbox.Change{}, err
			}
			old, _ := balanceOf(cur.Item)
			home := region
			if h, ok := cur.Item["home"].(*types.AttributeValueMemberS); ok {
				home = h.Value
			}
			amount := balance - old
			if amount < 0 {
				amount = -amount
			}
			return outbox.Change{
				Item: map[string]types.AttributeValue{
					"id":      key["id"],
					"balance": &types.AttributeValueMemberN{Value: strconv.FormatInt(balance, 10)},
					"home":    &types.AttributeValueMemberS{Value: home},
				},
				Events: []outbox.Event{{Type: eventType, Version: 1, Payload: Payload{Amount: amount, Balance: balance}}},
			}, nil
		})
	if err != nil {
		return err
	}
	b.mu.Lock()
	for _, e := range res.Events {
		b.committed = append(b.committed, Committed{Region: region, Event: e})
	}
	b.mu.Unlock()
	return nil
}

func balanceOf(item map[string]types.AttributeValue) (int64, error) {
	n, ok := item["balance"].(*types.AttributeValueMemberN)
	if !ok {
		return 0, nil
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("regions: balance %q: %w", n.Value, err)
	}
	return v, nil
}
