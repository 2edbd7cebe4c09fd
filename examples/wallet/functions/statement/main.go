// Command statement is the wallet's ordered consumer (package statement)
// behind its SQS queue. Its environment is what outboxcdk.NewConsumer sets:
// dedup.ConsumerConfigFromEnv and sqsconsumer.ConfigFromEnv read it.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/examples/wallet/statement"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/lambdamain"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

func main() {
	rt := lambdamain.MustInit()
	cfg, err := dedup.ConsumerConfigFromEnv() // CONSUMER_TABLE_NAME, EVENT_SOURCE, EXPECTED_EVENT_ACCOUNT
	lambdamain.Check(rt.Logger, err)
	h, err := statement.NewHandler(dynamodb.NewFromConfig(rt.AWS), cfg)
	lambdamain.Check(rt.Logger, err)
	qc, err := sqsconsumer.ConfigFromEnv() // CONSUMER_DLQ_URL
	lambdamain.Check(rt.Logger, err)
	q := sqs.NewFromConfig(rt.AWS)
	qc.DLQ, qc.Queue = q, q
	sh, err := sqsconsumer.New(h, qc)
	lambdamain.Check(rt.Logger, err)
	lambda.Start(sh.Handle)
}
