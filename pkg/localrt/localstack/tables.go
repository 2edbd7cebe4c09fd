package localstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ErrSchemaMismatch is returned (wrapped, naming the table and what
// differs) by EnsureTable, CreateTables and Start when a table of the
// stack's names already exists with another key schema, key attribute
// type, global secondary index or stream setting: the stack reuses existing
// tables only when they are what it would create.
var ErrSchemaMismatch = errors.New("localstack: an existing table does not match the stack's schema")

// EnsureTable creates the table in describes, or, when a table of that name
// exists (a persistent DynamoDB Local, Dynoxide with a data file, a second
// run), checks that its schema is the one in describes and reuses it. It
// reports whether it created the table; the error wraps ErrSchemaMismatch
// for an existing table of another shape, or is CreateTable's or
// DescribeTable's. It does not wait for the table to be ACTIVE
// (CreateTables does).
func EnsureTable(ctx context.Context, ddb *dynamodb.Client, in *dynamodb.CreateTableInput) (bool, error) {
	_, err := ddb.CreateTable(ctx, in)
	if err == nil {
		return true, nil
	}
	var inUse *ddbtypes.ResourceInUseException
	if !errors.As(err, &inUse) {
		return false, fmt.Errorf("localstack: create table %s: %w", aws.ToString(in.TableName), err)
	}
	out, derr := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName})
	if derr != nil {
		return false, fmt.Errorf("localstack: table %s exists but cannot be described: %w", aws.ToString(in.TableName), derr)
	}
	if diff := schemaDiff(in, out.Table); diff != "" {
		return false, fmt.Errorf("%w: table %s: %s; delete it, or use other table names", ErrSchemaMismatch, aws.ToString(in.TableName), diff)
	}
	return false, nil
}

// schemaDiff compares what CreateTable would make with an existing table:
// key schema, attribute types of keys, global secondary indexes (keys and
// projection type) and the stream (enabled, view type). It returns "" when
// they agree, else what differs.
func schemaDiff(want *dynamodb.CreateTableInput, got *ddbtypes.TableDescription) string {
	var diffs []string
	if a, b := keys(want.KeySchema), keys(got.KeySchema); a != b {
		diffs = append(diffs, fmt.Sprintf("key schema %s, want %s", b, a))
	}
	types := map[string]ddbtypes.ScalarAttributeType{}
	for _, d := range got.AttributeDefinitions {
		types[aws.ToString(d.AttributeName)] = d.AttributeType
	}
	for _, d := range want.AttributeDefinitions {
		if t := types[aws.ToString(d.AttributeName)]; t != d.AttributeType {
			diffs = append(diffs, fmt.Sprintf("attribute %s is %q, want %q", aws.ToString(d.AttributeName), t, d.AttributeType))
		}
	}
	gsis := map[string]string{}
	for _, g := range got.GlobalSecondaryIndexes {
		gsis[aws.ToString(g.IndexName)] = keys(g.KeySchema) + " " + string(projection(g.Projection))
	}
	for _, g := range want.GlobalSecondaryIndexes {
		name, w := aws.ToString(g.IndexName), keys(g.KeySchema)+" "+string(projection(g.Projection))
		if gsis[name] != w {
			diffs = append(diffs, fmt.Sprintf("index %s is %q, want %q", name, gsis[name], w))
		}
	}
	if ws := want.StreamSpecification; ws != nil && aws.ToBool(ws.StreamEnabled) {
		gs := got.StreamSpecification
		if gs == nil || !aws.ToBool(gs.StreamEnabled) || gs.StreamViewType != ws.StreamViewType {
			diffs = append(diffs, fmt.Sprintf("stream %v, want enabled with %s", streamText(gs), ws.StreamViewType))
		}
	}
	return strings.Join(diffs, "; ")
}

func keys(ks []ddbtypes.KeySchemaElement) string {
	parts := make([]string, 0, len(ks))
	for _, k := range ks {
		parts = append(parts, aws.ToString(k.AttributeName)+":"+string(k.KeyType))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func projection(p *ddbtypes.Projection) ddbtypes.ProjectionType {
	if p == nil {
		return ""
	}
	return p.ProjectionType
}

func streamText(s *ddbtypes.StreamSpecification) string {
	if s == nil || !aws.ToBool(s.StreamEnabled) {
		return "disabled"
	}
	return "enabled with " + string(s.StreamViewType)
}

// CreateTables creates (EnsureTable) every table of inputs, waits until
// each is ACTIVE (at most 30 s each), and enables TTL on the attribute ttl
// names for a table (table name → attribute; a server without TTL support,
// or TTL already enabled, only logs a warning to log, which may be nil).
// It returns the first error, wrapping ErrSchemaMismatch for an existing
// table of another shape.
func CreateTables(ctx context.Context, ddb *dynamodb.Client, inputs []*dynamodb.CreateTableInput, ttl map[string]string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, in := range inputs {
		created, err := EnsureTable(ctx, ddb, in)
		if err != nil {
			return err
		}
		if !created {
			log.Info("reusing existing table", "table", aws.ToString(in.TableName))
		}
	}
	w := dynamodb.NewTableExistsWaiter(ddb, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 500*time.Millisecond
	})
	for _, in := range inputs {
		if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, TableWait); err != nil {
			return fmt.Errorf("localstack: wait for table %s: %w", aws.ToString(in.TableName), err)
		}
	}
	tables := make([]string, 0, len(ttl))
	for t := range ttl {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, table := range tables {
		_, err := ddb.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
			TableName:               aws.String(table),
			TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{Enabled: aws.Bool(true), AttributeName: aws.String(ttl[table])},
		})
		if err != nil {
			log.Warn("could not enable TTL", "table", table, "error", err)
		}
	}
	return nil
}

// TableWait bounds the wait for one new table to become ACTIVE.
const TableWait = 30 * time.Second
