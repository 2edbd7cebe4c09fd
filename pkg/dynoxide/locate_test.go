package dynoxide

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fakeHost describes a machine: files that exist, a PATH entry, env vars and
// which files run on it.
func fakeHost(goos, goarch string, env map[string]string, onPath string, files map[string]string) Host {
	return Host{
		GOOS: goos, GOARCH: goarch, Dir: "/home/dev/ddb-outbox/cmd",
		Getenv: func(k string) string { return env[k] },
		LookPath: func(string) (string, error) {
			if onPath == "" {
				return "", exec.ErrNotFound
			}
			return onPath, nil
		},
		Exists: func(p string) bool { _, ok := files[p]; return ok || p == onPath && onPath != "" },
		Runnable: func(p, goos, goarch string) error {
			plat, ok := files[p]
			if !ok {
				plat = "linux/amd64"
			}
			if plat != goos+"/"+goarch {
				return ErrWrongPlatform
			}
			return nil
		},
	}
}

func TestLocate(t *testing.T) {
	t.Parallel()
	npmX64 := "/home/dev/ddb-outbox/node_modules/@dynoxide/linux-x64/dynoxide"
	npmArm := "/home/dev/ddb-outbox/node_modules/@dynoxide/darwin-arm64/dynoxide"
	cases := []struct {
		name    string
		host    Host
		want    Candidate
		wantErr []string // substrings of the error
	}{
		{"linux/amd64: the pinned npm package", fakeHost("linux", "amd64", nil, "", map[string]string{npmX64: "linux/amd64"}),
			Candidate{Path: npmX64, Source: SourceNPM}, nil},
		{"an explicit DYNOXIDE_BIN wins", fakeHost("linux", "amd64", map[string]string{EnvBinary: "/opt/dx"}, "/usr/bin/dynoxide",
			map[string]string{"/opt/dx": "linux/amd64", npmX64: "linux/amd64"}), Candidate{Path: "/opt/dx", Source: SourceEnv}, nil},
		{"PATH before npm", fakeHost("linux", "amd64", nil, "/usr/local/bin/dynoxide", map[string]string{"/usr/local/bin/dynoxide": "linux/amd64", npmX64: "linux/amd64"}),
			Candidate{Path: "/usr/local/bin/dynoxide", Source: SourcePath}, nil},
		{"macOS arm64 with Homebrew's dynoxide", fakeHost("darwin", "arm64", nil, "/opt/homebrew/bin/dynoxide", map[string]string{"/opt/homebrew/bin/dynoxide": "darwin/arm64"}),
			Candidate{Path: "/opt/homebrew/bin/dynoxide", Source: SourcePath}, nil},
		{"macOS arm64 with an npm darwin package installed by hand", fakeHost("darwin", "arm64", nil, "", map[string]string{npmArm: "darwin/arm64"}),
			Candidate{Path: npmArm, Source: SourceNPM}, nil},
		{"macOS arm64 with only the pinned linux-x64 package", fakeHost("darwin", "arm64", nil, "", map[string]string{npmX64: "linux/amd64"}),
			Candidate{}, []string{"darwin/arm64", "brew install nubo-db/tap/dynoxide", "cargo install dynoxide-rs", "-endpoint", EnvBinary,
				"Install Dynoxide 1.2.1 (the version this project is tested with)", "npm install --no-save @dynoxide/darwin-arm64@1.2.1"}},
		{"linux arm64 with nothing", fakeHost("linux", "arm64", nil, "", nil),
			Candidate{}, []string{"linux/arm64", "no dynoxide on PATH", "DynamoDB Local"}},
		{"a PATH binary for another platform is skipped for npm", fakeHost("linux", "amd64", nil, "/usr/bin/dynoxide", map[string]string{"/usr/bin/dynoxide": "darwin/arm64", npmX64: "linux/amd64"}),
			Candidate{Path: npmX64, Source: SourceNPM}, nil},
		{"an explicit DYNOXIDE_BIN for another platform is an error, not skipped", fakeHost("linux", "arm64", map[string]string{EnvBinary: "/opt/dx"}, "",
			map[string]string{"/opt/dx": "linux/amd64"}), Candidate{}, []string{EnvBinary + "=/opt/dx", "another platform"}},
		{"a missing DYNOXIDE_BIN is an error", fakeHost("linux", "amd64", map[string]string{EnvBinary: "/nope"}, "", map[string]string{npmX64: "linux/amd64"}),
			Candidate{}, []string{EnvBinary + "=/nope: no such file"}},
		{"windows: no npm package", fakeHost("windows", "amd64", nil, "", nil), Candidate{}, []string{"no Dynoxide npm package exists for windows/amd64"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := Locate(c.host)
			if c.wantErr == nil {
				if err != nil || got != c.want {
					t.Fatalf("Locate = %+v, %v; want %+v", got, err, c.want)
				}
				return
			}
			if !errors.Is(err, ErrNotInstalled) {
				t.Fatalf("Locate = %+v, %v; want ErrNotInstalled", got, err)
			}
			for _, s := range c.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error lacks %q:\n%v", s, err)
				}
			}
		})
	}
}

