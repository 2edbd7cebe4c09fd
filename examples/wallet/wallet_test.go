package wallet_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/examples/wallet"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// noCalls is a DynamoDB client that fails the test when called: a command
// refused for its input must not reach DynamoDB.
type noCalls struct{ t *testing.T }

func (n noCalls) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	n.t.Error("TransactWriteItems called for a refused command")
	return nil, errors.New("unexpected call")
}

func (n noCalls) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	n.t.Error("GetItem called for a refused command")
	return nil, errors.New("unexpected call")
}

// GIVEN commands with bad input
// WHEN they run
// THEN each is refused with ErrInvalidCommand naming the field, before any
// DynamoDB call.
func TestCommandValidation(t *testing.T) {
	w, err := outbox.NewWriter(noCalls{t}, outbox.WriterConfig{Table: "outbox", Source: "com.example.wallet"})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := wallet.NewService(w, "accounts")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cases := []struct {
		name string
		cmd  wallet.Command
		want string
	}{
		{"unknown op", wallet.Command{Op: "transfer", AccountID: "a"}, `op "transfer"`},
		{"empty id", wallet.Command{Op: "deposit", Amount: 1}, "account id"},
		{"id with #", wallet.Command{Op: "deposit", AccountID: "a#b", Amount: 1}, "account id"},
		{"zero amount", wallet.Command{Op: "deposit", AccountID: "a"}, "amount 0"},
		{"negative withdrawal", wallet.Command{Op: "withdraw", AccountID: "a", Amount: -5}, "amount -5"},
		{"amount above 2^53-1", wallet.Command{Op: "deposit", AccountID: "a", Amount: wallet.MaxAmount + 1}, "minor units"},
		{"no owner", wallet.Command{Op: "open", AccountID: "a", Currency: "EUR"}, "owner"},
		{"bad currency", wallet.Command{Op: "open", AccountID: "a", Owner: "o", Currency: "euro"}, "ISO 4217"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := svc.Handle(ctx, c.cmd)
			if !errors.Is(err, wallet.ErrInvalidCommand) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Handle(%+v) = %v, want ErrInvalidCommand naming %q", c.cmd, err, c.want)
			}
		})
	}
}

// GIVEN the variables GrantWriteEvents sets, one of them invalid, and none
// WHEN WriterConfigFromEnv reads them
// THEN it returns the writer's config with the accounts table's keys, and
// an error naming each missing or invalid variable.
func TestWriterConfigFromEnv(t *testing.T) {
	t.Setenv("OUTBOX_TABLE_NAME", "wallet-outbox")
	t.Setenv("EVENT_SOURCE", "com.example.wallet")
	t.Setenv("PENDING_SHARDS", "8")
	t.Setenv("MAX_ENTRY_BYTES", "")
	t.Setenv(wallet.EnvAccountsTable, "accounts")
	cfg, accounts, err := wallet.WriterConfigFromEnv()
	if err != nil || accounts != "accounts" || cfg.Table != "wallet-outbox" || cfg.Source != "com.example.wallet" ||
		cfg.PendingShards != 8 || len(cfg.Keys) != 1 || cfg.Keys[0].Table != "accounts" {
		t.Fatalf("WriterConfigFromEnv = %+v, %q, %v", cfg, accounts, err)
	}
	t.Setenv("PENDING_SHARDS", "many")
	t.Setenv("EVENT_SOURCE", "")
	_, _, err = wallet.WriterConfigFromEnv()
	if err == nil || !strings.Contains(err.Error(), "PENDING_SHARDS") || !strings.Contains(err.Error(), "EVENT_SOURCE is required") {
		t.Fatalf("WriterConfigFromEnv with a bad shard count and no source: %v", err)
	}
}
