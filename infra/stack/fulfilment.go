package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
)

// PlaceholderProviderURLWarning is the id of the synth warning the stack
// adds while OrdersStackProps.FulfilmentProviderURL is
// DefaultFulfilmentProviderURL.
const PlaceholderProviderURLWarning = "ddb-outbox:fulfilmentProviderUrlPlaceholder"

// addFulfilmentResources creates what the fulfilment consumer needs besides
// the common consumer parts (its shipments table is the consumer's Table):
// the idempotency table (idempotency.CreateTableInput, TTL on
// idempotency.TTLAttribute) and the provider secret (OrdersStackProps.
// FulfilmentProviderSecretArn, or one created in the stack), and sets fn's
// IDEMPOTENCY_TABLE_NAME, FULFILMENT_PROVIDER_URL and
// FULFILMENT_PROVIDER_SECRET_ARN. It returns the ARNs of
// app.ResourceIdempotencyTable and app.ResourceProviderSecret for grantCode,
// and the idempotency table as the consumer construct's state table: the
// consumer keeps its pkg/idempotency records there, and
// outboxcdk.ConsumerStateActions are exactly what idempotency.Store calls.
func (s *OrdersStack) addFulfilmentResources(_ string, fn awslambda.Function) (map[app.Resource]*string, awsdynamodb.ITable) {
	props := s.props
	s.IdempotencyTable = s.newTable("IdempotencyTable", idempotency.AttrPK, idempotency.TTLAttribute)
	if props.FulfilmentProviderSecretArn != "" {
		s.ProviderSecret = awssecretsmanager.Secret_FromSecretCompleteArn(s.Stack, jsii.String("FulfilmentProviderSecret"),
			jsii.String(props.FulfilmentProviderSecretArn))
	} else {
		// CloudFormation fills it with a random value (GenerateSecretString):
		// the operator puts the provider's token (README).
		secret := awssecretsmanager.NewSecret(s.Stack, jsii.String("FulfilmentProviderSecret"), &awssecretsmanager.SecretProps{
			Description: jsii.String("ddb-outbox fulfilment consumer: the fulfilment provider's API token " +
				"(SecretString = the token; replace the generated value)"),
			EncryptionKey: s.EncryptionKey,
			RemovalPolicy: props.removalPolicy(),
		})
		cdknag.NagSuppressions_AddResourceSuppressions(secret, &[]*cdknag.NagPackSuppression{{
			Id: jsii.String("AwsSolutions-SMG4"),
			Reason: jsii.String("The secret holds an API token issued by the fulfilment provider; Secrets Manager cannot rotate it " +
				"(no rotation Lambda can ask the provider for a new token). The operator rotates it at the provider and puts the " +
				"new value; the function picks it up within app.ProviderCredentialsTTL (5 min)."),
		}}, jsii.Bool(true))
		s.ProviderSecret = secret
	}
	if props.FulfilmentProviderURL == DefaultFulfilmentProviderURL {
		awscdk.Annotations_Of(s.Stack).AddWarningV2(jsii.String(PlaceholderProviderURLWarning), jsii.String(
			"FulfilmentProviderURL is the placeholder "+DefaultFulfilmentProviderURL+" (it never resolves): every paid order's "+
				"shipment fails and reaches the fulfilment DLQ. Set -c ddb-outbox:fulfilmentProviderUrl=https://... before a real deployment."), nil)
	}
	fn.AddEnvironment(jsii.String(appenv.EnvIdempotencyTable), s.IdempotencyTable.TableName(), nil)
	fn.AddEnvironment(jsii.String(appenv.EnvProviderURL), jsii.String(props.FulfilmentProviderURL), nil)
	fn.AddEnvironment(jsii.String(appenv.EnvProviderSecretARN), s.ProviderSecret.SecretArn(), nil)
	return map[app.Resource]*string{
		app.ResourceIdempotencyTable: s.IdempotencyTable.TableArn(),
		app.ResourceProviderSecret:   s.ProviderSecret.SecretArn(),
	}, s.IdempotencyTable
}
