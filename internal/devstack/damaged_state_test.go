package devstack_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
)

// TestStartRecoversFromDamagedState: a stack restarted on kept data whose
// stream checkpoint file is empty, cut short or garbage, or whose runtime
// state journal is cut short (a crash, a full disk, a bad copy), starts
// instead of failing: one warning names the file and says what was done —
// the checkpoint file moved aside and the stream read again from its
// oldest record, or the journal's good records kept — and every event ends
// applied exactly once: the records published again are absorbed by the
// consumers' dedup, nothing is lost, and new orders flow. Real Dynoxide
// with a data file, real restarts.
func TestStartRecoversFromDamagedState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		checkpoint bool // the damage is to the checkpoint file (else the journal)
		damage     func(t *testing.T, path string)
	}{
		{"empty checkpoint file", true, func(t *testing.T, p string) { writeFile(t, p, nil) }},
		{"truncated checkpoint file", true, func(t *testing.T, p string) { writeFile(t, p, readFile(t, p)[:len(readFile(t, p))/2]) }},
		{"garbage checkpoint file", true, func(t *testing.T, p string) { writeFile(t, p, []byte("\x00\x17garbage\xff{{{")) }},
		{"truncated state journal", false, func(t *testing.T, p string) { b := readFile(t, p); writeFile(t, p, b[:len(b)-7]) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			dir := t.TempDir()
			srv, err := dynoxide.StartWith(ctx, dynoxide.Options{DBPath: filepath.Join(dir, "data.db")})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			opts := devstack.Options{Endpoint: srv.Endpoint, Prefix: "damaged", Logger: slog.New(slog.DiscardHandler),
				CheckpointFile: filepath.Join(dir, "checkpoints.json"), RuntimeStateFile: filepath.Join(dir, "state.journal")}
			first, err := devstack.Start(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			rep := devstack.Drive(ctx, first.URL, devstack.DriveOptions{Orders: 12, Concurrency: 2, Logger: slog.New(slog.DiscardHandler)})
			if err := first.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			delivered := first.Poller.Stats().RecordsDelivered
			first.Close()
			if rep.Acked == 0 || delivered == 0 {
				t.Fatalf("first run: acked %d, delivered %d", rep.Acked, delivered)
			}
			damaged := opts.RuntimeStateFile
			if tc.checkpoint {
				damaged = opts.CheckpointFile
			}
			tc.damage(t, damaged)

			var logs syncBuffer
			opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			second, err := devstack.Start(ctx, opts)
			if err != nil {
				t.Fatalf("restart with a damaged %s: %v", filepath.Base(damaged), err)
			}
			defer second.Close()
			if err := second.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			redelivered := second.Poller.Stats().RecordsDelivered
			if tc.checkpoint && redelivered < delivered {
				t.Errorf("after a damaged checkpoint file the stream was read again from record %d on, want its oldest (%d records delivered before, %d now)",
					delivered-redelivered, delivered, redelivered)
			}
			if !tc.checkpoint && redelivered != 0 {
				t.Errorf("a damaged journal made the event source mapping deliver %d records again; its checkpoints were intact", redelivered)
			}
			rep2 := devstack.Drive(ctx, second.URL, devstack.DriveOptions{Orders: 4, Concurrency: 1, Seed: 7, Logger: slog.New(slog.DiscardHandler)})
			if err := second.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			a, err := second.Audit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep2.Acked == 0 || !a.OK() || a.Published != a.Events {
				t.Errorf("after recovery: acked %d, %s %v", rep2.Acked, a.Summary(), a.Problems)
			}
			var warnings []string
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if strings.Contains(l, "level=WARN") && strings.Contains(l, "damaged") {
					warnings = append(warnings, l)
				}
			}
			if len(warnings) != 1 || !strings.Contains(warnings[0], damaged) {
				t.Errorf("want one warning naming %s and what was done; warnings:\n%s", damaged, logs.String())
			}
		})
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
