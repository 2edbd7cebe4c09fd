package main

import (
	"context"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/awsclient"
)

// DefaultLocalRegion is the region used against a local endpoint when none
// is configured (AWS_REGION, the profile, -region).
const DefaultLocalRegion = "us-east-1"

// endpointVars are the SDK's endpoint variables outboxctl's clients read
// (the SDK's "service-specific endpoints" names).
var endpointVars = []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_EVENTBRIDGE"}

// target is where the clients go: -endpoint (every service) and -region.
type target struct {
	endpoint string
	region   string
	timeout  time.Duration
}

// clients are the SDK clients of one command.
type clients struct {
	ddb *dynamodb.Client
	sqs *sqs.Client
	eb  *eventbridge.Client
	// cw is CloudWatch (alarms test): AWS only, the local stack serves
	// none.
	cw    *cloudwatch.Client
	local bool
	// region is the clients' Region (-region, AWS_REGION, the profile's,
	// or DefaultLocalRegion against a local endpoint).
	region string
}

// isLoopback reports whether u is an http(s) URL whose host is localhost
// or a loopback IP address.
func isLoopback(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Hostname() == "" {
		return false
	}
	if p.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(p.Hostname())
	return ip != nil && ip.IsLoopback()
}

// localTarget reports whether the clients go to a local endpoint:
// -endpoint is given, or an AWS_ENDPOINT_URL* variable names a loopback
// address.
func (t target) localTarget() bool {
	if t.endpoint != "" {
		return true
	}
	for _, v := range endpointVars {
		if isLoopback(os.Getenv(v)) {
			return true
		}
	}
	return false
}

// connect builds the clients. Against a local endpoint the credentials are
// dummy static ones (nothing local checks them, and no AWS credentials are
// looked for: no IMDS call) and the region defaults to us-east-1; -endpoint
// then overrides every client's endpoint, AWS_ENDPOINT_URL_<SERVICE>
// included. Against AWS it is the SDK's default chain (environment,
// profile, SSO, role), and AWS_ENDPOINT_URL* apply as the SDK defines them.
func (t target) connect(ctx context.Context) (clients, error) {
	var opts []func(*awsconfig.LoadOptions) error
	local := t.localTarget()
	if local {
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	if t.region != "" {
		opts = append(opts, awsconfig.WithRegion(t.region))
	}
	cfg, err := awsclient.Load(ctx, opts...)
	if err != nil {
		return clients{}, err
	}
	if local && cfg.Region == "" {
		cfg.Region = DefaultLocalRegion
	}
	if cfg.Region == "" {
		return clients{}, errNoRegion
	}
	var ep *string
	if t.endpoint != "" {
		ep = aws.String(t.endpoint)
	}
	return clients{
		local:  local,
		region: cfg.Region,
		ddb: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			if ep != nil {
				o.BaseEndpoint = ep
			}
		}),
		sqs: sqs.NewFromConfig(cfg, func(o *sqs.Options) {
			if ep != nil {
				o.BaseEndpoint = ep
			}
		}),
		eb: eventbridge.NewFromConfig(cfg, func(o *eventbridge.Options) {
			if ep != nil {
				o.BaseEndpoint = ep
			}
		}),
		cw: cloudwatch.NewFromConfig(cfg),
	}, nil
}
