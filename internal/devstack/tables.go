package devstack

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ErrSchemaMismatch is returned by Start when a table of the stack's names
// already exists with another key schema, index or stream setting: the stack
// reuses existing tables only when they are what it would create.
var ErrSchemaMismatch = errors.New("devstack: an existing table does not match the stack's schema")

// ensureTable creates the table, or, when a table of that name exists (a
// persistent DynamoDB Local, Dynoxide with a data file, a second `make dev`),
// checks that its schema is the one in and reuses it. It reports whether it
// created the table.
func ensureTable(ctx context.Context, ddb *dynamodb.Client, in *dynamodb.CreateTableInput) (bool, error) {
	_, err := ddb.CreateTable(ctx, in)
	if err == nil {
		return true, nil
	}
	var inUse *ddbtypes.ResourceInUseException
	if !errors.As(err, &inUse) {
		return false, fmt.Errorf("devstack: create table %s: %w", aws.ToString(in.TableName), err)
	}
	out, derr := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName})
	if derr != nil {
		return false, fmt.Errorf("devstack: table %s exists but cannot be described: %w", aws.ToString(in.TableName), derr)
	}
	if diff := schemaDiff(in, out.Table); diff != "" {
		return false, fmt.Errorf("%w: table %s: %s; delete it, or use another -prefix", ErrSchemaMismatch, aws.ToString(in.TableName), diff)
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

// SnapshotTable copies every item of table from into a new table to made
// with def (the table's own definition, named to): a consistent copy when
// nothing writes from meanwhile — the local stand-in for a DynamoDB backup
// restored (on AWS, RestoreTableFromBackup and RestoreTableToPointInTime
// create a new table from a table's state at one time, indexes included,
// TTL and stream settings not). It returns the number of items copied, or
// an error naming the failed step.
func SnapshotTable(ctx context.Context, ddb *dynamodb.Client, from string, def *dynamodb.CreateTableInput) (int, error) {
	to := aws.ToString(def.TableName)
	if _, err := ddb.CreateTable(ctx, def); err != nil {
		return 0, fmt.Errorf("devstack: snapshot %s: create %s: %w", from, to, err)
	}
	if err := dynamodb.NewTableExistsWaiter(ddb).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(to)}, timeoutTable); err != nil {
		return 0, fmt.Errorf("devstack: snapshot %s: wait for %s: %w", from, to, err)
	}
	n := 0
	var batch []ddbtypes.WriteRequest
	flush := func() error {
		reqs := map[string][]ddbtypes.WriteRequest{to: batch}
		for attempt := 0; len(reqs[to]) > 0; attempt++ {
			if attempt == 10 {
				return fmt.Errorf("devstack: snapshot %s: %d items left unprocessed", from, len(reqs[to]))
			}
			out, err := ddb.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: reqs})
			if err != nil {
				return fmt.Errorf("devstack: snapshot %s into %s: %w", from, to, err)
			}
			reqs = out.UnprocessedItems
		}
		batch = batch[:0]
		return nil
	}
	p := dynamodb.NewScanPaginator(ddb, &dynamodb.ScanInput{TableName: aws.String(from), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return n, fmt.Errorf("devstack: snapshot %s: scan: %w", from, err)
		}
		for _, it := range page.Items {
			batch = append(batch, ddbtypes.WriteRequest{PutRequest: &ddbtypes.PutRequest{Item: it}})
			n++
			if len(batch) == 25 { // BatchWriteItem's limit
				if err := flush(); err != nil {
					return n, err
				}
			}
		}
	}
	return n, flush()
}
