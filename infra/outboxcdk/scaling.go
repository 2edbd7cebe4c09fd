package outboxcdk

import (
	"errors"
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// Limits of an SQS event source mapping's scaling settings (Lambda
// developer guide, services-sqs-scaling; CloudFormation
// AWS::Lambda::EventSourceMapping ScalingConfig and ProvisionedPollerConfig).
const (
	MinSQSMaxConcurrency = 2
	MaxSQSMaxConcurrency = 1000
	// MinSQSPollers is the smallest MinimumPollers and MaximumPollers of an
	// SQS mapping in provisioned mode; MaxSQSMinimumPollers the largest
	// MinimumPollers.
	MinSQSPollers        = 2
	MaxSQSMinimumPollers = 200
	// MaxSQSMaximumPollers is the largest MaximumPollers accepted here: 2,000
	// (CloudFormation and the CDK; a newer Lambda API page gives 10,000 for
	// SQS).
	MaxSQSMaximumPollers = 2000
)

// ErrInvalidScaling is wrapped by every error SQSScaling.Validate returns.
var ErrInvalidScaling = errors.New("outboxcdk: invalid SQS event source mapping scaling")

// SQSScaling is how a Lambda SQS event source mapping scales: either by
// MaxConcurrency (the mapping's ScalingConfig.MaximumConcurrency, standard
// mode) or in provisioned mode (ProvisionedPollerConfig: a minimum and
// maximum number of dedicated event pollers, each driving up to
// config.SQSProvisionedInvokesPerPoller concurrent invocations). Lambda does
// not allow both on one mapping. The zero value is standard mode with
// config.DefaultConsumerMaxConcurrency.
//
// Whatever the mode, the function's reserved concurrency must be at least
// PeakConcurrency: an invocation beyond it is throttled, and a throttled
// SQS message returns to its queue and counts toward maxReceiveCount
// (Lambda developer guide, services-sqs-scaling: "Make sure that your
// function's reserved concurrency is greater than or equal to the total
// maximum concurrency").
type SQSScaling struct {
	// MaxConcurrency is the mapping's MaximumConcurrency, 2..1000. Zero:
	// config.DefaultConsumerMaxConcurrency, unless Provisioned is set.
	MaxConcurrency int `json:"maxConcurrency,omitempty"`
	// Provisioned, when set, puts the mapping in provisioned mode (extra
	// cost per poller; AWS Lambda pricing) instead of MaxConcurrency.
	Provisioned *ProvisionedPollers `json:"provisioned,omitempty"`
}

// ProvisionedPollers are an SQS mapping's provisioned-mode bounds.
type ProvisionedPollers struct {
	// Minimum is MinimumPollers, 2..200 (pollers kept ready, billed).
	Minimum int `json:"min"`
	// Maximum is MaximumPollers, Minimum..2000.
	Maximum int `json:"max"`
}

// withDefaults returns s with the default MaxConcurrency filled in.
func (s SQSScaling) withDefaults() SQSScaling {
	if s.MaxConcurrency == 0 && s.Provisioned == nil {
		s.MaxConcurrency = config.DefaultConsumerMaxConcurrency
	}
	return s
}

// Validate returns nil or an error wrapping ErrInvalidScaling that lists
// every value outside the limits above, and the use of both modes at once.
func (s SQSScaling) Validate() error {
	s = s.withDefaults()
	var errs []error
	if s.Provisioned != nil {
		if s.MaxConcurrency != 0 {
			errs = append(errs, fmt.Errorf("MaxConcurrency %d and provisioned pollers cannot be combined on one SQS event source mapping", s.MaxConcurrency))
		}
		p := s.Provisioned
		if p.Minimum < MinSQSPollers || p.Minimum > MaxSQSMinimumPollers {
			errs = append(errs, fmt.Errorf("provisioned MinimumPollers %d is outside %d..%d", p.Minimum, MinSQSPollers, MaxSQSMinimumPollers))
		}
		if p.Maximum < max(p.Minimum, MinSQSPollers) || p.Maximum > MaxSQSMaximumPollers {
			errs = append(errs, fmt.Errorf("provisioned MaximumPollers %d is outside MinimumPollers..%d (%d..%d)", p.Maximum, MaxSQSMaximumPollers, max(p.Minimum, MinSQSPollers), MaxSQSMaximumPollers))
		}
	} else if s.MaxConcurrency < MinSQSMaxConcurrency || s.MaxConcurrency > MaxSQSMaxConcurrency {
		errs = append(errs, fmt.Errorf("MaxConcurrency %d is outside %d..%d", s.MaxConcurrency, MinSQSMaxConcurrency, MaxSQSMaxConcurrency))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidScaling, errors.Join(errs...))
}

// PeakConcurrency is the most concurrent invocations the mapping can start:
// MaxConcurrency, or Provisioned.Maximum × config.SQSProvisionedInvokesPerPoller.
// It is the least reserved concurrency that keeps the mapping from being
// throttled.
func (s SQSScaling) PeakConcurrency() int {
	s = s.withDefaults()
	if s.Provisioned != nil {
		return s.Provisioned.Maximum * config.SQSProvisionedInvokesPerPoller
	}
	return s.MaxConcurrency
}

// Apply sets the scaling of p: MaxConcurrency, or ProvisionedPollerConfig
// (MinimumPollers, MaximumPollers) in provisioned mode, and clears the
// other. Call Validate first.
func (s SQSScaling) Apply(p *awslambdaeventsources.SqsEventSourceProps) {
	s = s.withDefaults()
	p.MaxConcurrency, p.ProvisionedPollerConfig = nil, nil
	if s.Provisioned != nil {
		p.ProvisionedPollerConfig = &awslambda.ProvisionedPollerConfig{
			MinimumPollers: jsii.Number(s.Provisioned.Minimum),
			MaximumPollers: jsii.Number(s.Provisioned.Maximum),
		}
		return
	}
	p.MaxConcurrency = jsii.Number(s.MaxConcurrency)
}
