// Command reconciler is the scheduled reconciliation Lambda: it re-publishes
// outbox records still pending after RECONCILE_AFTER_SECONDS. It is built
// from the library alone (pkg/lambdamain); its environment variables are
// relay.ConfigFromEnv's and reconciler.ConfigFromEnv's, set by the CDK
// module's outboxcdk.Outbox construct.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ddb-outbox/ddb-outbox/pkg/lambdamain"
)

func main() {
	rt := lambdamain.MustInit()
	h, err := lambdamain.ReconcilerHandler(rt)
	lambdamain.Check(rt.Logger, err)
	lambda.Start(h)
}
