package webhook

// Where a webhook may point. A tenant's URL is resolved when it is
// stored, and every address it resolves to must be public; the dialer
// checks each address again when a delivery connects, so a name that
// resolves elsewhere later (DNS rebinding) still cannot reach a loopback,
// private or link-local address. Redirects are never followed and no
// proxy is used, so the address checked is the address reached.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

var (
	cgnat     = netip.MustParsePrefix("100.64.0.0/10")
	thisNet   = netip.MustParsePrefix("0.0.0.0/8")
	benchmark = netip.MustParsePrefix("198.18.0.0/15")
	ietf      = netip.MustParsePrefix("192.0.0.0/24")
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
)

// Forbidden says why a delivery may not go to addr, or "" when it may:
// loopback, private (RFC 1918, fc00::/7), link-local, unspecified,
// multicast, shared (100.64/10) and other special-use ranges.
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
	case benchmark.Contains(addr), ietf.Contains(addr), addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "a special-use address"
	}
	return ""
}

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
	host := u.Hostname()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		addrs, err = r.LookupNetIP(ctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return errs.Errorf(errs.Invalid, "url: the host %s does not resolve", host)
		}
	}
	for _, a := range addrs {
		if why := Forbidden(a); why != "" {
			return errs.Errorf(errs.Invalid, "url: %s resolves to %s, %s; webhooks may only reach public addresses", host, a.Unmap(), why)
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
			return fmt.Errorf("webhook: dial %s: %w", address, err)
		}
		if why := Forbidden(ap.Addr()); why != "" {
			return fmt.Errorf("webhook: refused to connect to %s, %s", ap.Addr(), why)
		}
		return nil
	}
}

var _ Resolver = (*net.Resolver)(nil)
