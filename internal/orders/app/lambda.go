package app

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ddb-outbox/ddb-outbox/internal/awsclient"
)

// LambdaInit does what every function's init phase does once per execution
// environment: a JSON slog logger with the Lambda request id
// (lambdacontext.NewLogger), Settings from the environment and the default
// SDK configuration, and with config.EnvTracing on the OTLP tracer provider
// and the AWS SDK instrumentation (see Traced). It exits the process (an init failure Lambda reports)
// when either cannot be loaded; it is for main functions only, never for
// handlers.
func LambdaInit() (Settings, aws.Config, *slog.Logger) {
	log := lambdacontext.NewLogger()
	slog.SetDefault(log)
	s, err := SettingsFromEnv()
	InitCheck(log, err)
	cfg, err := awsclient.Load(context.Background())
	InitCheck(log, err)
	InitCheck(log, initTracing(s, &cfg, log))
	return s, cfg, log
}

// InitCheck exits the process with the error logged when err is not nil.
// For main functions during Lambda init only.
func InitCheck(log *slog.Logger, err error) {
	if err != nil {
		log.Error("init failed", "error", err)
		os.Exit(1)
	}
}
