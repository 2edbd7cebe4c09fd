package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/infra/stack"
)

func TestFromContextDefaults(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cdk.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	infra := filepath.Join(root, "infra")
	if err := os.Mkdir(infra, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := fromContext(func(string) any { return nil }, infra)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.stackName != DefaultStackName || !cfg.nag || cfg.props.AssetRoot != filepath.Join(root, "dist") {
		t.Errorf("cfg = %+v", cfg)
	}
	if err := cfg.props.Validate(); err != nil {
		t.Errorf("default props invalid: %v", err)
	}
}

func TestFromContextValues(t *testing.T) {
	ctx := map[string]any{
		ctxStackName:      "Demo",
		ctxAssetRoot:      "/opt/dist",
		ctxAuthMode:       "none",
		ctxDestroy:        true, // JSON value from cdk.json
		ctxNag:            "false",
		ctxBatchSize:      "250", // string from -c
		ctxBatchingWindow: float64(5),
		ctxPendingShards:  "8",
		ctxReconcileRate:  "2",
	}
	cfg, err := fromContext(func(k string) any { return ctx[k] }, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.props
	if cfg.stackName != "Demo" || cfg.nag || p.AssetRoot != "/opt/dist" || p.AuthMode != stack.AuthNone || !p.Destroy ||
		p.Outbox.BatchSize != 250 || p.Outbox.MaxBatchingWindow != 5*time.Second || p.Outbox.PendingShards != 8 ||
		p.Outbox.ReconcileRate != 2*time.Minute {
		t.Errorf("cfg = %+v", cfg)
	}
}

func TestFromContextErrors(t *testing.T) {
	ctx := map[string]any{ctxBatchSize: "many", ctxDestroy: "perhaps", ctxAssetRoot: "/x"}
	if _, err := fromContext(func(k string) any { return ctx[k] }, t.TempDir()); err == nil {
		t.Error("want an error for a non-integer batch size and a non-boolean destroy")
	}
}
