package localstate

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func open(t *testing.T, path, binding string) *Journal {
	t.Helper()
	j, err := Open(path, Options{Binding: binding, CompactMinBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestJournalKeepsPutsAndDeletesAcrossReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s", "state")
	j := open(t, path, "stream-1")
	for i := range 50 {
		if err := j.Put(fmt.Sprintf("q/a/%02d", i), []byte(strings.Repeat("x", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Delete("q/a/00", "q/a/01", "missing"); err != nil {
		t.Fatal(err)
	}
	if err := j.Put("q/a/02", []byte("replaced")); err != nil {
		t.Fatal(err)
	}
	if err := j.Put("p/x", []byte{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Put("late", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close = %v, want ErrClosed", err)
	}
	j = open(t, path, "stream-1")
	defer j.Close()
	got := j.Records("q/")
	if len(got) != 48 || string(got["q/a/02"]) != "replaced" || string(got["q/a/49"]) != strings.Repeat("x", 49) {
		t.Fatalf("reopened: %d records under q/, q/a/02=%q", len(got), got["q/a/02"])
	}
	if _, ok := got["q/a/00"]; ok {
		t.Fatal("a deleted record came back")
	}
	if p := j.Records("p/"); string(p["p/x"]) != "\x00\x01\x02" {
		t.Fatalf("p/x = %q", p["p/x"])
	}
}

func TestJournalBindingMismatchDiscards(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	j := open(t, path, "stream-1")
	_ = j.Put("k", []byte("v"))
	_ = j.Close()
	j = open(t, path, "stream-2")
	defer j.Close()
	if info := j.Info(); info.Discarded != 1 || info.OldBinding != "stream-1" || j.Len() != 0 {
		t.Fatalf("info %+v, len %d: want the old stream's record discarded", info, j.Len())
	}
}

func TestJournalDropsTornTail(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	j := open(t, path, "b")
	_ = j.Put("kept", []byte("1"))
	_ = j.Close()
	// A record cut short by a kill: its length says more than is there.
	rec := frame(putPayload("torn", []byte("never acknowledged")))
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.Write(rec[:len(rec)-5])
	_ = f.Close()
	j = open(t, path, "b")
	if info := j.Info(); info.TornBytes != int64(len(rec)-5) || j.Len() != 1 {
		t.Fatalf("info %+v, len %d", info, j.Len())
	}
	_ = j.Put("after", []byte("2"))
	_ = j.Close()
	j = open(t, path, "b")
	defer j.Close()
	if r := j.Records(""); len(r) != 2 || string(r["after"]) != "2" {
		t.Fatalf("records after a torn tail: %v", r)
	}
}

func TestJournalCompactsAndStaysReadable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	j := open(t, path, "b")
	body := []byte(strings.Repeat("m", 200))
	for i := range 2000 {
		k := fmt.Sprintf("q/%d", i)
		_ = j.Put(k, body)
		_ = j.Put(k, body) // received
		if i%10 != 0 {
			_ = j.Delete(k)
		}
	}
	st, _ := os.Stat(path)
	if st.Size() > 200*(200+64)*2+(1<<10) {
		t.Errorf("journal is %d bytes for %d live records: not compacted", st.Size(), j.Len())
	}
	_ = j.Close()
	j = open(t, path, "b")
	defer j.Close()
	if j.Len() != 200 {
		t.Fatalf("%d records after reopen, want 200", j.Len())
	}
}

func TestJournalIsLocked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	j := open(t, path, "b")
	if _, err := Open(path, Options{Binding: "b"}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	_ = j.Close()
	j2 := open(t, path, "b")
	_ = j2.Close()
}

// TestJournalSurvivesSIGKILL: a child process writes records and reports
// each one on stdout after Put returned; the test kills it with SIGKILL
// mid-stream. Every record the child reported is in the journal after
// reopening: a write acknowledged is a write kept.
func TestJournalSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a child process")
	}
	path := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournalChild$")
	cmd.Env = append(os.Environ(), "LOCALSTATE_CHILD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	acked := 0
	for sc.Scan() {
		if n, err := strconv.Atoi(sc.Text()); err == nil {
			acked = n + 1
			if acked == 3000 {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				break
			}
		}
	}
	_ = cmd.Wait()
	if acked < 3000 {
		t.Fatalf("child acknowledged only %d writes", acked)
	}
	j := open(t, path, "child")
	defer j.Close()
	recs := j.Records("k/")
	for i := range acked {
		if _, ok := recs[fmt.Sprintf("k/%06d", i)]; !ok {
			t.Fatalf("acknowledged record k/%06d lost after SIGKILL (%d of %d acknowledged kept)", i, len(recs), acked)
		}
	}
}

// TestJournalChild is the child of TestJournalSurvivesSIGKILL.
func TestJournalChild(t *testing.T) {
	path := os.Getenv("LOCALSTATE_CHILD")
	if path == "" {
		t.Skip("child process only")
	}
	j, err := Open(path, Options{Binding: "child", CompactMinBytes: 64 << 10})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	body := []byte(strings.Repeat("b", 300))
	for i := 0; ; i++ {
		k := fmt.Sprintf("k/%06d", i)
		if err := j.Put(k, body); err != nil {
			fmt.Println("put:", err)
			os.Exit(1)
		}
		// churn so that compaction runs while the parent may kill us
		_ = j.Put("churn", body)
		fmt.Println(i)
	}
}
