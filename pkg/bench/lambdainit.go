package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"time"
)

// RuntimeAPINextPath is the Lambda Runtime API request a function's runtime
// sends when its init phase is over and it is ready for an invocation
// (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html).
const RuntimeAPINextPath = "/2018-06-01/runtime/invocation/next"

// InitResult is the init time of one Lambda binary.
type InitResult struct {
	Name string `json:"name"`
	// Runs are the measured starts, process start → first GET .../next.
	Runs []time.Duration `json:"runs_ns"`
	// MedianMs is the median of Runs, in milliseconds.
	MedianMs float64 `json:"median_ms"`
	Error    string  `json:"error,omitempty"`
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
		d, err := startOnce(ctx, bin, append(env, "AWS_LAMBDA_RUNTIME_API="+ln.Addr().String()), ready)
		if err != nil {
			res.Error = err.Error()
			continue
		}
		res.Runs = append(res.Runs, d)
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
	cmd.Stdout, cmd.Stderr = nil, nil
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
		return 0, fmt.Errorf("%s exited during init: %v", bin, err)
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