// CheckRunnable reads the real header: the pinned binary (linux/amd64) runs
// on linux/amd64 only; a text file is no executable.
func TestCheckRunnable(t *testing.T) {
	t.Parallel()
	bin, err := FindBinary()
	if err != nil {
		t.Skipf("no dynoxide here: %v", err)
	}
	if runtime.GOOS == "linux" {
		if err := CheckRunnable(bin, runtime.GOOS, runtime.GOARCH); err != nil {
			t.Errorf("CheckRunnable(%s) on this machine: %v", bin, err)
		}
		other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
		if err := CheckRunnable(bin, "linux", other); !errors.Is(err, ErrWrongPlatform) {
			t.Errorf("CheckRunnable(%s, linux/%s) = %v, want ErrWrongPlatform", bin, other, err)
		}
		if err := CheckRunnable(bin, "darwin", "arm64"); !errors.Is(err, ErrWrongPlatform) {
			t.Errorf("CheckRunnable(%s, darwin/arm64) = %v, want ErrWrongPlatform", bin, err)
		}
	}
	dir := t.TempDir()
	txt := filepath.Join(dir, "notes")
	if err := os.WriteFile(txt, []byte("not a program\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckRunnable(txt, "linux", "amd64"); !errors.Is(err, ErrWrongPlatform) {
		t.Errorf("a text file passed as an executable: %v", err)
	}
	script := filepath.Join(dir, "dynoxide")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec /opt/dynoxide \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckRunnable(script, "darwin", "arm64"); err != nil {
		t.Errorf("a wrapper script was refused: %v", err)
	}
}

// TestCheckVersion runs a fake dynoxide printing a version: a tested one
// gives no warning, another one a warning naming both, a binary that does
// not run a warning that it could not be read.
func TestCheckVersion(t *testing.T) {
	dir := t.TempDir()
	fake := func(name, out string) Candidate {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho '"+out+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return Candidate{Path: p, Source: SourcePath}
	}
	ctx := context.Background()
	if w := CheckVersion(ctx, fake("tested", "dynoxide "+TestedVersions[0])); w != "" {
		t.Errorf("tested version: warning %q", w)
	}
	w := CheckVersion(ctx, fake("newer", "dynoxide 9.9.9"))
	for _, want := range []string{"Dynoxide 9.9.9", "tested with (" + TestedVersions[0] + ")", "cargo install dynoxide-rs --version " + TestedVersions[0]} {
		if !strings.Contains(w, want) {
			t.Errorf("other version: warning %q lacks %q", w, want)
		}
	}
	if w := CheckVersion(ctx, Candidate{Path: filepath.Join(dir, "missing")}); !strings.Contains(w, "could not read the Dynoxide version") {
		t.Errorf("missing binary: warning %q", w)
	}
}

// TestTestedVersionIsPinned: package.json pins the npm package at the first
// tested version.
func TestTestedVersionIsPinned(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `"@dynoxide/linux-x64": "` + TestedVersions[0] + `"`; !strings.Contains(string(b), want) {
		t.Errorf("package.json does not pin %s", want)
	}
}
