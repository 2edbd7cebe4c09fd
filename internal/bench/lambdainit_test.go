package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A start that exits during init is a failure with its cause, and the
// report's cell says FAILED, never a time (section f printed 0.0 ms for the
// ledger and the notifier, which exited for a missing CONSUMER_DLQ_URL).
func TestMeasureInitReportsAFailedStart(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "exits")
	script := "#!/bin/sh\necho '{\"level\":\"ERROR\",\"msg\":\"init failed\",\"error\":\"config: environment variable CONSUMER_DLQ_URL is required\"}' >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := MeasureInit(context.Background(), "exits", bin, nil, 3)
	if r.OK() || r.Attempts != 3 || r.Failed != 3 || len(r.Runs) != 0 {
		t.Errorf("result %+v: want 3 failed starts", r)
	}
	if !strings.Contains(r.Error, "CONSUMER_DLQ_URL is required") || !strings.Contains(r.Error, "exited during init") {
		t.Errorf("error %q does not say why the start failed", r.Error)
	}
	if got := r.Median(); got != "FAILED (3 of 3 starts)" {
		t.Errorf("cell %q, want FAILED (3 of 3 starts)", got)
	}
	ok := InitResult{Attempts: 2, Runs: []time.Duration{10e6, 12e6}, MedianMs: 12}
	if got := ok.Median(); got != "12.0" || !ok.OK() {
		t.Errorf("cell %q ok %v, want 12.0 true", got, ok.OK())
	}
	partial := InitResult{Attempts: 2, Failed: 1, Runs: []time.Duration{10e6}, MedianMs: 10}
	if partial.OK() || !strings.HasPrefix(partial.Median(), "FAILED (1 of 2") {
		t.Errorf("one of two starts failed: OK %v, cell %q", partial.OK(), partial.Median())
	}
}

// The bench measures what `make build` builds: the Makefile's FUNCTIONS are
// exactly the functions/<name>/main.go directories.
func TestMakefileBuildsEveryFunction(t *testing.T) {
	t.Parallel()
	fns, err := Functions("../../functions")
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^FUNCTIONS\s*:=\s*(.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no FUNCTIONS := line in the Makefile")
	}
	built := strings.Fields(string(m[1]))
	if strings.Join(sortedCopy(built), " ") != strings.Join(fns, " ") {
		t.Errorf("make build builds %v, functions/ holds %v", built, fns)
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// Every function `make build` builds starts with InitEnv: its init reaches
// the Runtime API's first GET .../invocation/next. A function that requires
// a variable InitEnv does not set (or a new function needing one) fails
// here, not as a silent 0.0 ms in the bench report. Builds the functions
// for the host (skipped with -short).
func TestInitEnvStartsEveryFunction(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every function")
	}
	t.Parallel()
	fns, err := Functions("../../functions")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := []string{"build", "-tags", "lambda.norpc,notrace", "-o", dir + string(os.PathSeparator)}
	for _, fn := range fns {
		args = append(args, "./functions/"+fn)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Init must not need a server: nothing listens at this endpoint.
	env := InitEnv("http://127.0.0.1:9")
	for _, fn := range fns {
		r := MeasureInit(context.Background(), fn, filepath.Join(dir, fn), env, 1)
		if !r.OK() {
			t.Errorf("%s: init %s: %s", fn, r.Median(), r.Error)
		}
	}
}
