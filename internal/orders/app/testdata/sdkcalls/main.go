// Command sdkcalls is a fixture of TestSDKCallAnalysisFindsReachableCalls:
// it calls three SDK operations in the three ways the analysis must see
// (an interface method, a paginator, a closure) and has one it must not
// count (DeleteItem, in a function main never reaches).
package main

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

type getter interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

func main() {
	ctx := context.Background()
	c := dynamodb.NewFromConfig(aws.Config{})
	var g getter = c
	_, _ = g.GetItem(ctx, &dynamodb.GetItemInput{})
	p := dynamodb.NewScanPaginator(c, &dynamodb.ScanInput{})
	_, _ = p.NextPage(ctx)
	send := func() {
		_, _ = sqs.NewFromConfig(aws.Config{}).SendMessage(ctx, &sqs.SendMessageInput{})
	}
	send()
}

// unreachable is never called: its DeleteItem is not an operation of main.
func unreachable(c *dynamodb.Client) {
	_, _ = c.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{})
}
