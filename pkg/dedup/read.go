package dedup

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ReadAPI is the DynamoDB subset a consumer's read helpers call, with the
// SDK's exact signatures.
type ReadAPI interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// GetItem reads the item whose "pk" is key from the consumer's table with a
// strongly consistent GetItem bounded by CallTimeout. It returns nil without
// error when there is no such item.
func (c ConsumerConfig) GetItem(ctx context.Context, client ReadAPI, key string) (map[string]types.AttributeValue, error) {
	ctx, cancel := context.WithTimeout(ctx, c.CallTimeout)
	defer cancel()
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(c.Table),
		Key:            map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("%s: get %s: %w", c.Dedup.Consumer, key, err)
	}
	return out.Item, nil
}

// ScanPrefix pages through the consumer's table, strongly consistent, and
// hands page every page of items whose "pk" starts with prefix, with the
// page's count (only the count when count is true: Select COUNT).
//
// AUDIT ONLY: the prefix is a filter applied after the read, so every call
// reads the whole table. Never use it on a request path.
func (c ConsumerConfig) ScanPrefix(ctx context.Context, client ReadAPI, prefix string, count bool, page func([]map[string]types.AttributeValue, int32) error) error {
	f, err := expression.NewBuilder().WithFilter(expression.Name(AttrPK).BeginsWith(prefix)).Build()
	if err != nil {
		return fmt.Errorf("%s: build scan filter: %w", c.Dedup.Consumer, err)
	}
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(c.Table),
		FilterExpression:          f.Filter(),
		ExpressionAttributeNames:  f.Names(),
		ExpressionAttributeValues: f.Values(),
		ConsistentRead:            aws.Bool(true),
	}
	if count {
		in.Select = types.SelectCount
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, c.CallTimeout)
		out, err := client.Scan(cctx, in)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: scan %s: %w", c.Dedup.Consumer, prefix, err)
		}
		if err := page(out.Items, out.Count); err != nil {
			return err
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
