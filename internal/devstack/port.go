package devstack

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// portHolder names the process listening on addr's TCP port, as
// " (held by pid N: cmdline)", or "" when it cannot tell (not Linux, no
// permission, no such listener). It reads /proc/net/tcp{,6} for the
// listening socket's inode and /proc/<pid>/fd for its owner.
func portHolder(addr string) string {
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port == 0 {
		return ""
	}
	inode := listeningInode(port)
	if inode == "" {
		return ""
	}
	pid, cmd := socketOwner(inode)
	if pid == "" {
		return ""
	}
	return fmt.Sprintf(" (port %d is held by pid %s: %s; stop it, or choose another address)", port, pid, cmd)
}

// listeningInode returns the inode of the socket listening on port.
func listeningInode(port int) string {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st ... inode (index 9); st 0A = LISTEN
			if len(fields) > 9 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" {
				fh.Close()
				return fields[9]
			}
		}
		fh.Close()
	}
	return ""
}

// socketOwner returns the pid and command line of the process holding the
// socket inode.
func socketOwner(inode string) (string, string) {
	target := "socket:[" + inode + "]"
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		fds, _ := os.ReadDir(filepath.Join(p, "fd"))
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(p, "fd", fd.Name())); err == nil && l == target {
				cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
				return filepath.Base(p), strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
			}
		}
	}
	return "", ""
}

// checkFree reports whether addr ("host:port") can be listened on now, with
// the error Start would return later (naming the holder), so that a stack
// whose ports are taken fails before it starts Dynoxide on a data file
// another stack may be using. An empty addr or port 0 is always free.
func checkFree(what, flag, addr string) error {
	if addr == "" {
		return nil
	}
	if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("devstack: %s: listen on %s: %w%s; make dev takes another address with ARGS='%s HOST:PORT'", what, addr, err, portHolder(addr), flag)
	}
	return ln.Close()
}
