package netguard

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/errs"
)

type resolver map[string][]netip.Addr

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

// The field and the caller's noun are the caller's; the address a name
// resolved to is never told.
func TestCheckHostNamesTheField(t *testing.T) {
	r := resolver{"public.test": {netip.MustParseAddr("8.8.8.8")}, "inside.test": {netip.MustParseAddr("10.0.0.5")}}
	for raw, ok := range map[string]bool{
		"https://public.test/jwks":   true,
		"https://inside.test/jwks":   false,
		"https://nowhere.test/jwks":  false,
		"https://127.0.0.1/jwks":     false,
		"https://public.test:9/jwks": false,
	} {
		u, _ := url.Parse(raw)
		err := CheckHost(context.Background(), r, u, "jwks_url", "JWKS URLs", false)
		if ok != (err == nil) {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		if err != nil && (!errs.Is(err, errs.Invalid) || !strings.HasPrefix(errs.Message(err), "jwks_url: ") || strings.Contains(errs.Message(err), "10.0.0.5")) {
			t.Errorf("%s: message %q", raw, errs.Message(err))
		}
		if err := CheckHost(context.Background(), r, u, "jwks_url", "JWKS URLs", true); err != nil {
			t.Errorf("%s with private addresses allowed: %v", raw, err)
		}
	}
	if err := Control(false)("tcp", "10.0.0.5:443", nil); !errors.Is(err, ErrRefused) {
		t.Errorf("dialer to a private address: %v", err)
	}
	if err := Control(false)("tcp", "8.8.8.8:443", nil); err != nil {
		t.Errorf("dialer to a public address: %v", err)
	}
}
