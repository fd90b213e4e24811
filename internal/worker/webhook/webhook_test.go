package webhook

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// The example of the Standard Webhooks specification's reference
// libraries.
func TestSignMatchesStandardWebhooks(t *testing.T) {
	got := Sign([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %q, want %q", got, want)
	}
	two := Sign([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if two != got+" "+got {
		t.Fatalf("two secrets: %q", two)
	}
}

func TestForbidden(t *testing.T) {
	for addr, forbidden := range map[string]bool{
		"127.0.0.1": true, "::1": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true,
		"169.254.169.254": true, "fe80::1": true, "fc00::1": true, "fd12::1": true, "0.0.0.0": true, "::": true,
		"100.64.0.1": true, "224.0.0.1": true, "ff02::1": true, "::ffff:127.0.0.1": true, "::ffff:10.0.0.1": true,
		"64:ff9b::a00:1": true, "255.255.255.255": true,
		// IPv6 transition forms, whatever they embed: IPv4-compatible,
		// IPv4-translated, 6to4, Teredo, local-use NAT64, site-local.
		"::a00:1": true, "::5db8:d70e": true, "::ffff:0:a00:1": true, "2002:a00:1::1": true, "2002:5db8:d70e::1": true,
		"2001:0:4136:e378:8000:63bf:3fff:fdd2": true, "64:ff9b:1::a00:1": true, "64:ff9b:1::5db8:d70e": true, "fec0::1": true,
		// Documentation, benchmarking and reserved ranges.
		"192.0.2.1": true, "198.51.100.7": true, "203.0.113.9": true, "240.0.0.1": true, "2001:db8::1": true, "100::1": true,
		// Public, also through the well-known NAT64 prefix.
		"93.184.215.14": false, "2606:2800:21f:cb07:6820:80da:af6b:8b2c": false, "8.8.8.8": false, "64:ff9b::5db8:d70e": false,
		"2001:4860:4860::8888": false,
	} {
		if got := Forbidden(netip.MustParseAddr(addr)) != ""; got != forbidden {
			t.Errorf("%s: forbidden %v, want %v", addr, got, forbidden)
		}
	}
}

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &os.PathError{Op: "lookup", Path: host, Err: os.ErrNotExist}
}

func TestCheckURL(t *testing.T) {
	r := fakeResolver{
		"hooks.example.com": {netip.MustParseAddr("93.184.215.14")},
		"internal.example":  {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("10.0.0.7")},
		"localhost":         {netip.MustParseAddr("127.0.0.1")},
	}
	ctx := context.Background()
	notPublic := "url: the host does not resolve to public addresses only"
	for raw, want := range map[string]string{
		"https://hooks.example.com/sluice":      "",
		"https://hooks.example.com:443/sluice":  "",
		"https://hooks.example.com:8443/sluice": "",
		"http://hooks.example.com/sluice":       "url: must be https",
		"https://internal.example/":             notPublic,
		"https://localhost:8443/":               notPublic,
		"https://nowhere.invalid/":              notPublic,
		"https://127.0.0.1/":                    "url: 127.0.0.1 is a loopback address",
		"https://[::1]/":                        "a loopback address",
		"https://169.254.169.254/latest":        "a link-local address",
		"https://[2002:a00:1::1]/":              "an IPv6 transition address",
		"https://u:p@hooks.example.com/":        "url: must not hold a user name or password",
		"ftp://hooks.example.com/":              "url: must be https",
		// Other ports of a public host are not probed.
		"https://hooks.example.com:22/":    "url: the port must be 443 or 8443",
		"https://hooks.example.com:6379/":  "url: the port must be 443 or 8443",
		"https://hooks.example.com:80/":    "url: the port must be 443 or 8443",
		"https://93.184.215.14:10250/x":    "url: the port must be 443 or 8443",
		"https://hooks.example.com:65535/": "url: the port must be 443 or 8443",
	} {
		err := CheckURL(ctx, r, raw, false)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", raw, err)
		case want != "" && (!errs.Is(err, errs.Invalid) || !strings.Contains(errs.Message(err), want)):
			t.Errorf("%s: %v, want an invalid_request with %q", raw, err, want)
		}
		// No answer about a name tells where it resolves.
		if err != nil && strings.Contains(raw, ".example") && (strings.Contains(errs.Message(err), "10.0.0.7") || strings.Contains(errs.Message(err), "127.0.0.1")) {
			t.Errorf("%s: the error names the resolved address: %v", raw, err)
		}
	}
	// The operator may allow private addresses; https stays required.
	if err := CheckURL(ctx, r, "https://localhost:8443/", true); err != nil {
		t.Errorf("allowed: %v", err)
	}
	if err := CheckURL(ctx, r, "http://localhost:8443/", true); err == nil {
		t.Errorf("http allowed")
	}
}

// The dialer refuses a forbidden address at connect time too, whatever the
// name resolved to when the URL was stored.
func TestDialerRefusesForbiddenAddresses(t *testing.T) {
	check := control(false)
	for _, addr := range []string{"127.0.0.1:443", "[fd00::1]:443", "[2002:a00:1::1]:443", "[::a00:1]:443", "93.184.215.14:22", "93.184.215.14:6443"} {
		err := check("tcp", addr, nil)
		if !errors.Is(err, errRefused) {
			t.Fatalf("%s: %v", addr, err)
		}
		// What the tenant sees of it names no address.
		if d := describe(&net.OpError{Op: "dial", Net: "tcp", Err: err}, time.Second); d != errRefused.Error() {
			t.Fatalf("%s described as %q", addr, d)
		}
	}
	for _, addr := range []string{"93.184.215.14:443", "93.184.215.14:8443", "[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:443"} {
		if err := check("tcp", addr, nil); err != nil {
			t.Fatalf("public %s: %v", addr, err)
		}
	}
	if err := control(true)("tcp", "127.0.0.1:443", nil); err != nil {
		t.Fatalf("allowed: %v", err)
	}
}

func TestSealerKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), KeyFile)
	s1, err := LoadSealer(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st.Mode(), err)
	}
	sealed, _ := s1.Seal([]byte("whsec_abc"))
	if strings.Contains(string(sealed), "whsec_abc") {
		t.Fatal("sealed value holds the secret")
	}
	s2, err := LoadSealer(path)
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := s2.Open(sealed); err != nil || string(plain) != "whsec_abc" {
		t.Fatalf("reopened: %q %v", plain, err)
	}
	other, _ := NewSealer(make([]byte, 32))
	if _, err := other.Open(sealed); err == nil {
		t.Fatal("another key opened the secret")
	}
}
