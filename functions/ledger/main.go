// Command ledger is the ledger consumer Lambda, invoked by an EventBridge rule
// declared in pkg/routing. Configuration: see pkg/config and the README.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/pkg/app"
)

func main() {
	s, cfg, log := app.LambdaInit()
	c, err := app.NewLedger(s, dynamodb.NewFromConfig(cfg), log)
	app.InitCheck(log, err)
	lambda.Start(c.Handle)
}
