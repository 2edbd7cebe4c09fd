// Command api is the order HTTP API Lambda, behind an API Gateway HTTP API
// (payload format 2.0). Configuration: see pkg/config and the README.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/pkg/api"
	"github.com/ddb-outbox/ddb-outbox/pkg/app"
	"github.com/ddb-outbox/ddb-outbox/pkg/awsclient"
)

func main() {
	log := lambdacontext.NewLogger()
	s, err := app.SettingsFromEnv()
	if err != nil {
		exit(log, err)
	}
	cfg, err := awsclient.Load(context.Background())
	if err != nil {
		exit(log, err)
	}
	h, err := app.NewAPI(s, dynamodb.NewFromConfig(cfg), log)
	if err != nil {
		exit(log, err)
	}
	lambda.Start(api.LambdaHandler(h))
}

// exit reports a start-up (init) error; Lambda reports the init failure.
func exit(log *slog.Logger, err error) {
	log.Error("init failed", "error", err)
	os.Exit(1)
}
