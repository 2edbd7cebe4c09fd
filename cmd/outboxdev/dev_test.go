package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDevRefusesDataWithEndpoint: `outboxdev dev -data FILE -endpoint URL`
// (or -data with AWS_ENDPOINT_URL_DYNAMODB set) is refused with a message
// naming both flags, instead of ignoring -data.
func TestDevRefusesDataWithEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := filepath.Join(t.TempDir(), "dev", "dev.db")
	err := runDev(ctx, []string{"-data", data, "-endpoint", "http://127.0.0.1:1", "-addr", "127.0.0.1:0", "-aws-addr", "", "-checkpoint-file", filepath.Join(t.TempDir(), "cp.json")})
	if err == nil || !strings.Contains(err.Error(), "-data") || !strings.Contains(err.Error(), "-endpoint") {
		t.Fatalf("runDev = %v, want -data with -endpoint refused, naming both", err)
	}
	if _, err := os.Stat(filepath.Dir(data)); !os.IsNotExist(err) {
		t.Fatalf("%s exists (%v): something was started", filepath.Dir(data), err)
	}
}
