// Package gofunc creates the project's Go Lambda functions the one way this
// repository deploys them: a pre-built `bootstrap` executable (compiled by
// `make build` for linux/arm64; see
// https://docs.aws.amazon.com/lambda/latest/dg/golang-package.html)
// packaged as a zip asset,
// the provided.al2023 runtime on ARM_64 (Graviton), handler "bootstrap", and
// an explicit CloudWatch Logs log group with a retention period. There is no
// Docker bundling: the CDK app never compiles Go, it only zips dist/<name>/.
//
// Every function writes its logs in Lambda's JSON log format (LoggingConfig
// LogFormat JSON): the runtime's own records (START, END, REPORT, errors)
// become JSON objects with the request id, and the application's slog JSON
// lines are kept as structured records, so CloudWatch Logs Insights can
// filter on actor, request_id, event_id and reason directly.
//
// Each function gets its own IAM role whose only built-in permission is
// logs:CreateLogStream + logs:PutLogEvents on its own log group (instead of
// the AWS managed AWSLambdaBasicExecutionRole policy, which allows writing to
// any log group); callers add the rest with grants.
//
// Encryption: with Props.EncryptionKey (a customer managed KMS key) the
// function's log group is encrypted with it (KmsKeyId) and so are its
// environment variables at rest (KmsKeyArn; Lambda otherwise uses its AWS
// managed key, https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars-encryption.html).
// The key policy must let CloudWatch Logs use the key: AllowLogsToUseKey
// adds AWS's documented statement (New calls it).
//
// Tracing: every function has X-Ray active tracing (TracingConfig Active):
// Lambda samples invocations, records its own segments and continues the
// trace an event brings (the X-Ray header EventBridge hands an SQS target
// as the AWSTraceHeader attribute, or a caller's). CDK grants the role
// xray:PutTraceSegments and xray:PutTelemetryRecords on "*" (X-Ray actions
// support no resource-level permissions). The functions' own OpenTelemetry
// spans (pkg/outboxtrace) are exported only with a telemetry layer
// (Props.TelemetryLayerArn, e.g. the AWS Distro for OpenTelemetry collector
// layer, whose collector receives OTLP on localhost:4318 and forwards to
// X-Ray with the same permissions); without one, OUTBOX_TRACING stays off
// and the functions pay nothing for tracing.
package gofunc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// Handler is the handler name of a provided.al2023 function: the runtime
// executes the file named bootstrap at the root of the zip.
const Handler = "bootstrap"

// Defaults applied by New for zero Props fields.
const (
	// DefaultMemoryMB is the function memory in MB (128..10240).
	DefaultMemoryMB = 256
	// DefaultTimeout is the function timeout.
	DefaultTimeout = 30 * time.Second
	// DefaultLogRetention is the log group retention.
	DefaultLogRetention = awslogs.RetentionDays_ONE_MONTH
)

// ErrMissingBootstrap is returned by New when AssetDir holds no bootstrap
// file: run `make build` first (or point AssetDir at a directory that has one).
var ErrMissingBootstrap = errors.New("gofunc: bootstrap executable not found")

