// Package wallet is the second example of the outbox library, and the one
// docs/ADOPT.md walks through: a team's own service on its own table, using
// only the library's public API at its release (github.com/ddb-outbox/ddb-outbox
// and its CDK module github.com/ddb-outbox/ddb-outbox/infra), as its own Go
// module.
//
// An account lives in the accounts table (partition key "id", S; AccountsTable).
// The commands Open, Deposit and Withdraw change it with outbox.Writer.Update:
// the account's item, its version and the event that says what happened are
// written in one DynamoDB transaction conditioned on the version read, so the
// account's events (AggregateType "Account": AccountOpened, AmountDeposited,
// AmountWithdrawn) get gap-free sequences 1, 2, 3, … — what an ordered
// consumer needs (package statement). Amounts are integer minor units (cents
// of Currency), at most outbox.MaxSafeInteger, the largest integer a JSON
// reader keeps exactly.
//
// Errors: ErrInvalidCommand (wrapped, naming the field) for bad input,
// ErrAccountExists, ErrNoAccount and ErrInsufficientFunds (wrapped, with the
// balance) from the domain; nothing is written on any of them. Otherwise
// Writer.Update's errors (outbox.ErrConflict when the account kept changing
// through every attempt, the SDK's).
package wallet

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// The account aggregate's type and its event types (the EventBridge
// detail-type of each event).
const (
	AggregateType        = "Account"
	EventAccountOpened   = "AccountOpened"
	EventAmountDeposited = "AmountDeposited"
	EventAmountWithdrawn = "AmountWithdrawn"
)

// KeyAttribute is the accounts table's partition key (S): the account id.
const KeyAttribute = "id"

// MaxAmount is the largest amount and balance, in minor units:
// outbox.MaxSafeInteger (2^53-1), exact in every JSON reader.
const MaxAmount = outbox.MaxSafeInteger

var (
	// ErrInvalidCommand is wrapped by every error for bad input; the
	// message names the field.
	ErrInvalidCommand = errors.New("wallet: invalid command")
	// ErrAccountExists: Open of an account id that exists.
	ErrAccountExists = errors.New("wallet: account exists")
	// ErrNoAccount: Deposit or Withdraw on an account that does not exist.
	ErrNoAccount = errors.New("wallet: no such account")
	// ErrInsufficientFunds: Withdraw of more than the balance (wrapped,
	// with the balance and the amount).
	ErrInsufficientFunds = errors.New("wallet: insufficient funds")
)

var (
	idPattern       = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	currencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)
)

// Account is an account's item in the accounts table.
type Account struct {
	ID       string `dynamodbav:"id"`
	Owner    string `dynamodbav:"owner"`
	Currency string `dynamodbav:"currency"` // ISO 4217 code, e.g. "EUR"
	Balance  int64  `dynamodbav:"balance"`  // minor units
	// Version is the sequence of the account's last event, kept by
	// Writer.Update (outbox.DefaultVersionAttribute).
	Version int64 `dynamodbav:"version"`
}

// The events' payloads (JSON objects; amounts in minor units). Balance is
// the account's balance after the event.
type (
	Opened struct {
		AccountID string `json:"account_id"`
		Owner     string `json:"owner"`
		Currency  string `json:"currency"`
	}
	Deposited struct {
		AccountID string `json:"account_id"`
		Amount    int64  `json:"amount"`
		Balance   int64  `json:"balance"`
	}
	Withdrawn struct {
		AccountID string `json:"account_id"`
		Amount    int64  `json:"amount"`
		Balance   int64  `json:"balance"`
	}
)

// AccountsTable is the accounts table's definition: partition key "id" (S),
// on-demand. It needs no stream: the events go through the outbox table.
func AccountsTable(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(KeyAttribute), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(KeyAttribute), KeyType: types.KeyTypeHash}},
	}
}

// TableKeys names the accounts table's key for the writer's transaction
// check (outbox.WriterConfig.Keys).
func TableKeys(table string) outbox.TableKeys {
	return outbox.TableKeys{Table: table, Names: []string{KeyAttribute}}
}

// Service runs the wallet's commands on one accounts table through one
// outbox writer.
type Service struct {
	w     *outbox.Writer
	table string
}

// NewService returns a Service writing accounts to table through w (whose
// WriterConfig.Keys should include TableKeys(table)).
func NewService(w *outbox.Writer, table string) (*Service, error) {
	if w == nil || table == "" {
		return nil, fmt.Errorf("%w: a writer and the accounts table are required", ErrInvalidCommand)
	}
	return &Service{w: w, table: table}, nil
}

// Open creates account id for owner in currency (an ISO 4217 code), at
// version 1 with balance 0, and records AccountOpened.
func (s *Service) Open(ctx context.Context, id, owner, currency string, md outbox.Metadata) (outbox.UpdateResult, error) {
	if err := checkID(id); err != nil {
		return outbox.UpdateResult{}, err
	}
	if owner == "" || len(owner) > 256 {
		return outbox.UpdateResult{}, fmt.Errorf("%w: owner must be 1..256 bytes", ErrInvalidCommand)
	}
	if !currencyPattern.MatchString(currency) {
		return outbox.UpdateResult{}, fmt.Errorf("%w: currency %q is not an ISO 4217 code (three capital letters)", ErrInvalidCommand, currency)
	}
	return s.update(ctx, id, md, func(cur outbox.Current, _ *Account) (Account, outbox.Event, error) {
		if cur.Exists() {
			return Account{}, outbox.Event{}, fmt.Errorf("%w: %s", ErrAccountExists, id)
		}
		return Account{ID: id, Owner: owner, Currency: currency},
			outbox.Event{Type: EventAccountOpened, Version: 1, Payload: Opened{AccountID: id, Owner: owner, Currency: currency}}, nil
	})
}

