package app

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
)

// fakeSecrets answers GetSecretValue with value or err and counts calls.
type fakeSecrets struct {
	value *string
	err   error
	calls []string
}

func (f *fakeSecrets) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	if _, ok := ctx.Deadline(); !ok {
		return nil, errors.New("no deadline on the call")
	}
	f.calls = append(f.calls, aws.ToString(in.SecretId))
	if f.err != nil {
		return nil, f.err
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: f.value}, nil
}

const testSecretARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:provider-AbCdEf"

func TestSecretToken(t *testing.T) {
	t.Parallel()
	denied := errors.New("AccessDeniedException")
	for _, c := range []struct {
		name    string
		fake    *fakeSecrets
		want    string
		wantErr error
	}{
		{"token", &fakeSecrets{value: aws.String("tok-123")}, "tok-123", nil},
		{"trailing newline trimmed", &fakeSecrets{value: aws.String("  tok-123\n")}, "tok-123", nil},
		{"empty", &fakeSecrets{value: aws.String(" \n")}, "", ErrEmptySecret},
		{"no SecretString", &fakeSecrets{}, "", ErrEmptySecret},
		{"API error", &fakeSecrets{err: denied}, "", denied},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cr, err := SecretToken(c.fake, testSecretARN).Credentials(context.Background())
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if cr.Token != c.want {
				t.Errorf("token = %q, want %q", cr.Token, c.want)
			}
			if len(c.fake.calls) != 1 || c.fake.calls[0] != testSecretARN {
				t.Errorf("GetSecretValue calls = %v, want one for %s", c.fake.calls, testSecretARN)
			}
		})
	}
}

// GIVEN no secret ARN, THEN no credentials (no Authorization header);
// GIVEN one, THEN the token is read once and reused within the TTL.
func TestProviderCredentials(t *testing.T) {
	t.Parallel()
	if c := ProviderCredentials(Settings{}, nil); c != nil {
		t.Errorf("no ARN: credentials = %#v, want nil", c)
	}
	fake := &fakeSecrets{value: aws.String("tok")}
	c := ProviderCredentials(Settings{ProviderSecretARN: testSecretARN}, fake)
	cached, ok := c.(*fulfilment.CachedCredentials)
	if !ok || cached.TTL != ProviderCredentialsTTL {
		t.Fatalf("credentials = %#v, want CachedCredentials with TTL %s", c, ProviderCredentialsTTL)
	}
	for range 3 {
		cr, err := c.Credentials(context.Background())
		if err != nil || cr.Token != "tok" {
			t.Fatalf("Credentials = %+v, %v", cr, err)
		}
	}
	if len(fake.calls) != 1 {
		t.Errorf("%d GetSecretValue calls, want 1 (cached)", len(fake.calls))
	}
}
