// Command relay is the outbox relay Lambda, invoked by the DynamoDB Streams
// event source mapping of the outbox table (filter: INSERT of outbox records,
// ReportBatchItemFailures). It is built from the library alone
// (pkg/lambdamain); its environment variables are relay.ConfigFromEnv's,
// set by the CDK module's outboxcdk.Outbox construct.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ddb-outbox/ddb-outbox/pkg/lambdamain"
)

func main() {
	rt := lambdamain.MustInit()
	h, err := lambdamain.RelayHandler(rt)
	lambdamain.Check(rt.Logger, err)
	lambda.Start(h)
}