// Deposit adds amount (minor units, 1..MaxAmount) to account id's balance
// and records AmountDeposited.
func (s *Service) Deposit(ctx context.Context, id string, amount int64, md outbox.Metadata) (outbox.UpdateResult, error) {
	if err := checkMove(id, amount); err != nil {
		return outbox.UpdateResult{}, err
	}
	return s.update(ctx, id, md, func(_ outbox.Current, acc *Account) (Account, outbox.Event, error) {
		if acc == nil {
			return Account{}, outbox.Event{}, fmt.Errorf("%w: %s", ErrNoAccount, id)
		}
		if acc.Balance > MaxAmount-amount {
			return Account{}, outbox.Event{}, fmt.Errorf("%w: amount: the balance %d plus %d exceeds %d", ErrInvalidCommand, acc.Balance, amount, int64(MaxAmount))
		}
		acc.Balance += amount
		return *acc, outbox.Event{Type: EventAmountDeposited, Version: 1, Payload: Deposited{AccountID: id, Amount: amount, Balance: acc.Balance}}, nil
	})
}

// Withdraw takes amount (minor units, 1..MaxAmount) from account id's
// balance and records AmountWithdrawn; more than the balance is refused
// with ErrInsufficientFunds.
func (s *Service) Withdraw(ctx context.Context, id string, amount int64, md outbox.Metadata) (outbox.UpdateResult, error) {
	if err := checkMove(id, amount); err != nil {
		return outbox.UpdateResult{}, err
	}
	return s.update(ctx, id, md, func(_ outbox.Current, acc *Account) (Account, outbox.Event, error) {
		if acc == nil {
			return Account{}, outbox.Event{}, fmt.Errorf("%w: %s", ErrNoAccount, id)
		}
		if amount > acc.Balance {
			return Account{}, outbox.Event{}, fmt.Errorf("%w: account %s has %d, %d asked", ErrInsufficientFunds, id, acc.Balance, amount)
		}
		acc.Balance -= amount
		return *acc, outbox.Event{Type: EventAmountWithdrawn, Version: 1, Payload: Withdrawn{AccountID: id, Amount: amount, Balance: acc.Balance}}, nil
	})
}

// decide is a command's decision on the account as read (nil when it does
// not exist): its new state and the event that says so. It may run more
// than once (once per attempt of Writer.Update).
type decide func(cur outbox.Current, acc *Account) (Account, outbox.Event, error)

// update is every command's one versioned write: Writer.Update reads the
// account (consistent read), runs the decision, and writes the new item, its
// version and the event in one transaction conditioned on the version read,
// retrying a conflict.
func (s *Service) update(ctx context.Context, id string, md outbox.Metadata, d decide) (outbox.UpdateResult, error) {
	in := outbox.UpdateInput{
		AggregateType: AggregateType,
		AggregateID:   id,
		Table:         s.table,
		Key:           map[string]types.AttributeValue{KeyAttribute: &types.AttributeValueMemberS{Value: id}},
		Metadata:      md,
	}
	return s.w.Update(ctx, in, func(_ context.Context, cur outbox.Current) (outbox.Change, error) {
		var acc *Account
		if cur.Exists() {
			acc = new(Account)
			if err := attributevalue.UnmarshalMap(cur.Item, acc); err != nil {
				return outbox.Change{}, fmt.Errorf("wallet: read account %s: %w", id, err)
			}
		}
		next, ev, err := d(cur, acc)
		if err != nil {
			return outbox.Change{}, err
		}
		item, err := attributevalue.MarshalMap(next) // Update sets "version" itself
		if err != nil {
			return outbox.Change{}, fmt.Errorf("wallet: write account %s: %w", id, err)
		}
		return outbox.Change{Item: item, Events: []outbox.Event{ev}}, nil
	})
}

// Get reads account id (consistent read); ErrNoAccount when it does not
// exist.
func Get(ctx context.Context, ddb GetItemAPI, table, id string) (Account, error) {
	out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{KeyAttribute: &types.AttributeValueMemberS{Value: id}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Account{}, fmt.Errorf("wallet: get account %s: %w", id, err)
	}
	if out.Item == nil {
		return Account{}, fmt.Errorf("%w: %s", ErrNoAccount, id)
	}
	var acc Account
	if err := attributevalue.UnmarshalMap(out.Item, &acc); err != nil {
		return Account{}, fmt.Errorf("wallet: read account %s: %w", id, err)
	}
	return acc, nil
}

// GetItemAPI is the one DynamoDB method Get calls (*dynamodb.Client has it).
type GetItemAPI interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

func checkID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%w: account id %q must be 1..64 of A-Z a-z 0-9 _ -", ErrInvalidCommand, id)
	}
	return nil
}

func checkMove(id string, amount int64) error {
	if err := checkID(id); err != nil {
		return err
	}
	if amount < 1 || amount > MaxAmount {
		return fmt.Errorf("%w: amount %d must be 1..%d minor units", ErrInvalidCommand, amount, int64(MaxAmount))
	}
	return nil
}
