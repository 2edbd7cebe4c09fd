// Package cdkapp is the team's CDK stack: its event bus and the outbox
// construct of the released infra module.
package cdkapp

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
)

// NewStack creates the stack; assetRoot holds relay/bootstrap and
// reconciler/bootstrap.
func NewStack(scope constructs.Construct, id, assetRoot string) (awscdk.Stack, *outboxcdk.Outbox, error) {
	stack := awscdk.NewStack(scope, jsii.String(id), nil)
	bus := awsevents.NewEventBus(stack, jsii.String("Bus"), nil)
	ob, err := outboxcdk.New(stack, "Outbox", outboxcdk.Props{
		EventBus:    bus,
		AssetRoot:   assetRoot,
		EventSource: "com.example.wallet",
	})
	return stack, ob, err
}
