// Command reconciler is the scheduled reconciliation Lambda: it re-publishes
// outbox records still pending after RECONCILE_AFTER_SECONDS. Configuration:
// see pkg/config and the README.
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
	r, err := app.NewReconciler(s, app.ReconcilerClients{
		DDB:         dynamodb.NewFromConfig(cfg),
		EventBridge: eventbridge.NewFromConfig(cfg),
		Queue:       sqs.NewFromConfig(cfg),
	}, log)
	app.InitCheck(log, err)
	lambda.Start(app.TracedNoResult(s, "reconciler", r.Handle))
}
