// Command relay is the outbox relay Lambda, invoked by the DynamoDB Streams
// event source mapping of the outbox table (filter: INSERT of outbox records,
// ReportBatchItemFailures). Configuration: see pkg/config and the README.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
)

func main() {
	s, cfg, log := app.LambdaInit()
	r, err := app.NewRelay(s, eventbridge.NewFromConfig(cfg), dynamodb.NewFromConfig(cfg), sqs.NewFromConfig(cfg), log)
	app.InitCheck(log, err)
	lambda.Start(app.Traced(s, "relay", r.Handle))
}