// Props configures one function. Zero fields take the defaults above.
type Props struct {
	// AssetDir is the directory whose contents become the function's zip; it
	// must contain an executable named bootstrap (for example
	// <repo>/dist/relay). Required.
	AssetDir string
	// Description is the function description shown in the console.
	Description string
	// Environment holds the function's environment variables (names from
	// pkg/config). May be nil; more can be added later with AddEnvironment.
	Environment map[string]string
	// MemoryMB is the memory size in MB. Default DefaultMemoryMB.
	MemoryMB int
	// Timeout is the function timeout (whole seconds, 1 s..15 min). Default
	// DefaultTimeout.
	Timeout time.Duration
	// LogRetention is the retention of the function's log group. Default
	// DefaultLogRetention (one month).
	LogRetention awslogs.RetentionDays
	// RemovalPolicy applies to the log group. Default RETAIN.
	RemovalPolicy awscdk.RemovalPolicy
	// ReservedConcurrency is the function's reserved concurrency
	// (ReservedConcurrentExecutions): at most this many instances run at
	// once, and they are always available. 0 reserves none (the function
	// shares the account's unreserved pool). Negative is an error.
	ReservedConcurrency int
	// EncryptionKey, when set, is a customer managed KMS key that encrypts
	// the function's log group and its environment variables; New adds the
	// key policy statement CloudWatch Logs needs (AllowLogsToUseKey). The
	// role needs no KMS grant for either: CloudWatch Logs encrypts what the
	// role writes, and Lambda decrypts the environment through its own
	// grant. nil: CloudWatch Logs' own encryption and Lambda's AWS managed
	// key.
	EncryptionKey awskms.IKey
	// TelemetryLayerArn, when set, adds this Lambda layer (an OTLP
	// collector extension listening on localhost:4318, e.g. the ADOT
	// collector layer for arm64 of the region) and turns the functions'
	// OpenTelemetry tracing on: config.EnvTracing=config.TracingOn and
	// OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318. The bootstrap
	// must then be built with OpenTelemetry (make build TRACING=1; a
	// notrace build fails its init). Empty: X-Ray active tracing only.
	TelemetryLayerArn string
}

// OTLPLocalEndpoint is the OTLP/HTTP endpoint of a collector extension
// running in the execution environment (the ADOT collector layer's default
// receiver).
const OTLPLocalEndpoint = "http://localhost:4318"

// New creates a Go function with id under scope, its log group (id +
// "Logs") and its role (id + "Role"). It returns an error wrapping ErrMissingBootstrap when
// AssetDir/bootstrap does not exist, and an error when Timeout is not a whole
// number of seconds between 1 s and 15 min or ReservedConcurrency is
// negative.
func New(scope constructs.Construct, id string, p Props) (awslambda.Function, error) {
	if p.AssetDir == "" {
		return nil, fmt.Errorf("gofunc: %s: AssetDir is required", id)
	}
	abs, err := filepath.Abs(p.AssetDir)
	if err != nil {
		return nil, fmt.Errorf("gofunc: %s: %w", id, err)
	}
	if st, err := os.Stat(filepath.Join(abs, Handler)); err != nil || st.IsDir() {
		return nil, fmt.Errorf("%w in %s (function %s): run `make build` first", ErrMissingBootstrap, abs, id)
	}
	if p.MemoryMB == 0 {
		p.MemoryMB = DefaultMemoryMB
	}
	if p.Timeout == 0 {
		p.Timeout = DefaultTimeout
	}
	if p.Timeout%time.Second != 0 || p.Timeout < time.Second || p.Timeout > 15*time.Minute {
		return nil, fmt.Errorf("gofunc: %s: timeout %s must be whole seconds in 1s..15m", id, p.Timeout)
	}
	if p.LogRetention == "" {
		p.LogRetention = DefaultLogRetention
	}
	if p.ReservedConcurrency < 0 {
		return nil, fmt.Errorf("gofunc: %s: reserved concurrency %d is negative", id, p.ReservedConcurrency)
	}
	if p.RemovalPolicy == "" {
		p.RemovalPolicy = awscdk.RemovalPolicy_RETAIN
	}
	if p.EncryptionKey != nil {
		AllowLogsToUseKey(p.EncryptionKey)
	}
	logs := awslogs.NewLogGroup(scope, jsii.String(id+"Logs"), &awslogs.LogGroupProps{
		Retention:     p.LogRetention,
		RemovalPolicy: p.RemovalPolicy,
		EncryptionKey: p.EncryptionKey,
	})
	role := awsiam.NewRole(scope, jsii.String(id+"Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("Execution role of the " + id + " function"),
	})
	logs.GrantWrite(role)
	env := make(map[string]*string, len(p.Environment))
	for k, v := range p.Environment {
		env[k] = jsii.String(v)
	}
	var layers *[]awslambda.ILayerVersion
	if p.TelemetryLayerArn != "" {
		layers = &[]awslambda.ILayerVersion{awslambda.LayerVersion_FromLayerVersionArn(scope, jsii.String(id+"TelemetryLayer"), jsii.String(p.TelemetryLayerArn))}
		env[config.EnvTracing] = jsii.String(config.TracingOn)
		env["OTEL_EXPORTER_OTLP_ENDPOINT"] = jsii.String(OTLPLocalEndpoint)
	}
	var reserved *float64
	if p.ReservedConcurrency > 0 {
		reserved = jsii.Number(p.ReservedConcurrency)
	}
	fn := awslambda.NewFunction(scope, jsii.String(id), &awslambda.FunctionProps{
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String(Handler),
		Code:         awslambda.Code_FromAsset(jsii.String(abs), nil),
		Description:  jsii.String(p.Description),
		MemorySize:   jsii.Number(p.MemoryMB),
		Timeout:      awscdk.Duration_Seconds(jsii.Number(p.Timeout.Seconds())),
		Environment:  &env,
		LogGroup:     logs,
		// JSON log format (Lambda developer guide, monitoring-cloudwatchlogs-advanced)
		LoggingFormat:                awslambda.LoggingFormat_JSON,
		ReservedConcurrentExecutions: reserved,
		Role:                         role,
		Tracing:                      awslambda.Tracing_ACTIVE,
		Layers:                       layers,
		EnvironmentEncryption:        p.EncryptionKey,
	})
	cdknag.NagSuppressions_AddResourceSuppressions(role, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-IAM5"),
		Reason: jsii.String("X-Ray active tracing: xray:PutTraceSegments and xray:PutTelemetryRecords support no resource-level " +
			"permissions, so their resource is * (Lambda's documented execution-role permissions for tracing)."),
		AppliesTo: &[]any{jsii.String("Resource::*")},
	}}, jsii.Bool(true))
	return fn, nil
}

