// Command relay is the outbox's relay, built in the wallet's module from the
// library alone (pkg/lambdamain), like the wallet's own functions: its
// environment is what outboxcdk.New sets on it.
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
