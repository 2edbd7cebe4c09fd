package devstack

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// hostGuard refuses requests whose Host header names a host the server was
// not asked to serve: the defence against DNS rebinding, where a web page
// on an attacker's name that now resolves to 127.0.0.1 reaches a local
// server with the attacker's name in Host. It accepts:
//
//   - loopback names: "localhost" and any name under ".localhost" (RFC 6761
//     reserves them for loopback; browsers never resolve them through DNS);
//   - loopback addresses (127.0.0.0/8, ::1);
//   - the host of the listen address, and, when that is a wildcard
//     (0.0.0.0, ::, or empty), every address of this machine's interfaces;
//   - the names in extra (Options.AllowedHosts), compared case-insensitively.
//
// Any port is accepted: the listener decides the port. A request without a
// Host (HTTP/1.0) is refused. Refused requests get 403 and the body deny
// writes; nothing reaches next.
type hostGuard struct {
	next  http.Handler
	names map[string]bool
	addrs map[netip.Addr]bool
	deny  func(w http.ResponseWriter, host string)
}

// newHostGuard wraps next for a server listening on listenAddrs ("host:port":
// the address asked for and the one bound, which differ for a name).
func newHostGuard(next http.Handler, listenAddrs []string, extra []string, deny func(http.ResponseWriter, string)) *hostGuard {
	g := &hostGuard{next: next, names: map[string]bool{}, addrs: map[netip.Addr]bool{}, deny: deny}
	for _, n := range extra {
		if n = strings.ToLower(strings.TrimSpace(n)); n != "" {
			g.names[strings.Trim(n, "[]")] = true
		}
	}
	for _, a := range listenAddrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			host = a
		}
		switch ip, err := netip.ParseAddr(strings.Trim(host, "[]")); {
		case host == "" || (err == nil && ip.IsUnspecified()):
			if ifaddrs, err := net.InterfaceAddrs(); err == nil {
				for _, a := range ifaddrs {
					if p, err := netip.ParsePrefix(a.String()); err == nil {
						g.addrs[p.Addr().Unmap()] = true
					}
				}
			}
		case err == nil:
			g.addrs[ip.Unmap()] = true
		default:
			g.names[strings.ToLower(host)] = true
		}
	}
	return g
}

// allowed reports whether a Host header value names this server.
func (g *hostGuard) allowed(hostHeader string) bool {
	host := hostHeader
	if h, _, err := net.SplitHostPort(hostHeader); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" {
		return false
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		return ip.IsLoopback() || g.addrs[ip]
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || g.names[host]
}

func (g *hostGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.allowed(r.Host) {
		g.deny(w, r.Host)
		return
	}
	g.next.ServeHTTP(w, r)
}

// denyAPI answers a refused Host in the API's error shape {"code","message"}.
func denyAPI(w http.ResponseWriter, host string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": "host_not_allowed",
		"message": fmt.Sprintf("Host %q is not a name of this local server (DNS rebinding protection); use localhost or 127.0.0.1, or allow the name with -allow-host", host)})
}

// denyAWS answers a refused Host as an AWS JSON protocol error.
func denyAWS(w http.ResponseWriter, host string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-ErrorType", "AccessDeniedException")
	w.WriteHeader(http.StatusForbidden)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "AccessDeniedException",
		"message": fmt.Sprintf("Host %q is not a name of this local endpoint (DNS rebinding protection); use localhost or 127.0.0.1, or allow the name with -allow-host", host)})
}

// warnIfExposed logs a warning when addr listens beyond loopback: the local
// servers authenticate nothing.
func warnIfExposed(log *slog.Logger, what, addr string) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return
	}
	if host == "localhost" {
		return
	}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil && ip.IsLoopback() {
		return
	}
	log.Warn(what+" listens beyond loopback: it authenticates nothing, so anyone who can reach "+addr+" can use it (requests must still name an allowed Host)", "addr", addr)
}
