package app

import (
	"context"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ddb-outbox/ddb-outbox/pkg/lambdamain"
)

// LambdaInit does what every function's init phase does once per execution
// environment (lambdamain.Init: a JSON slog logger with the Lambda request
// id, the default SDK configuration, and with config.EnvTracing on the OTLP
// tracer provider and the AWS SDK instrumentation), plus the example's
// Settings from the environment. It exits the process (an init failure
// Lambda reports) when either cannot be loaded; it is for main functions
// only, never for handlers.
func LambdaInit() (Settings, aws.Config, *slog.Logger) {
	rt, err := lambdamain.Init(context.Background())
	InitCheck(rt.Logger, err)
	s, err := SettingsFromEnv()
	InitCheck(rt.Logger, err)
	return s, rt.AWS, rt.Logger
}

// InitCheck exits the process with the error logged when err is not nil
// (lambdamain.Check). For main functions during Lambda init only.
func InitCheck(log *slog.Logger, err error) { lambdamain.Check(log, err) }
