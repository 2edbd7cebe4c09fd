package devstack_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// With HopLog, each event's hops appear as one line each with the time since
// its commit: stream → relay, published and marked, each consumer applied.
func TestHopLogShowsEveryHop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var buf lockedBuffer
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "hops", HopLog: true, SweepEvery: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rep := devstack.Drive(ctx, s.URL, devstack.DriveOptions{Orders: 3, Concurrency: 1})
	if err := s.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if rep.Acked == 0 {
		t.Fatalf("no order acknowledged: %s", rep)
	}
	time.Sleep(time.Second) // resequencer sweep ticks reach the ordered consumers (SweepEvery)
	out := buf.String()
	for _, hop := range []string{`msg="hop: stream → relay"`, `msg="hop: relay done (published and marked, or parked)"`, `msg="hop: notifier done (applied, or a duplicate absorbed)"`} {
		n := strings.Count(out, hop)
		if n == 0 {
			t.Errorf("no %s line", hop)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `msg="hop:`) && !strings.Contains(line, "ms_since_commit=") {
			t.Errorf("hop line without its latency: %s", line)
		}
		// A sweep tick is no event's hop.
		if strings.Contains(line, `msg="hop:`) && strings.Contains(line, `event_id=""`) {
			t.Errorf("hop line of no event: %s", line)
		}
	}
}
