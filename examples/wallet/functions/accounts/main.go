// Command accounts is the wallet's command function: one JSON Command per
// invocation (open, deposit, withdraw), written with outbox.Writer.Update.
// Its environment is what outboxcdk.Outbox.GrantWriteEvents sets, plus
// ACCOUNTS_TABLE_NAME (wallet.WriterConfigFromEnv).
package main

import (
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/examples/wallet"
	"github.com/ddb-outbox/ddb-outbox/pkg/lambdamain"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

func main() {
	rt := lambdamain.MustInit()
	cfg, accounts, err := wallet.WriterConfigFromEnv()
	lambdamain.Check(rt.Logger, err)
	w, err := outbox.NewWriter(dynamodb.NewFromConfig(rt.AWS), cfg)
	lambdamain.Check(rt.Logger, err)
	svc, err := wallet.NewService(w, accounts)
	lambdamain.Check(rt.Logger, err)
	lambda.Start(svc.Handle)
}
