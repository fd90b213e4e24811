// Package netguard says where Sluice may connect on a tenant's behalf (a
// webhook's deliveries, an issuer's JWKS fetches): a URL's host is
// resolved when it is stored, and every address it resolves to must be
// public; the dialer checks each address again when it connects, so a
// name that resolves elsewhere later (DNS rebinding) still cannot reach a
// loopback, private or link-local address. Callers follow no redirects
// and use no proxy, so the address checked is the address reached.
//
// Only ports 443 and 8443 (or none, 443) may be used, so that a tenant
// cannot probe a public host's other services. What a tenant is told
// never holds an address its host resolved to: an error that did would be
// an oracle for the platform's internal DNS. With allowPrivate none of
// this is checked (development, tests).
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"syscall"

	"github.com/sluicehq/sluice/internal/errs"
)

var (
	cgnat   = netip.MustParsePrefix("100.64.0.0/10")
	thisNet = netip.MustParsePrefix("0.0.0.0/8")
	ietf    = netip.MustParsePrefix("192.0.0.0/24")
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	// special are other ranges no tenant's service is on: benchmarking,
	// documentation, reserved (240/4).
	special = prefixes("198.18.0.0/15", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4",
		"100::/64", "2001:db8::/32", "2001:2::/48", "2001:10::/28", "2001:20::/28")
	// transition are IPv6 forms that reach, or embed, an IPv4 address
	// other than by the well-known NAT64 prefix: IPv4-compatible (::/96),
	// IPv4-translated (::ffff:0:0:0/96), 6to4 (2002::/16), Teredo
	// (2001::/32), local-use NAT64 (64:ff9b:1::/48), and the old
	// site-local range (fec0::/10). They are refused whatever they embed.
	transition = prefixes("::/96", "::ffff:0:0:0/96", "2002::/16", "2001::/32", "64:ff9b:1::/48", "fec0::/10")
)

func prefixes(ps ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

func within(ps []netip.Prefix, addr netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// Forbidden says why Sluice may not connect to addr, or "" when it may:
// loopback, private (RFC 1918, fc00::/7), link-local, unspecified,
// multicast, shared (100.64/10), IPv6 transition forms and other
// special-use ranges. A NAT64 address (64:ff9b::/96) is judged by the IPv4
// address it embeds.
func Forbidden(addr netip.Addr) string {
	addr = addr.Unmap()
	if addr.Is6() && nat64.Contains(addr) {
		// A NAT64 address reaches the IPv4 address it embeds.
		b := addr.As16()
		addr = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	switch {
	case !addr.IsValid():
		return "not an address"
	case addr.IsLoopback():
		return "a loopback address"
	case addr.IsPrivate():
		return "a private address"
	case addr.IsLinkLocalUnicast(), addr.IsLinkLocalMulticast():
		return "a link-local address"
	case addr.IsUnspecified(), thisNet.Contains(addr):
		return "an unspecified address"
	case addr.IsMulticast(), addr.IsInterfaceLocalMulticast():
		return "a multicast address"
	case cgnat.Contains(addr):
		return "a shared (carrier-grade NAT) address"
	case within(special, addr), ietf.Contains(addr), addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "a special-use address"
	case within(transition, addr):
		return "an IPv6 transition address"
	}
	return ""
}

// Ports are the ports Sluice connects to when private addresses are not
// allowed.
var Ports = []int{443, 8443}

// PortAllowed reports whether a URL's or an address's port may be used;
// "" is the scheme's (443).
func PortAllowed(port string) bool {
	if port == "" {
		return true
	}
	n, err := strconv.Atoi(port)
	return err == nil && slices.Contains(Ports, n)
}

// ErrRefused is the dialer's refusal of an address: what the tenant sees
// of it never names the address.
var ErrRefused = errors.New("refused to connect: the host's address is not a public one")

// Resolver looks a host's addresses up (net.DefaultResolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckHost checks, unless allowPrivate, that u's port is allowed and
// that every address its host resolves to is public. Errors name field;
// what says who may only reach public addresses ("webhooks").
func CheckHost(ctx context.Context, r Resolver, u *url.URL, field, what string, allowPrivate bool) error {
	if allowPrivate {
		return nil
	}
	if !PortAllowed(u.Port()) {
		return errs.Errorf(errs.Invalid, "%s: the port must be 443 or 8443", field)
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		// The tenant wrote the address: saying what it is tells nothing.
		if why := Forbidden(a); why != "" {
			return errs.Errorf(errs.Invalid, "%s: %s is %s; %s may only reach public addresses", field, a, why, what)
		}
		return nil
	}
	// One answer whether the name does not resolve or resolves to an
	// address that is not public, and never the address.
	refused := errs.Errorf(errs.Invalid, "%s: the host does not resolve to public addresses only; %s may only reach public addresses", field, what)
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return refused
	}
	for _, a := range addrs {
		if Forbidden(a) != "" {
			return refused
		}
	}
	return nil
}

// Control is a net.Dialer's Control: the check of the address it is about
// to connect to, after resolution.
func Control(allowPrivate bool) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if allowPrivate {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("dial: %w", ErrRefused)
		}
		if Forbidden(ap.Addr()) != "" || !PortAllowed(strconv.Itoa(int(ap.Port()))) {
			return ErrRefused
		}
		return nil
	}
}

var _ Resolver = (*net.Resolver)(nil)
