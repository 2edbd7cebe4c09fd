package devstack_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
)

// envRestartChild names the directory of a TestRestartChild run.
const envRestartChild = "DEVSTACK_RESTART_CHILD"

// restartOptions are the stack's options in both runs of
// TestNothingLostAcrossRestart: the data kept in dir (DataFile; the
// runtime's state file defaults beside it), short consumer timeouts so
// that messages in flight at the stop come back within seconds, a
// reconciler that re-sends what the stop left pending; slow makes the
// consumers slow, so that their queues hold a backlog when the stack is
// stopped.
func restartOptions(dir string, slow bool, log *slog.Logger) devstack.Options {
	o := devstack.Options{
		Prefix: "restart", DataFile: filepath.Join(dir, "dev.db"), CheckpointFile: filepath.Join(dir, "checkpoints.json"),
		Logger: log, ReconcileEvery: time.Second, ReconcileAfter: 3 * time.Second,
		ConsumerFunctionTimeout: 2 * time.Second, ConsumerMaxReceiveCount: 50,
	}
	if slow {
		o.ConsumerInterceptor = func(ctx context.Context, consumer string, ev events.EventBridgeEvent, attempt int, next localrt.EventHandler) error {
			select {
			case <-time.After(25 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			return next(ctx, ev)
		}
	}
	return o
}

// TestRestartChild is the stack TestNothingLostAcrossRestart stops: it
// drives orders through its own API and prints "BACKLOG n" once its
// consumer queues hold n ≥ 60 messages and the stream checkpoint was saved
// past them; on SIGTERM it stops as `make dev` does (Close) and prints
// "CLOSED".
func TestRestartChild(t *testing.T) {
	dir := os.Getenv(envRestartChild)
	if dir == "" {
		t.Skip("child process of TestNothingLostAcrossRestart")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("child-%d.log", os.Getpid())))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	log := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s, err := devstack.Start(context.Background(), restartOptions(dir, true, log))
	if err != nil {
		fmt.Println("START", err)
		t.Fatal(err)
	}
	go devstack.Drive(ctx, s.URL, devstack.DriveOptions{Orders: 400, Concurrency: 8, Seed: 3, Logger: log})
	go func() {
		for ctx.Err() == nil {
			n := 0
			for _, c := range s.Consumers {
				n += c.Queue.Len()
			}
			if n >= 60 {
				// Wait for the stream checkpoint to be saved past the events
				// in the backlog, so that the stream does not hand them to
				// the relay again after the restart: only the queues hold
				// them.
				cp := filepath.Join(dir, "checkpoints.json")
				before, _ := os.ReadFile(cp)
				for ctx.Err() == nil {
					if now, _ := os.ReadFile(cp); len(now) > 0 && string(now) != string(before) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				fmt.Println("BACKLOG", n)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	<-ctx.Done()
	s.Close()
	fmt.Println("CLOSED")
}

// TestNothingLostAcrossRestart: the local stack stopped mid-load — with
// SIGTERM (its shutdown runs) and with SIGKILL (nothing runs) — while its
// consumer queues hold a backlog, then started again on the same data,
// loses nothing: every committed order event is applied by every consumer
// (the audit: no lost, ghost or double-applied event, nothing pending) and
// the fulfilment provider owes no shipment, duplicates none and gives no
// two orders one shipment id. Before the queues, the bus and the provider
// were kept with the data, the audit found events marked published that no
// consumer ever applied, and shipment ids reused after the restart.
func TestNothingLostAcrossRestart(t *testing.T) {
	if testing.Short() || runtime.GOOS != "linux" {
		t.Skip("runs the stack in a child process; Linux only")
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) { stopMidLoadAndRestart(t, sig) })
	}
}

func stopMidLoadAndRestart(t *testing.T, sig syscall.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestartChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envRestartChild+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	backlog := ""
	for backlog == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("the child stack ended before its queues held a backlog; log in %s", dir)
			}
			if strings.HasPrefix(l, "BACKLOG") {
				backlog = l
			}
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			t.Fatal("the child stack never built a backlog")
		}
	}
	dynoxide := childrenNamed(cmd.Process.Pid, "dynoxide")
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range lines { // drain the child's output
		}
	}()
	_ = cmd.Wait()
	for _, pid := range dynoxide { // its Dynoxide dies with it (Pdeathsig)
		for alive(pid) && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("stopped the stack with %s at %s", sig, backlog)

	log := slog.New(slog.DiscardHandler)
	s, err := devstack.Start(ctx, restartOptions(dir, false, log))
	if err != nil {
		t.Fatalf("restart on the same data: %v", err)
	}
	defer s.Close()
	// Drain until the reconciler has nothing left pending: messages in
	// flight at the stop return after their visibility timeout, records
	// the stop left unpublished are re-sent after ReconcileAfter.
	var a devstack.Audit
	dctx, dcancel := context.WithTimeout(ctx, 90*time.Second)
	defer dcancel()
	for {
		if err := s.Drain(dctx); err != nil {
			t.Errorf("drain after the restart: %v (a message kept failing)", err)
		}
		if a, err = s.Audit(ctx); err != nil {
			t.Fatal(err)
		}
		if a.Pending == 0 || dctx.Err() != nil {
			break
		}
		select {
		case <-dctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Log(a.Summary())
	for _, p := range a.Problems {
		t.Error(p)
	}
	if !a.OK() || a.Events == 0 {
		t.Fatalf("after a %s mid-load and a restart: %s", sig, a.Summary())
	}
	sa, err := s.AuditShipments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sa.Problems {
		t.Error(p)
	}
	if sa.Missing != 0 || sa.NotCancelled != 0 || sa.Duplicates != 0 || sa.Expected == 0 {
		t.Fatalf("shipments after the restart: %+v", sa)
	}
	seen := map[string]string{}
	for _, sh := range s.Provider.Shipments() {
		if o, dup := seen[sh.ID]; dup && o != sh.OrderID {
			t.Errorf("shipment %s belongs to orders %s and %s", sh.ID, o, sh.OrderID)
		}
		seen[sh.ID] = sh.OrderID
	}
	for name, c := range s.Consumers {
		if n := c.DLQ.Len(); n != 0 {
			t.Errorf("consumer %s dead-lettered %d messages", name, n)
		}
	}
}

// childrenNamed returns the pids of pid's children whose command is name.
func childrenNamed(pid int, name string) []int {
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i < 0 || j < i {
			continue
		}
		f := strings.Fields(s[j+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(pid) || !strings.Contains(s[i+1:j], name) {
			continue
		}
		if me, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			out = append(out, me)
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}
