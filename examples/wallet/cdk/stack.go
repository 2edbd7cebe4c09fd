package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/examples/wallet"
	"github.com/ddb-outbox/ddb-outbox/examples/wallet/statement"
	"github.com/ddb-outbox/ddb-outbox/infra/gofunc"
	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// AccountsActions are what the accounts function does on the accounts
// table through outbox.Writer.Update: the construct's published
// outboxcdk.AggregateUpdateActions.
var AccountsActions = outboxcdk.AggregateUpdateActions

// WalletStackProps configures the wallet's stack.
type WalletStackProps struct {
	awscdk.StackProps
	// AssetRoot holds <function>/bootstrap for accounts, statement, relay
	// and reconciler (examples/wallet/dist after `make build` there).
	// Required.
	AssetRoot string
	// EventSource is the EventBridge source of the wallet's events.
	// Required, e.g. "com.example.wallet".
	EventSource string
	// RemovalPolicy of the tables, queues and log groups. Default RETAIN.
	RemovalPolicy awscdk.RemovalPolicy
}

// Wallet is what NewWalletStack built.
type Wallet struct {
	Stack     awscdk.Stack
	Bus       awsevents.EventBus
	Accounts  awsdynamodb.Table
	Outbox    *outboxcdk.Outbox
	AccountFn awslambda.Function
	Statement *outboxcdk.Consumer
	StmtFn    awslambda.Function
}

// NewWalletStack is the wallet on AWS: its accounts table, its bus, the
// outbox (outboxcdk.New: outbox table, relay, reconciler, archive, alarms),
// the accounts function granted to write events, and the ordered statement
// consumer (outboxcdk.NewConsumer: queue, DLQ, rule on every Account event,
// state table, sweep, alarms, grants, environment).
func NewWalletStack(scope constructs.Construct, id string, p WalletStackProps) (*Wallet, error) {
	if p.AssetRoot == "" {
		return nil, errors.New("wallet stack: AssetRoot is required")
	}
	if p.RemovalPolicy == "" {
		p.RemovalPolicy = awscdk.RemovalPolicy_RETAIN
	}
	st := awscdk.NewStack(scope, jsii.String(id), &p.StackProps)
	w := &Wallet{Stack: st}

	// Your table: the accounts, keyed by id.
	w.Accounts = awsdynamodb.NewTable(st, jsii.String("Accounts"), &awsdynamodb.TableProps{
		PartitionKey: &awsdynamodb.Attribute{Name: jsii.String(wallet.KeyAttribute), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:  awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		DeletionProtection: jsii.Bool(p.RemovalPolicy != awscdk.RemovalPolicy_DESTROY),
		RemovalPolicy:      p.RemovalPolicy,
	})

	// The outbox beside it.
	w.Bus = awsevents.NewEventBus(st, jsii.String("Bus"), nil)
	ob, err := outboxcdk.New(st, "Outbox", outboxcdk.Props{
		EventBus:      w.Bus,
		AssetRoot:     p.AssetRoot, // relay/bootstrap, reconciler/bootstrap
		EventSource:   p.EventSource,
		RemovalPolicy: p.RemovalPolicy,
	})
	if err != nil {
		return nil, err
	}
	w.Outbox = ob
	// Only the relay and the reconciler may put events on the bus.
	w.Bus.AddToResourcePolicy(ob.PublishOnlyStatement(w.Bus.EventBusArn()))

	// The writer: the accounts function.
	if w.AccountFn, err = gofunc.New(st, "AccountsFn", gofunc.Props{
		AssetDir:      filepath.Join(p.AssetRoot, "accounts"),
		Description:   "wallet commands: open, deposit, withdraw (outbox.Writer.Update)",
		Environment:   map[string]string{wallet.EnvAccountsTable: *w.Accounts.TableName()},
		RemovalPolicy: p.RemovalPolicy,
	}); err != nil {
		return nil, fmt.Errorf("accounts function: %w", err)
	}
	// Writer.Update on the accounts table, PutItem on the outbox table, and
	// the writer's environment (outbox.WriterConfigFromEnv).
	ob.GrantAggregateUpdate(w.AccountFn, w.Accounts)

	// The ordered consumer: its statement lives in the state table the
	// construct creates (one transaction writes marker, effects and gate).
	if w.StmtFn, err = gofunc.New(st, "StatementFn", gofunc.Props{
		AssetDir:      filepath.Join(p.AssetRoot, "statement"),
		Description:   "wallet statement: ordered consumer of Account events",
		RemovalPolicy: p.RemovalPolicy,
	}); err != nil {
		return nil, fmt.Errorf("statement function: %w", err)
	}
	if w.Statement, err = outboxcdk.NewConsumer(st, "Statement", outboxcdk.ConsumerProps{
		Outbox:        ob,
		Name:          statement.Name, // the same name the code gives dedup.NewConsumer
		Function:      w.StmtFn,
		Ordering:      dedup.Ordered,
		AggregateType: wallet.AggregateType, // the rule: every event type of Account
	}); err != nil {
		return nil, err
	}
	return w, nil
}
