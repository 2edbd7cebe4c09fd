// Package ddbtest gives integration tests a real DynamoDB-compatible server
// with Streams: a fresh in-memory Dynoxide per call (or the server named by
// DDB_TEST_ENDPOINT), and helpers to create tables on it. It is imported by
// tests only.
package ddbtest

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
)

// EnvEndpoint names an already running DynamoDB-compatible server to use
// instead of starting Dynoxide (tables get unique names per test).
const EnvEndpoint = "DDB_TEST_ENDPOINT"

// Env is a server for one test.
type Env struct {
	Endpoint string
	Config   aws.Config
	DDB      *dynamodb.Client
	Streams  *dynamodbstreams.Client
}

var counter atomic.Int64

// New starts a fresh Dynoxide for t (stopped at cleanup), or uses
// DDB_TEST_ENDPOINT. It skips nothing: a missing binary fails the test with
// the install hint.
func New(t testing.TB) *Env {
	t.Helper()
	endpoint := os.Getenv(EnvEndpoint)
	if endpoint == "" {
		srv, err := dynoxide.Start(context.Background(), nil)
		if err != nil {
			t.Fatalf("start dynoxide: %v", err)
		}
		t.Cleanup(srv.Stop)
		endpoint = srv.Endpoint
	}
	cfg := dynoxide.AWSConfig(endpoint)
	return &Env{
		Endpoint: endpoint,
		Config:   cfg,
		DDB:      dynamodb.NewFromConfig(cfg),
		Streams:  dynamodbstreams.NewFromConfig(cfg),
	}
}

// Name returns a table name unique within this process, prefixed by base.
func Name(base string) string {
	return fmt.Sprintf("%s-%d-%d", base, os.Getpid(), counter.Add(1))
}

// CreateTable creates the table described by in and waits until it is
// ACTIVE. It fails the test on error.
func (e *Env) CreateTable(t testing.TB, in *dynamodb.CreateTableInput) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.DDB.CreateTable(ctx, in); err != nil {
		t.Fatalf("create table %s: %v", aws.ToString(in.TableName), err)
	}
	w := dynamodb.NewTableExistsWaiter(e.DDB, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 50 * time.Millisecond
		o.MaxDelay = 500 * time.Millisecond
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, 30*time.Second); err != nil {
		t.Fatalf("wait for table %s: %v", aws.ToString(in.TableName), err)
	}
}

// SimpleTableInput describes a table with a single string partition key
// "pk", on-demand billing and no stream: the shape of a simple business
// table (a key-value aggregate table, an idempotency table).
func SimpleTableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	}
}
