// Command api is the order HTTP API Lambda, behind an API Gateway HTTP API
// (payload format 2.0). Configuration: see pkg/config and docs/CONFIGURATION.md.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/api"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
)

func main() {
	s, cfg, log := app.LambdaInit()
	h, err := app.NewAPI(s, dynamodb.NewFromConfig(cfg), log)
	app.InitCheck(log, err)
	lambda.Start(app.Traced(s, "api", api.LambdaHandler(h)))
}
