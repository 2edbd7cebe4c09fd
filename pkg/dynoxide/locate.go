package dynoxide

import (
	"context"
	"debug/elf"
	"debug/macho"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Where a binary was found (Candidate.Source), in the order Locate tries.
const (
	SourceEnv  = "$" + EnvBinary                    // an explicit path
	SourcePath = "PATH"                             // a `dynoxide` on PATH (Homebrew, cargo install, a release binary)
	SourceNPM  = "npm package @dynoxide/<platform>" // the pinned npm package, where it fits the platform
)

// npmPlatforms maps GOOS/GOARCH to Dynoxide's npm platform package names.
// Only linux-x64 is pinned in package.json (the only one the project's
// registry serves); the others are found when installed by hand with npm.
var npmPlatforms = map[string]string{
	"linux/amd64":  "linux-x64",
	"linux/arm64":  "linux-arm64",
	"darwin/amd64": "darwin-x64",
	"darwin/arm64": "darwin-arm64",
}

// Candidate is a dynoxide binary Locate chose.
type Candidate struct {
	Path   string
	Source string // SourceEnv, SourcePath or SourceNPM
}

// Host is what Locate needs to know about the machine; Current() describes
// this one. Tests describe others.
type Host struct {
	GOOS, GOARCH string
	// Getenv, LookPath and Exists default to os.Getenv, exec.LookPath and a
	// regular-file check.
	Getenv   func(string) string
	LookPath func(string) (string, error)
	Exists   func(string) bool
	// Dir is where the search for node_modules starts (walking up to /).
	Dir string
	// Runnable checks that a file is an executable for GOOS/GOARCH; default
	// CheckRunnable.
	Runnable func(path, goos, goarch string) error
}

// Current returns the Host of this process.
func Current() Host {
	dir, _ := os.Getwd()
	return Host{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Dir: dir}
}

func (h *Host) setDefaults() {
	if h.Getenv == nil {
		h.Getenv = os.Getenv
	}
	if h.LookPath == nil {
		h.LookPath = exec.LookPath
	}
	if h.Exists == nil {
		h.Exists = func(p string) bool { st, err := os.Stat(p); return err == nil && st.Mode().IsRegular() }
	}
	if h.Runnable == nil {
		h.Runnable = CheckRunnable
	}
}

// Locate finds the dynoxide binary in this order, and checks that it can run
// on the host's platform before anything starts it:
//
//  1. $DYNOXIDE_BIN, an explicit path (an error if it is missing or built
//     for another platform: an explicit choice is never silently skipped);
//  2. `dynoxide` on PATH (Homebrew nubo-db/tap/dynoxide, cargo install
//     dynoxide-rs, or a release binary);
//  3. node_modules/@dynoxide/<platform>/dynoxide in Dir or a parent, where
//     <platform> is the npm package for GOOS/GOARCH (linux-x64 is the one
//     pinned in package.json).
//
// A candidate of steps 2–3 that cannot run here is skipped with its reason
// kept. When nothing fits, the error wraps ErrNotInstalled and names the
// platform, what was tried, the install options and the -endpoint
// alternative (DynamoDB Local).
func Locate(h Host) (Candidate, error) {
	h.setDefaults()
	var tried []string
	if p := h.Getenv(EnvBinary); p != "" {
		if !h.Exists(p) {
			return Candidate{}, notInstalled(h, []string{fmt.Sprintf("%s=%s: no such file", EnvBinary, p)})
		}
		if err := h.Runnable(p, h.GOOS, h.GOARCH); err != nil {
			return Candidate{}, notInstalled(h, []string{fmt.Sprintf("%s=%s: %v", EnvBinary, p, err)})
		}
		return Candidate{Path: p, Source: SourceEnv}, nil
	}
	if p, err := h.LookPath("dynoxide"); err == nil {
		rerr := h.Runnable(p, h.GOOS, h.GOARCH)
		if rerr == nil {
			return Candidate{Path: p, Source: SourcePath}, nil
		}
		tried = append(tried, fmt.Sprintf("PATH %s: %v", p, rerr))
	} else {
		tried = append(tried, "no dynoxide on PATH")
	}
	pkg, ok := npmPlatforms[h.GOOS+"/"+h.GOARCH]
	if !ok {
		tried = append(tried, fmt.Sprintf("no Dynoxide npm package exists for %s/%s", h.GOOS, h.GOARCH))
		return Candidate{}, notInstalled(h, tried)
	}
	rel := filepath.Join("node_modules", "@dynoxide", pkg, "dynoxide")
	for dir := h.Dir; dir != ""; {
		p := filepath.Join(dir, rel)
		if h.Exists(p) {
			if err := h.Runnable(p, h.GOOS, h.GOARCH); err != nil {
				tried = append(tried, fmt.Sprintf("%s: %v", p, err))
				break
			}
			return Candidate{Path: p, Source: SourceNPM}, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	tried = append(tried, fmt.Sprintf("no %s under %s or its parents (make deps installs @dynoxide/linux-x64 on linux/amd64)", rel, h.Dir))
	return Candidate{}, notInstalled(h, tried)
}

func notInstalled(h Host, tried []string) error {
	npmLine := ""
	if pkg, ok := npmPlatforms[h.GOOS+"/"+h.GOARCH]; ok && pkg != npmPlatforms["linux/amd64"] {
		npmLine = fmt.Sprintf("\n  npm install --no-save @dynoxide/%s@%s  (this platform's npm package, where the registry has it)", pkg, TestedVersions[0])
	}
	return fmt.Errorf(`%w for %s/%s.
Tried: %s.
Install Dynoxide %s (the version this project is tested with) one of these ways, then run again:
  brew install nubo-db/tap/dynoxide            (macOS, Linux)
  cargo install dynoxide-rs --version %s      (any platform with Rust)
  a release binary, then export %s=/path/to/dynoxide
  npm ci                                       (linux/amd64: the pinned @dynoxide/linux-x64)%s
or use another DynamoDB-compatible server with Streams, e.g. DynamoDB Local's container:
  make dev ARGS='-endpoint http://localhost:8000'`, ErrNotInstalled, h.GOOS, h.GOARCH, strings.Join(tried, "; "),
		strings.Join(TestedVersions, ", "), TestedVersions[0], EnvBinary, npmLine)
}

// TestedVersions are the Dynoxide versions this project's tests run
// against, newest first: package.json pins the first for linux/amd64
// (@dynoxide/linux-x64), and CheckVersion warns about any other.
var TestedVersions = []string{"1.2.1"}

// Version runs `path --version` (bounded by ctx and 10 s) and returns the
// version it prints ("dynoxide 1.2.1" gives "1.2.1"). It returns an error
// when the binary does not run or prints no version.
func Version(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("dynoxide: %s --version: %w", path, err)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return "", fmt.Errorf("dynoxide: %s --version printed nothing", path)
	}
	return strings.TrimPrefix(f[len(f)-1], "v"), nil
}

// CheckVersion returns a warning when c's version is not one of
// TestedVersions (or cannot be read): what was found, what is tested, and
// how to install the tested one; "" when it is tested. Another version
// usually works; a difference in its DynamoDB or Streams behaviour would
// show as failing tests, and the warning says where to look.
func CheckVersion(ctx context.Context, c Candidate) string {
	v, err := Version(ctx, c.Path)
	if err != nil {
		return fmt.Sprintf("could not read the Dynoxide version of %s (%s): %v; this project is tested with %s", c.Path, c.Source, err, strings.Join(TestedVersions, ", "))
	}
	if slices.Contains(TestedVersions, v) {
		return ""
	}
	return fmt.Sprintf("Dynoxide %s at %s (%s) is not a version this project is tested with (%s): if something behaves unexpectedly, install %s (brew upgrade dynoxide, cargo install dynoxide-rs --version %s, or %s=/path/to/dynoxide)",
		v, c.Path, c.Source, strings.Join(TestedVersions, ", "), TestedVersions[0], TestedVersions[0], EnvBinary)
}

// ErrWrongPlatform means a file is not an executable for this platform.
var ErrWrongPlatform = errors.New("dynoxide: binary built for another platform")

// CheckRunnable reports whether the file at path is an executable this
// platform can run: an ELF file for linux with the machine of goarch, a
// Mach-O file (or universal binary) for darwin, or a "#!" script (a wrapper;
// the interpreter decides). It reads only the file header. Errors wrap
// ErrWrongPlatform (another OS or architecture, or not an executable).
func CheckRunnable(path, goos, goarch string) error {
	if head, err := readHead(path, 2); err == nil && head == "#!" {
		return nil
	}
	switch goos {
	case "linux":
		f, err := elf.Open(path)
		if err != nil {
			return fmt.Errorf("%w: not an ELF executable (%v)", ErrWrongPlatform, err)
		}
		defer f.Close()
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
		if want == elf.EM_NONE || f.Machine != want {
			return fmt.Errorf("%w: ELF for %s, this machine is linux/%s", ErrWrongPlatform, f.Machine, goarch)
		}
		return nil
	case "darwin":
		f, err := macho.Open(path)
		if err != nil {
			ff, ferr := macho.OpenFat(path)
			if ferr != nil {
				return fmt.Errorf("%w: not a Mach-O executable (%v)", ErrWrongPlatform, err)
			}
			defer ff.Close()
			for _, a := range ff.Arches {
				if cpuMatches(a.Cpu, goarch) {
					return nil
				}
			}
			return fmt.Errorf("%w: universal binary without darwin/%s", ErrWrongPlatform, goarch)
		}
		defer f.Close()
		if !cpuMatches(f.Cpu, goarch) {
			return fmt.Errorf("%w: Mach-O for %s, this machine is darwin/%s", ErrWrongPlatform, f.Cpu, goarch)
		}
		return nil
	}
	return nil // other systems: let exec report it
}

func cpuMatches(c macho.Cpu, goarch string) bool {
	return goarch == "amd64" && c == macho.CpuAmd64 || goarch == "arm64" && c == macho.CpuArm64
}

func readHead(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, n)
	m, err := f.Read(b)
	return string(b[:m]), err
}
