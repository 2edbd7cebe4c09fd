package devstack

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt/localstack"
)

// ErrSchemaMismatch is returned by Start when a table of the stack's names
// already exists with another key schema, index or stream setting
// (localstack.ErrSchemaMismatch).
var ErrSchemaMismatch = localstack.ErrSchemaMismatch

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
