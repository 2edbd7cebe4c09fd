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

// localGuard is the guard in front of every local HTTP server of the stack
// that changes state (the API, the console, the AWS front): it refuses a
// foreign Host (hostGuard, DNS rebinding) and a cross-origin browser
// request that is not GET, HEAD or OPTIONS (crossOriginGuard, cross-site
// request forgery), each with 403 in the server's error shape.
func localGuard(next http.Handler, listenAddrs, extra []string, d denier) http.Handler {
	return newHostGuard(crossOriginGuard(next, d.crossOrigin), listenAddrs, extra, d.host)
}

// denier answers the requests localGuard refuses, in one server's error
// shape.
type denier struct {
	host        func(w http.ResponseWriter, host string)
	crossOrigin func(w http.ResponseWriter, err error)
}

var (
	apiDenier = denier{host: denyAPI, crossOrigin: denyAPICrossOrigin}
	awsDenier = denier{host: denyAWS, crossOrigin: denyAWSCrossOrigin}
)

// crossOriginGuard refuses, through deny, the requests
// net/http.CrossOriginProtection refuses: a request other than GET, HEAD or
// OPTIONS whose Sec-Fetch-Site is neither "same-origin" nor "none", or,
// from a browser too old to send Sec-Fetch-Site, whose Origin is not the
// Host it is sent to. A request with neither header (curl, an AWS SDK, Go's
// http.Client) is not a browser's and passes, as a same-origin one does.
//
// The local servers need it because nothing there is authenticated: being
// able to reach 127.0.0.1 is the only authority, and a page open in the
// developer's browser shares it — an HTML form on any web site can POST
// /orders/{id}/pay with an empty body to http://127.0.0.1:8080 (a "simple"
// request: no preflight, so CORS never applies). The check belongs to the
// local servers only, not to the API handler that also runs in Lambda: on
// AWS API Gateway authenticates every request (IAM SigV4 or a JWT in the
// Authorization header, see infra's authMode), credentials a browser never
// attaches on its own, so a cross-site page cannot act as the caller there;
// a check in the handler would refuse only legitimate browser clients that
// call the API from their own origin with their own credentials.
func crossOriginGuard(next http.Handler, deny func(http.ResponseWriter, error)) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := cop.Check(r); err != nil {
			deny(w, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// denyAPICrossOrigin answers a refused cross-origin request in the API's
// error shape.
func denyAPICrossOrigin(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": "cross_origin_request",
		"message": "refused: " + err.Error() + " (the local servers authenticate nothing, so a page of another origin may not change their state; call them from curl, a script or their own page)"})
}

// denyAWSCrossOrigin answers a refused cross-origin request as an AWS JSON
// protocol error (an SDK sends no Origin nor Sec-Fetch-Site and is never
// refused).
func denyAWSCrossOrigin(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-ErrorType", "AccessDeniedException")
	w.WriteHeader(http.StatusForbidden)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "AccessDeniedException",
		"message": "refused: " + err.Error() + " (a browser page may not call the local AWS endpoint)"})
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
