// Package awsclient loads one AWS SDK configuration for a process and builds
// the clients the functions use. It never invents credentials for real AWS:
// Local returns a configuration with dummy static credentials and an explicit
// endpoint, for the local stack and tests only.
package awsclient

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Load returns the default SDK configuration (environment, shared config,
// Lambda role). Endpoints follow AWS_ENDPOINT_URL and
// AWS_ENDPOINT_URL_<SERVICE> as the SDK defines them.
func Load(ctx context.Context, opts ...func(*awsconfig.LoadOptions) error) (aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS config: %w", err)
	}
	return cfg, nil
}

// Local returns an SDK configuration for a local DynamoDB-compatible server
// at endpoint: region us-east-1, dummy static credentials, BaseEndpoint set so
// every client (DynamoDB, DynamoDB Streams) calls endpoint and never AWS.
func Local(endpoint string) aws.Config {
	return aws.Config{
		Region:           "us-east-1",
		Credentials:      credentials.NewStaticCredentialsProvider("local", "local", ""),
		BaseEndpoint:     aws.String(endpoint),
		RetryMaxAttempts: 5,
	}
}
