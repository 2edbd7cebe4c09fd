// Command fulfilment is the fulfilment consumer Lambda: it creates a
// shipment at the fulfilment provider's HTTP API for each paid order and
// cancels it when a paid order is cancelled (internal/orders/fulfilment, guarded by
// pkg/idempotency records). An EventBridge rule (internal/orders/routing) delivers its
// events to the consumer's SQS queue; a Lambda SQS event source mapping with
// ReportBatchItemFailures invokes this function, which answers with a
// partial batch response (pkg/sqsconsumer). Permanently failing events go to
// the consumer's DLQ (CONSUMER_DLQ_URL). The provider token is read from the
// Secrets Manager secret FULFILMENT_PROVIDER_SECRET_ARN (its SecretString
// is the token; none: no Authorization header). Configuration: see
// pkg/config and the README.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
)

func main() {
	s, cfg, log := app.LambdaInit()
	creds := app.ProviderCredentials(s, secretsmanager.NewFromConfig(cfg))
	c, err := app.NewFulfilment(s, dynamodb.NewFromConfig(cfg), creds, log)
	app.InitCheck(log, err)
	h, err := app.NewConsumerHandler(s, routing.ConsumerFulfilment, c.Handle, sqs.NewFromConfig(cfg), log)
	app.InitCheck(log, err)
	lambda.Start(app.Traced(s, "fulfilment", h.Handle))
}
