package webhook

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
		"93.184.215.14": false, "2606:2800:21f:cb07:6820:80da:af6b:8b2c": false, "8.8.8.8": false,
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
	for raw, want := range map[string]string{
		"https://hooks.example.com/sluice": "",
		"http://hooks.example.com/sluice":  "url: must be https",
		"https://internal.example/":        "url: internal.example resolves to 10.0.0.7, a private address",
		"https://localhost:8443/":          "url: localhost resolves to 127.0.0.1, a loopback address",
		"https://127.0.0.1/":               "a loopback address",
		"https://[::1]/":                   "a loopback address",
		"https://169.254.169.254/latest":   "a link-local address",
		"https://nowhere.invalid/":         "url: the host nowhere.invalid does not resolve",
		"https://u:p@hooks.example.com/":   "url: must not hold a user name or password",
		"ftp://hooks.example.com/":         "url: must be https",
	} {
		err := CheckURL(ctx, r, raw, false)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", raw, err)
		case want != "" && (!errs.Is(err, errs.Invalid) || !strings.Contains(errs.Message(err), want)):
			t.Errorf("%s: %v, want an invalid_request with %q", raw, err, want)
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
	if err := check("tcp", "127.0.0.1:443", nil); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("loopback: %v", err)
	}
	if err := check("tcp", "[fd00::1]:443", nil); err == nil {
		t.Fatal("ULA allowed")
	}
	if err := check("tcp", "93.184.215.14:443", nil); err != nil {
		t.Fatalf("public: %v", err)
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
