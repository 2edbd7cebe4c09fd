// Package dynoxide starts and stops a local Dynoxide server, the in-memory
// DynamoDB-compatible server (with transactions and Streams) that the local
// stack and the integration tests run against. The binary is found by Locate:
// $DYNOXIDE_BIN, then a `dynoxide` on PATH (Homebrew, cargo, a release
// binary), then the pinned npm package @dynoxide/linux-x64 where it fits
// the platform; it is checked to run on this platform before it starts.
//
// Any other DynamoDB-compatible endpoint (DynamoDB Local, for example) can be
// used instead by setting AWS_ENDPOINT_URL_DYNAMODB and
// AWS_ENDPOINT_URL_DYNAMODB_STREAMS (or AWS_ENDPOINT_URL); see Endpoint.
package dynoxide

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// EnvBinary overrides the path of the dynoxide binary.
const EnvBinary = "DYNOXIDE_BIN"

// ErrNotInstalled means no dynoxide binary that can run on this platform was
// found (see Locate for the search order and the install options).
var ErrNotInstalled = errors.New("dynoxide: no usable binary found")

// Server is a running Dynoxide process listening on 127.0.0.1.
type Server struct {
	// Endpoint is the base URL, e.g. "http://127.0.0.1:41234".
	Endpoint string
	// Binary is the binary that runs, and where Locate found it.
	Binary Candidate
	cmd    *exec.Cmd
	done   chan struct{}
	once   sync.Once
}

// FindBinary returns the path Locate(Current()) chooses.
func FindBinary() (string, error) {
	c, err := Locate(Current())
	return c.Path, err
}

// Options configure StartWith.
type Options struct {
	// DBPath keeps the data in this SQLite file across restarts (Dynoxide's
	// --db-path); empty means in memory, lost when the server stops.
	DBPath string
	// Port is the loopback port (0: a free one).
	Port int
	// Log receives the server's output (nil: discarded).
	Log *os.File
}

// Start launches an in-memory Dynoxide on a free loopback port and waits up
// to 10 seconds until it answers HTTP. Stop it with Stop. Its output goes to
// logw when not nil.
func Start(ctx context.Context, logw *os.File) (*Server, error) {
	return StartWith(ctx, Options{Log: logw})
}

// StartWith launches Dynoxide with opts: the binary Locate chooses (an error
// wrapping ErrNotInstalled, with the install options, when none can run
// here), on 127.0.0.1, in memory or in opts.DBPath. It waits up to 10 s for
// the server to answer HTTP. The process is put in its own process group
// and is killed with its parent on Linux (Pdeathsig), so no server outlives
// the stack whatever signal ends it.
func StartWith(ctx context.Context, opts Options) (*Server, error) {
	bin, err := Locate(Current())
	if err != nil {
		return nil, err
	}
	// A free port is picked, released, then bound by Dynoxide: another
	// process can take it in between (parallel tests do). When the server
	// exits during start-up on a port chosen here, try a new one.
	attempts := 1
	if opts.Port == 0 {
		attempts = 3
	}
	for i := 1; ; i++ {
		s, err := startOnce(ctx, bin, opts)
		if err == nil || !errors.Is(err, errExitedEarly) || i == attempts {
			return s, err
		}
	}
}

// errExitedEarly: the server process exited before it answered.
var errExitedEarly = errors.New("dynoxide: process exited during start-up")

func startOnce(ctx context.Context, bin Candidate, opts Options) (*Server, error) {
	port := opts.Port
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return nil, fmt.Errorf("dynoxide: pick a port: %w", err)
		}
	}
	args := []string{"serve", "--host", "127.0.0.1", "--port", strconv.Itoa(port)}
	if opts.DBPath != "" {
		args = append(args, "--db-path", opts.DBPath)
	}
	cmd := exec.Command(bin.Path, args...)
	if opts.Log != nil {
		cmd.Stdout, cmd.Stderr = opts.Log, opts.Log
	}
	setChildAttrs(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dynoxide: start %s (found via %s): %w", bin.Path, bin.Source, err)
	}
	s := &Server{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), Binary: bin, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	if err := s.waitReady(ctx, 10*time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: 500 * time.Millisecond}
	for {
		select {
		case <-s.done:
			return errExitedEarly
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := client.Get(s.Endpoint)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dynoxide: not ready after %s: %w", limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit. Safe to call twice.
func (s *Server) Stop() {
	s.once.Do(func() {
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Kill()
		}
		<-s.done
	})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// AWSConfig returns an SDK configuration for a local DynamoDB-compatible server
// at endpoint: region us-east-1, dummy static credentials, BaseEndpoint set so
// every client (DynamoDB, DynamoDB Streams) calls endpoint and never AWS.
func AWSConfig(endpoint string) aws.Config {
	return aws.Config{
		Region:           "us-east-1",
		Credentials:      credentials.NewStaticCredentialsProvider("local", "local", ""),
		BaseEndpoint:     aws.String(endpoint),
		RetryMaxAttempts: 5,
	}
}
