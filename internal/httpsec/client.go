package httpsec

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP is the original client's address: the peer's, unless the peer
// is one of the trusted proxies; then X-Forwarded-For read from the right,
// each trusted hop vouching for the one to its left. The first untrusted
// hop is the client; a hop that does not parse stops the walk at the last
// hop vouched for; if every hop is trusted, the left-most is the client.
// Other forwarding headers (Forwarded, X-Real-IP) are never read. Its work
// is linear in the header's length.
//
// Forward-auth and the dashboard's sign-in limiter both name the client
// this way, so a proxy that is trusted for one is trusted for the other.
func ClientIP(r *http.Request, trusted []netip.Prefix) string {
	peer := r.RemoteAddr
	if host, _, err := net.SplitHostPort(peer); err == nil {
		peer = host
	}
	peer, _, _ = strings.Cut(peer, "%")
	if len(trusted) == 0 {
		return peer
	}
	if a, err := netip.ParseAddr(peer); err != nil || !isTrusted(trusted, a) {
		return peer
	}
	lines := r.Header["X-Forwarded-For"]
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for line != "" {
			var hop string
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				hop, line = strings.TrimSpace(line[j+1:]), line[:j]
			} else {
				hop, line = strings.TrimSpace(line), ""
			}
			if hop == "" {
				continue
			}
			a, err := netip.ParseAddr(hop)
			if err != nil {
				return client
			}
			client = hop
			if !isTrusted(trusted, a) {
				return client
			}
		}
	}
	return client
}

func isTrusted(trusted []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
