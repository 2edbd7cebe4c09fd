package lambdamain

import (
	"errors"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// ErrNoTracing is Init's error when config.EnvTracing asks for tracing in a
// binary built with the tag notrace (no OpenTelemetry SDK linked).
var ErrNoTracing = errors.New("lambdamain: " + config.EnvTracing + "=" + config.TracingOn +
	" but this binary was built with the tag notrace: build it without that tag (make build TRACING=1)")
