package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// RuntimeAPINextPath is the Lambda Runtime API request a function's runtime
// sends when its init phase is over and it is ready for an invocation
// (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html).
const RuntimeAPINextPath = "/2018-06-01/runtime/invocation/next"

// ErrInitFailed is returned by make bench when a Lambda binary's init could
// not be measured (it exited or never asked for work): the report shows
// the failure, never a time.
var ErrInitFailed = errors.New("bench: a Lambda binary's init could not be measured (see section f)")

// InitResult is the init time of one Lambda binary.
type InitResult struct {
	Name string `json:"name"`
	// Runs are the measured starts, process start → first GET .../next.
	Runs []time.Duration `json:"runs_ns"`
	// Attempts is how many starts were tried; Failed how many of them did
	// not reach the Runtime API (exited during init, or no request within
	// 10 s).
	Attempts int `json:"attempts"`
	Failed   int `json:"failed"`
	// MedianMs is the median of Runs, in milliseconds; meaningful only
	// when OK.
	MedianMs float64 `json:"median_ms"`
	// Error is the last failure: the exit status and the end of what the
	// process wrote (its "init failed" log line names the cause).
	Error string `json:"error,omitempty"`
}

// OK reports whether every start reached the Runtime API.
func (r InitResult) OK() bool { return r.Attempts > 0 && r.Failed == 0 && len(r.Runs) == r.Attempts }

// Median is the report's cell for the init time: the median in
// milliseconds ("12.3"), or "FAILED (n of m starts)" when any start failed
// — never a time for a function that did not start.
func (r InitResult) Median() string {
	if !r.OK() {
		return fmt.Sprintf("FAILED (%d of %d starts)", r.Failed, r.Attempts)
	}
	return fmt.Sprintf("%.1f", r.MedianMs)
}

// MeasureInit starts bin runs times with env plus AWS_LAMBDA_RUNTIME_API
// pointing at an in-process fake Runtime API, and measures the time from
// process start to the first GET /2018-06-01/runtime/invocation/next. The
// process is killed as soon as it asks for work (no invocation is served).
// env should be complete (the parent environment is not inherited), so no
// real credentials reach the binary.
func MeasureInit(ctx context.Context, name, bin string, env []string, runs int) InitResult {
	res := InitResult{Name: name}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		res.Error = err.Error()
		return res
	}
	ready := make(chan time.Time, 1)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == RuntimeAPINextPath {
			select {
			case ready <- time.Now():
			default:
			}
			<-r.Context().Done() // hold the long poll until the process dies
			return
		}
		w.WriteHeader(http.StatusAccepted) // init/error reports and the like
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	for i := 0; i < runs && ctx.Err() == nil; i++ {
		res.Attempts++
		d, err := startOnce(ctx, bin, append(env, "AWS_LAMBDA_RUNTIME_API="+ln.Addr().String()), ready)
		if err != nil {
			res.Failed++
			res.Error = err.Error()
			continue
		}
		res.Runs = append(res.Runs, d)
	}
	if res.Attempts == 0 {
		res.Error = "not started: " + ctx.Err().Error()
	}
	if len(res.Runs) > 0 {
		s := append([]time.Duration(nil), res.Runs...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		res.MedianMs = ms(s[len(s)/2])
	}
	return res
}

func startOnce(ctx context.Context, bin string, env []string, ready chan time.Time) (time.Duration, error) {
	select { // drop a stale signal
	case <-ready:
	default:
	}
	cmd := exec.Command(bin)
	cmd.Env = env
	out := &tail{max: 1024}
	cmd.Stdout, cmd.Stderr = out, out
	exited := make(chan error, 1)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited //nolint:errcheck // Wait's error after Kill is the kill itself
	}()
	select {
	case t := <-ready:
		return t.Sub(start), nil
	case err := <-exited:
		exited <- err // for the deferred wait
		return 0, fmt.Errorf("%s exited during init: %v: %s", filepath.Base(bin), err, strings.TrimSpace(out.String()))
	case <-time.After(10 * time.Second):
		return 0, errors.New("no runtime API request within 10 s")
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// FileSize returns the size of path in bytes, or -1 if it cannot be read.
func FileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// tail keeps the last max bytes written to it; safe for concurrent use (a
// process's stdout and stderr).
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.ToValidUTF8(t.buf, nil))
}

// Functions returns the Lambda functions `make build` compiles: every
// directory under dir (the repository's functions/) holding a main.go,
// sorted.
func Functions(dir string) ([]string, error) {
	mains, err := filepath.Glob(filepath.Join(dir, "*", "main.go"))
	if err != nil {
		return nil, err
	}
	if len(mains) == 0 {
		return nil, fmt.Errorf("bench: no functions/<name>/main.go under %s", dir)
	}
	var names []string
	for _, m := range mains {
		names = append(names, filepath.Base(filepath.Dir(m)))
	}
	sort.Strings(names)
	return names, nil
}

// InitEnv is the complete environment MeasureInit starts every function
// with: dummy credentials, every AWS endpoint at endpoint (a local server;
// never AWS), no shared config files or instance metadata, the Lambda
// variables the runtime reads, and a value for every resource variable of
// pkg/config a function requires at init (tables, queues, the bus, the
// fulfilment provider's URL), the way the CDK stack sets them. Optional
// settings (tracing, the provider's secret, retention, shards) keep their
// defaults, so init does no network call.
func InitEnv(endpoint string) []string {
	const queue = "https://sqs.us-east-1.amazonaws.com/000000000000/bench-"
	return []string{
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local",
		"AWS_ENDPOINT_URL=" + endpoint, "AWS_ENDPOINT_URL_SQS=" + endpoint, "AWS_ENDPOINT_URL_EVENTBRIDGE=" + endpoint,
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"AWS_LAMBDA_FUNCTION_NAME=bench", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=128", "AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/bench", "AWS_LAMBDA_LOG_STREAM_NAME=bench",
		config.EnvOutboxTable + "=bench-outbox", appenv.EnvOrdersTable + "=bench-orders", config.EnvDedupTable + "=bench-dedup",
		appenv.EnvLedgerTable + "=bench-ledger", appenv.EnvNotificationsTable + "=bench-notifications",
		appenv.EnvShipmentsTable + "=bench-shipments", appenv.EnvIdempotencyTable + "=bench-idempotency",
		appenv.EnvProviderURL + "=" + endpoint,
		config.EnvEventBusName + "=bench-bus", config.EnvParkedQueueURL + "=" + queue + "parked",
		config.EnvConsumerDLQURL + "=" + queue + "consumer-dlq",
		config.EnvEventSource + "=" + appenv.EventSource, config.EnvConsumerTable + "=bench-ledger",
	}
}
