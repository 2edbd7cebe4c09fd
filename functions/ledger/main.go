// Command ledger is the ledger consumer Lambda. An EventBridge rule (internal/orders/routing)
// delivers its events to the consumer's SQS queue; a Lambda SQS event source
// mapping with ReportBatchItemFailures invokes this function, which answers
// with a partial batch response (pkg/sqsconsumer). Permanently failing events
// go to the consumer's DLQ (CONSUMER_DLQ_URL). Configuration: see pkg/config
// and the README.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
)

func main() {
	s, cfg, log := app.LambdaInit()
	c, err := app.NewLedger(s, dynamodb.NewFromConfig(cfg), log)
	app.InitCheck(log, err)
	h, err := app.NewConsumerHandler(s, routing.ConsumerLedger, c.Handle, sqs.NewFromConfig(cfg), log)
	app.InitCheck(log, err)
	lambda.Start(app.Traced(s, "ledger", h.Handle))
}
