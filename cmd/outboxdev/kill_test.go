package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Killing `make dev` — with a plain `kill` (SIGTERM, which make forwards to
// its child) or with SIGKILL (which it cannot) — leaves no outboxdev and no
// dynoxide behind: outboxdev is make's direct child and dies with it
// (PR_SET_PDEATHSIG), and Dynoxide dies with outboxdev.
func TestKillingMakeDevLeavesNoProcess(t *testing.T) {
	if testing.Short() || runtime.GOOS != "linux" {
		t.Skip("runs make dev; Linux only")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) { killMakeDev(t, sig) })
	}
}

func killMakeDev(t *testing.T, sig syscall.Signal) {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	cmd := exec.Command("make", "--no-print-directory", "dev", "ARGS=-addr 127.0.0.1:0 -aws-addr 127.0.0.1:0 -prefix killtest")
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not the test's group
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "local stack is up") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(4 * time.Minute):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatal("make dev did not come up")
	}
	kids := descendants(cmd.Process.Pid)
	var names []string
	for _, pid := range kids {
		names = append(names, comm(pid))
	}
	if !strings.Contains(strings.Join(names, " "), "outboxdev") || !strings.Contains(strings.Join(names, " "), "dynoxide") {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("descendants of make: %v, want outboxdev and dynoxide", names)
	}
	if err := cmd.Process.Signal(sig); err != nil { // kill [-KILL] <make pid>
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var alive []string
		for i, pid := range kids {
			if running(pid) {
				alive = append(alive, names[i]+"("+strconv.Itoa(pid)+")")
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range kids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("still running 15 s after make got %s: %v", sig, alive)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// descendants returns every process below pid (from /proc/*/stat ppid).
func descendants(pid int) []int {
	parent := map[int]int{}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		me, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		pp, _ := strconv.Atoi(f[1])
		parent[me] = pp
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}
