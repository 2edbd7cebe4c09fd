// Package dynoxide starts and stops a local Dynoxide server, the in-memory
// DynamoDB-compatible server (with transactions and Streams) that the local
// stack and the integration tests run against. The binary comes from the
// pinned npm package @dynoxide/linux-x64 (package.json at the repo root).
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
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// EnvBinary overrides the path of the dynoxide binary.
const EnvBinary = "DYNOXIDE_BIN"

// binaryRel is where npm installs the binary, relative to the repo root.
const binaryRel = "node_modules/@dynoxide/linux-x64/dynoxide"

// ErrNotInstalled means the dynoxide binary was not found: run `npm ci` at
// the repository root (make deps does) or set DYNOXIDE_BIN.
var ErrNotInstalled = errors.New("dynoxide: binary not found; run `npm ci` in the repository root or set " + EnvBinary)

// Server is a running Dynoxide process listening on 127.0.0.1.
type Server struct {
	// Endpoint is the base URL, e.g. "http://127.0.0.1:41234".
	Endpoint string
	cmd      *exec.Cmd
	done     chan struct{}
	once     sync.Once
}

// FindBinary returns the dynoxide binary path: $DYNOXIDE_BIN, else
// node_modules/@dynoxide/linux-x64/dynoxide in the current directory or any
// parent. It returns ErrNotInstalled when none exists.
func FindBinary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w (%s=%s: %v)", ErrNotInstalled, EnvBinary, p, err)
		}
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, binaryRel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNotInstalled
		}
		dir = parent
	}
}

// Start launches an in-memory Dynoxide on a free loopback port and waits up
// to 10 seconds until it answers HTTP. Stop it with Stop. Its stderr goes to
// logw when not nil.
func Start(ctx context.Context, logw *os.File) (*Server, error) {
	bin, err := FindBinary()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("dynoxide: pick a port: %w", err)
	}
	cmd := exec.Command(bin, "serve", "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	if logw != nil {
		cmd.Stdout, cmd.Stderr = logw, logw
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dynoxide: start %s: %w", bin, err)
	}
	s := &Server{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, done: make(chan struct{})}
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
			return errors.New("dynoxide: process exited during start-up")
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
