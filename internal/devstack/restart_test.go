package devstack_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
)

// A second stack against a server that keeps its tables (a persistent
// DynamoDB Local, Dynoxide with a data file, a second `make dev`) reuses the
// tables and resumes the stream after the saved checkpoints: nothing already
// published is delivered to the relay again, and new orders flow.
func TestRestartReusesTablesAndResumesFromCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	srv, err := dynoxide.StartWith(ctx, dynoxide.Options{DBPath: filepath.Join(dir, "data.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := devstack.Options{Endpoint: srv.Endpoint, Prefix: "restart", Logger: quiet, CheckpointFile: filepath.Join(dir, "checkpoints.json")}

	first, err := devstack.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	rep := devstack.Drive(ctx, first.URL, devstack.DriveOptions{Orders: 20, Concurrency: 2, Logger: quiet})
	if err := first.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	delivered := first.Poller.Stats().RecordsDelivered
	first.Close()
	if rep.Acked == 0 || delivered == 0 {
		t.Fatalf("first run: acked %d, delivered %d", rep.Acked, delivered)
	}
	if _, err := os.Stat(opts.CheckpointFile); err != nil {
		t.Fatalf("no checkpoint file after Close: %v", err)
	}

	second, err := devstack.Start(ctx, opts)
	if err != nil {
		t.Fatalf("restart against existing tables: %v", err)
	}
	defer second.Close()
	if err := second.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if st := second.Poller.Stats(); st.RecordsDelivered != 0 {
		t.Fatalf("the restarted event source mapping delivered %d already-processed records again", st.RecordsDelivered)
	}
	rep2 := devstack.Drive(ctx, second.URL, devstack.DriveOptions{Orders: 5, Concurrency: 1, Seed: 9, Logger: quiet})
	if err := second.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := second.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep2.Acked == 0 || a.Published != a.Events || a.Lost != 0 || second.Poller.Stats().RecordsDelivered == 0 {
		t.Fatalf("after restart: acked %d, %s, delivered %d", rep2.Acked, a.Summary(), second.Poller.Stats().RecordsDelivered)
	}
}

// An existing table with another schema is refused with a clear error, not
// reused.
func TestExistingTableWithOtherSchemaIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := dynoxide.Start(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(srv.Endpoint))
	_, err = ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("odd-outbox"),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = devstack.Start(ctx, devstack.Options{Endpoint: srv.Endpoint, Prefix: "odd", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if !errors.Is(err, devstack.ErrSchemaMismatch) || !strings.Contains(err.Error(), "odd-outbox") {
		t.Fatalf("Start = %v, want ErrSchemaMismatch naming odd-outbox", err)
	}
}

// When the API port is taken, the error names the process holding it.
func TestPortInUseNamesTheHolder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = devstack.Start(ctx, devstack.Options{APIAddr: ln.Addr().String(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "held by pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("Start = %v, want it to name pid %d", err, os.Getpid())
	}
}

// TestPortInUseStartsNoServerOnTheDataFile: a second stack whose port is
// taken fails before it starts Dynoxide, so it never opens the data file
// a running stack may be using.
func TestPortInUseStartsNoServerOnTheDataFile(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := filepath.Join(t.TempDir(), "state", "dev.db")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = devstack.Start(ctx, devstack.Options{AWSAddr: ln.Addr().String(), DataFile: data, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "AWS front") {
		t.Fatalf("Start = %v, want the AWS front's port refused", err)
	}
	if _, err := os.Stat(filepath.Dir(data)); !os.IsNotExist(err) {
		t.Fatalf("the data file's directory exists (%v): Dynoxide was started before the port check", err)
	}
}

// TestDataFileWithEndpointIsRefused: DataFile keeps the data of the Dynoxide
// the stack starts; with Endpoint the server there keeps it, so the pair is
// refused with an error naming both, before anything starts (it used to be
// ignored silently).
func TestDataFileWithEndpointIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := filepath.Join(t.TempDir(), "state", "dev.db")
	_, err := devstack.Start(ctx, devstack.Options{Endpoint: "http://127.0.0.1:1", DataFile: data, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "DataFile") || !strings.Contains(err.Error(), "Endpoint") {
		t.Fatalf("Start = %v, want the DataFile and Endpoint pair refused", err)
	}
	if _, err := os.Stat(filepath.Dir(data)); !os.IsNotExist(err) {
		t.Fatalf("the data file's directory exists (%v): something started", err)
	}
}
