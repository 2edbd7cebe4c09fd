package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorsSayWhatToDo: a refused connection asks whether make dev runs;
// no region (against AWS) names -endpoint for the local stack.
func TestErrorsSayWhatToDo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"-endpoint", closed, "-timeout", "5s", "parked", "-table", "dev-outbox"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "nothing listens at "+closed+": is `make dev` running?") {
		t.Errorf("refused connection: err = %v", err)
	}

	for _, v := range append([]string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"}, endpointVars...) {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	err = run(context.Background(), []string{"parked", "-table", "dev-outbox"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "no AWS region") || !strings.Contains(err.Error(), "-endpoint http://127.0.0.1:4580") {
		t.Errorf("no region: err = %v", err)
	}
}
