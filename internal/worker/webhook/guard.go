package webhook

// Where a webhook may point. A tenant's URL is resolved when it is
// stored, and every address it resolves to must be public; the dialer
// checks each address again when a delivery connects, so a name that
// resolves elsewhere later (DNS rebinding) still cannot reach a loopback,
// private or link-local address. Redirects are never followed and no
// proxy is used, so the address checked is the address reached.
//
// Only ports 443 and 8443 (or none, 443) may be used, so that a webhook
// cannot probe a public host's other services and read the outcome back
// from its deliveries. What a tenant is told never holds an address its
// host resolved to: an error that did would be an oracle for the
// platform's internal DNS. With --webhook-allow-private none of this is
// checked (development, tests).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

var (
	cgnat   = netip.MustParsePrefix("100.64.0.0/10")
	thisNet = netip.MustParsePrefix("0.0.0.0/8")
	ietf    = netip.MustParsePrefix("192.0.0.0/24")
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	// special are other ranges no webhook receiver is on: benchmarking,
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

// Forbidden says why a delivery may not go to addr, or "" when it may:
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

// Ports are the ports a webhook may use when private addresses are not
// allowed.
var Ports = []int{443, 8443}

// portAllowed reports whether a URL's or an address's port may be used;
// "" is the scheme's (443).
func portAllowed(port string) bool {
	if port == "" {
		return true
	}
	n, err := strconv.Atoi(port)
	return err == nil && slices.Contains(Ports, n)
}

// errRefused is the dialer's refusal of an address: what the tenant sees
// of it never names the address (describe).
var errRefused = errors.New("refused to connect: the host's address is not a public one")

// Resolver looks a host's addresses up (net.DefaultResolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL checks a webhook URL: its form (tenants.ValidateWebhookURL)
// and, unless allowPrivate, that every address its host resolves to is
// public. Errors name the field url.
func CheckURL(ctx context.Context, r Resolver, raw string, allowPrivate bool) error {
	u, err := tenants.ValidateWebhookURL(raw)
	if err != nil {
		return err
	}
	if allowPrivate {
		return nil
	}
	if !portAllowed(u.Port()) {
		return errs.Errorf(errs.Invalid, "url: the port must be 443 or 8443")
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		// The tenant wrote the address: saying what it is tells nothing.
		if why := Forbidden(a); why != "" {
			return errs.Errorf(errs.Invalid, "url: %s is %s; webhooks may only reach public addresses", a, why)
		}
		return nil
	}
	// One answer whether the name does not resolve or resolves to an
	// address that is not public, and never the address.
	refused := errs.Errorf(errs.Invalid, "url: the host does not resolve to public addresses only; webhooks may only reach public addresses")
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

// control is the dialer's check of the address it is about to connect
// to, after resolution.
func control(allowPrivate bool) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if allowPrivate {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("webhook: dial: %w", errRefused)
		}
		if Forbidden(ap.Addr()) != "" || !portAllowed(strconv.Itoa(int(ap.Port()))) {
			return errRefused
		}
		return nil
	}
}

var _ Resolver = (*net.Resolver)(nil)
