// Package awsclient loads one AWS SDK configuration for a process and builds
// the clients the functions use. It never invents credentials for real AWS
// (a local server's configuration is dynoxide.AWSConfig).
package awsclient

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
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