// LogsKeyStatementID is the Sid of the key policy statement
// AllowLogsToUseKey adds.
const LogsKeyStatementID = "CloudWatchLogsEncryptsThisAccountsLogGroups"

// LogsKeyActions are the KMS actions CloudWatch Logs gets on a key that
// encrypts log groups: AWS's documented list (CloudWatch Logs user guide,
// https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html,
// "Step 2: Set permissions on the KMS key"). The wildcards are AWS's own: a
// key policy CloudWatch Logs cannot use fails the log group's creation, and
// later every PutLogEvents.
var LogsKeyActions = []string{"kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"}

// logsMayUseKey names the marker child AllowLogsToUseKey leaves on a key,
// so that the statement is added once however many log groups use the key.
const logsMayUseKey = "CloudWatchLogsMayUseThisKey"

// AllowLogsToUseKey adds to key's policy the statement that lets CloudWatch
// Logs of the stack's region (principal logs.<region>.amazonaws.com) use it
// for log groups of the stack's account and region only: LogsKeyActions
// with the condition ArnLike kms:EncryptionContext:aws:logs:arn
// arn:<partition>:logs:<region>:<account>:log-group:* (CloudWatch Logs binds
// a log group's data keys to that encryption context, its ARN; same page).
// A log group's own ARN cannot be named: the log group refers to the key,
// and the key would then refer to the log group (a dependency cycle). It
// adds the statement once per key; a key imported by ARN keeps its own
// policy (nothing is added), which must allow the same.
func AllowLogsToUseKey(key awskms.IKey) {
	if key.Node().TryFindChild(jsii.String(logsMayUseKey)) != nil {
		return
	}
	if c, ok := key.(constructs.Construct); ok {
		constructs.NewConstruct(c, jsii.String(logsMayUseKey))
	}
	stack := awscdk.Stack_Of(key)
	key.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid: jsii.String(LogsKeyStatementID),
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(awscdk.Fn_Join(jsii.String(""), &[]*string{
			jsii.String("logs."), stack.Region(), jsii.String(".amazonaws.com"),
		}), nil)},
		Actions:   jsii.Strings(LogsKeyActions...),
		Resources: jsii.Strings("*"),
		Conditions: &map[string]any{"ArnLike": map[string]any{
			"kms:EncryptionContext:aws:logs:arn": stack.FormatArn(&awscdk.ArnComponents{
				Service: jsii.String("logs"), Resource: jsii.String("log-group"), ResourceName: jsii.String("*"),
				ArnFormat: awscdk.ArnFormat_COLON_RESOURCE_NAME,
			}),
		}},
	}), nil)
}
