package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/lambdamain"
)

const module = "github.com/ddb-outbox/ddb-outbox"

// TestMainsAreBuiltFromTheLibraryOnly: the relay's and the reconciler's
// import graphs (with and without the tag notrace) hold nothing of the
// module's internal/ tree (the example application, the local tooling):
// a team builds them from the library alone, and `go mod tidy` in its
// module cannot make them fail. The library's own pkg/internal/ helpers are
// allowed.
func TestMainsAreBuiltFromTheLibraryOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, tags := range []string{"lambda.norpc,notrace", "lambda.norpc"} {
		out, err := exec.Command("go", "list", "-tags", tags, "-deps", ".", "../reconciler").CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		deps := strings.Fields(string(out))
		var lib int
		for _, p := range deps {
			if strings.HasPrefix(p, module+"/internal/") {
				t.Errorf("tags %s: the mains import %s", tags, p)
			}
			if strings.HasPrefix(p, module+"/pkg/relay") {
				lib++
			}
		}
		if lib == 0 {
			t.Fatalf("tags %s: %s not among the %d dependencies: the listing is wrong", tags, module+"/pkg/relay", len(deps))
		}
	}
}

// TestNotraceBuildRefusesTracing builds the relay as `make build` does
// (tag notrace: no OpenTelemetry SDK linked) and starts it with tracing
// asked for: its init fails, naming the build that has tracing, instead of
// running untraced. The same binary with tracing off gets past init (it
// then waits for the Lambda Runtime API, which is absent here), and one
// without EVENT_SOURCE fails its init naming the variable.
func TestNotraceBuildRefusesTracing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "relay")
	build := exec.Command("go", "build", "-tags", "lambda.norpc,notrace", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	base := []string{"OUTBOX_TABLE_NAME=t", "EVENT_BUS_NAME=b", "PARKED_QUEUE_URL=https://sqs.us-east-1.amazonaws.com/1/p",
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y", "HOME=" + t.TempDir(),
		"AWS_LAMBDA_RUNTIME_API=127.0.0.1:1"}
	withSource := append([]string{config.EnvEventSource + "=com.example.wallet"}, base...)
	run := func(env ...string) string {
		cmd := exec.Command(bin)
		cmd.Env = env
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	if out := run(append(withSource, config.EnvTracing+"="+config.TracingOn)...); !strings.Contains(out, "make build TRACING=1") || !strings.Contains(out, "init failed") {
		t.Fatalf("tracing on in a notrace build: output %s (want %v)", out, lambdamain.ErrNoTracing)
	}
	if out := run(append(withSource, config.EnvTracing+"="+config.TracingOff)...); strings.Contains(out, "init failed") {
		t.Fatalf("tracing off: init failed: %s", out)
	}
	if out := run(append(base, config.EnvTracing+"="+config.TracingOff)...); !strings.Contains(out, "init failed") || !strings.Contains(out, config.EnvEventSource) {
		t.Fatalf("no %s: output %s", config.EnvEventSource, out)
	}
}

// TestInfraREADMEBuildRecipeIsMakeBuild: the build recipe infra/README.md
// gives a team is the command `make build` runs (its environment, tags and
// flags, with the Makefile's variables at their defaults), so a team's
// binaries are the size the project's are.
func TestInfraREADMEBuildRecipeIsMakeBuild(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../infra/README.md")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"$(GO)": "go"}
	var recipe string
	for _, line := range strings.Split(string(mk), "\n") {
		if k, v, ok := strings.Cut(line, " := "); ok {
			vars["$("+strings.TrimSpace(k)+")"] = strings.TrimSpace(v)
		}
		if strings.Contains(line, "-o $(DIST)/$$f/bootstrap") {
			recipe = line
		}
	}
	if recipe == "" {
		t.Fatal("no build recipe line in the Makefile")
	}
	// TRACING unset (the default build): $(if $(TRACING),,X) is X.
	unlessTracing := regexp.MustCompile(`\$\(if \$\(TRACING\),,([^()]*)\)`)
	expand := func(s string) string {
		for range 4 {
			for k, v := range vars {
				s = strings.ReplaceAll(s, k, v)
			}
		}
		return unlessTracing.ReplaceAllString(s, "$1")
	}
	cmd, _, _ := strings.Cut(recipe, " -o ")
	want := strings.Fields(expand(cmd))
	if len(want) < 8 || strings.Contains(strings.Join(want, " "), "$(") {
		t.Fatalf("make build's command parsed as %q", want)
	}
	start := strings.Index(string(readme), "**Build the relay and the reconciler**")
	if start < 0 {
		t.Fatal("infra/README.md has no build step for the relay and the reconciler")
	}
	section := string(readme[start:])
	section = section[:strings.Index(section, "```\n\n")]
	got := strings.Fields(strings.ReplaceAll(section[strings.Index(section, "CGO_ENABLED"):], "\\\n", " "))
	got = got[:len(want)]
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("infra/README.md builds with\n  %s\nmake build with\n  %s", strings.Join(got, " "), strings.Join(want, " "))
	}
}
