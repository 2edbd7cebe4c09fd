package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
)

// SecretGetter is the one Secrets Manager operation the fulfilment consumer
// calls, with the SDK's signature (*secretsmanager.Client satisfies it).
type SecretGetter interface {
	GetSecretValue(ctx context.Context, params *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// SecretCallTimeout bounds one GetSecretValue call.
const SecretCallTimeout = 5 * time.Second

// ProviderCredentialsTTL is how long the fulfilment consumer reuses the
// provider token read from Secrets Manager (fulfilment.CachedCredentials):
// a rotated token is picked up within it, and a warm execution environment
// calls GetSecretValue at most once per TTL.
const ProviderCredentialsTTL = 5 * time.Minute

// ErrEmptySecret is returned (wrapped) when the provider secret holds no
// token: no SecretString, or only white space (for example the secret was
// created and never filled).
var ErrEmptySecret = errors.New("app: provider secret holds no token")

// secretToken reads the provider token from one secret.
type secretToken struct {
	client SecretGetter
	arn    string
}

// SecretToken returns a fulfilment.CredentialsSource that reads the
// provider's API token from the Secrets Manager secret arn (its complete
// ARN; appenv.EnvProviderSecretARN) on every call: wrap it in
// fulfilment.CachedCredentials (ProviderCredentials does).
//
// The secret's value is the token itself, as SecretString (for example
// `aws secretsmanager put-secret-value --secret-id <arn> --secret-string
// <token>`); leading and trailing white space is trimmed, so a value written
// from a file with a final newline works. A JSON object is not parsed: its
// text would be sent as the token. Credentials returns the GetSecretValue
// error wrapped with the ARN (AccessDenied, ResourceNotFound, a KMS error
// when the function may not decrypt the secret's key, a timeout after
// SecretCallTimeout), or an error wrapping ErrEmptySecret. Either is
// retryable for the consumer: the event stays on its queue.
func SecretToken(client SecretGetter, arn string) fulfilment.CredentialsSource {
	return &secretToken{client: client, arn: arn}
}

// Credentials reads the secret; see SecretToken.
func (s *secretToken) Credentials(ctx context.Context) (fulfilment.Credentials, error) {
	cctx, cancel := context.WithTimeout(ctx, SecretCallTimeout)
	defer cancel()
	out, err := s.client.GetSecretValue(cctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(s.arn)})
	if err != nil {
		return fulfilment.Credentials{}, fmt.Errorf("read provider secret %s: %w", s.arn, err)
	}
	token := strings.TrimSpace(aws.ToString(out.SecretString))
	if token == "" {
		return fulfilment.Credentials{}, fmt.Errorf("read provider secret %s: %w", s.arn, ErrEmptySecret)
	}
	return fulfilment.Credentials{Token: token}, nil
}

// ProviderCredentials returns the fulfilment consumer's provider
// credentials: nil when s.ProviderSecretARN is empty (the provider is called
// without an Authorization header, as against a local fake provider),
// otherwise SecretToken(client, s.ProviderSecretARN) cached for
// ProviderCredentialsTTL. client may be nil only when the ARN is empty.
func ProviderCredentials(s Settings, client SecretGetter) fulfilment.CredentialsSource {
	if s.ProviderSecretARN == "" {
		return nil
	}
	return &fulfilment.CachedCredentials{Source: SecretToken(client, s.ProviderSecretARN), TTL: ProviderCredentialsTTL}
}
