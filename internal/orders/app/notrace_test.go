package app

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// TestNotraceBuildRefusesTracing builds the relay as `make build` does
// (tag notrace: no OpenTelemetry SDK linked) and starts it with tracing
// asked for: its init fails, naming the build that has tracing, instead of
// running untraced. The same binary with tracing off gets past init (it
// then waits for the Lambda Runtime API, which is absent here).
func TestNotraceBuildRefusesTracing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "relay")
	build := exec.Command("go", "build", "-tags", "lambda.norpc,notrace", "-o", bin, "../../../functions/relay")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	base := []string{"OUTBOX_TABLE_NAME=t", "EVENT_BUS_NAME=b", "PARKED_QUEUE_URL=https://sqs.us-east-1.amazonaws.com/1/p",
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y", "HOME=" + t.TempDir(),
		"AWS_LAMBDA_RUNTIME_API=127.0.0.1:1"}
	cmd := exec.Command(bin)
	cmd.Env = append(base, config.EnvTracing+"="+config.TracingOn)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "make build TRACING=1") || !strings.Contains(string(out), "init failed") {
		t.Fatalf("tracing on in a notrace build: err %v, output %s", err, out)
	}
	cmd = exec.Command(bin)
	cmd.Env = append(base, config.EnvTracing+"="+config.TracingOff)
	out, _ = cmd.CombinedOutput()
	if strings.Contains(string(out), "init failed") {
		t.Fatalf("tracing off: init failed: %s", out)
	}
}
