package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ on Linux (100 on every architecture Go supports
// there).
const clockTick = 10 * time.Millisecond

// CPUTime returns the user+system CPU time used so far by process pid, read
// from /proc/<pid>/stat (Linux only; 0 when unreadable).
func CPUTime(pid int) time.Duration {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state); utime is field 14
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * clockTick
}

// ChildPID returns the pid of a child of this process whose command name
// (/proc/<pid>/comm) is comm, or 0 if there is none. The bench uses it to
// find the Dynoxide server the stack started.
func ChildPID(comm string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	self := os.Getpid()
	best := 0
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		open, closeP := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closeP < open {
			continue
		}
		f := strings.Fields(s[closeP+1:])
		if len(f) < 2 || s[open+1:closeP] != comm {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid != self {
			continue
		}
		if pid, _ := strconv.Atoi(filepath.Base(d)); pid > best {
			best = pid
		}
	}
	return best
}
