package devstack_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
)

// `make demo ARGS=-attach` drives a stack running in another process through
// the state file and audits its tables once its pipeline has settled.
func TestAttachDrivesAndAuditsARunningStack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "dev.json")
	if _, err := devstack.ReadState(path); !errors.Is(err, devstack.ErrNoRunningStack) {
		t.Fatalf("ReadState without a stack = %v, want ErrNoRunningStack", err)
	}
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "attach", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := devstack.WriteState(path, s, "attach"); err != nil {
		t.Fatal(err)
	}
	st, err := devstack.ReadState(path)
	if err != nil {
		t.Fatal(err)
	}
	view := devstack.Attach(st)
	rep := devstack.Drive(ctx, st.URL, devstack.DriveOptions{Orders: 10, Concurrency: 2})
	a, err := view.WaitSettled(ctx, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if int64(a.Committed) != rep.Acked || a.Published != a.Events || !a.OK() || a.Notifications != a.Events {
		t.Fatalf("attached audit %s, acked %d", a.Summary(), rep.Acked)
	}
}
