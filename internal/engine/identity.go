package engine

import (
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/internal/errs"
)

// Identity kinds, as the API spells them.
const (
	KindIP  = "ip"
	KindKey = "key"
	// KindJWT is a caller identified by a verified JWT's subject.
	KindJWT = "jwt"
)

// NormalizeIP parses an IPv4 or IPv6 literal and returns the identity it is
// counted as: the address itself for IPv4 (and IPv4-mapped IPv6), the /64
// network for IPv6, since one subscriber usually holds a whole /64 and would
// otherwise get 2^64 fresh buckets.
func NormalizeIP(s string) (string, bool) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || a.Zone() != "" {
		return "", false
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String(), true
	}
	p, err := a.Prefix(64)
	if err != nil {
		return "", false
	}
	return p.String(), true
}

// NormalizeIdentity validates an identity given by a caller (a bucket reset,
// a block) and returns its canonical id.
func NormalizeIdentity(field, kind, id string) (string, error) {
	switch kind {
	case KindIP:
		ip, ok := NormalizeIP(id)
		if !ok {
			// A /64 written as a prefix is accepted too.
			if p, err := netip.ParsePrefix(id); err == nil && p.Addr().Is6() && p.Bits() == 64 {
				return p.Masked().String(), nil
			}
			return "", errs.Errorf(errs.Invalid, "%s.id: must be an IPv4 or IPv6 address", field)
		}
		return ip, nil
	case KindKey:
		if id == "" {
			return "", errs.Errorf(errs.Invalid, "%s.id: required, the consumer key's id", field)
		}
		return id, nil
	case KindJWT:
		if id == "" || len(id) > MaxJWTSubject {
			return "", errs.Errorf(errs.Invalid, "%s.id: required, a JWT subject of at most %d bytes", field, MaxJWTSubject)
		}
		return id, nil
	default:
		return "", errs.Errorf(errs.Invalid, "%s.kind: must be \"ip\", \"key\" or \"jwt\"", field)
	}
}
