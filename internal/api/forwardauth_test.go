package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestParseTrustedProxies(t *testing.T) {
	ps, err := ParseTrustedProxies(" 10.0.0.0/8, 127.0.0.1,::1 ,")
	if err != nil || len(ps) != 3 || ps[0].String() != "10.0.0.0/8" || ps[1].String() != "127.0.0.1/32" || ps[2].String() != "::1/128" {
		t.Fatalf("ParseTrustedProxies = %v, %v", ps, err)
	}
	if _, err := ParseTrustedProxies("10.0.0.0/8,proxy.local"); err == nil || err.Error() != `"proxy.local" is neither an IP address nor a CIDR prefix` {
		t.Errorf("bad entry: %v", err)
	}
}

func TestForwardedIP(t *testing.T) {
	ps, _ := ParseTrustedProxies("127.0.0.1,10.0.0.0/8")
	h := &handler{Config: Config{TrustedProxies: ps}}
	cases := []struct {
		peer string
		xff  []string
		want string
	}{
		{"203.0.113.9:5000", []string{"198.51.100.1"}, "203.0.113.9"},                   // untrusted peer: its header is ignored
		{"127.0.0.1:5000", nil, "127.0.0.1"},                                            // trusted peer, no header
		{"127.0.0.1:5000", []string{"198.51.100.1"}, "198.51.100.1"},                    // one proxy
		{"127.0.0.1:5000", []string{"6.6.6.6, 198.51.100.1, 10.1.2.3"}, "198.51.100.1"}, // a spoofed left-most hop is skipped
		{"127.0.0.1:5000", []string{"6.6.6.6", "198.51.100.1"}, "198.51.100.1"},         // several header lines
		{"127.0.0.1:5000", []string{"10.0.0.1, 10.0.0.2"}, "10.0.0.1"},                  // all trusted: the left-most
		{"127.0.0.1:5000", []string{"junk, 10.0.0.2"}, "10.0.0.2"},                      // unparsable hop: the last vouched for
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/v1/forward-auth", nil)
		r.RemoteAddr = c.peer
		r.Header = http.Header{}
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := h.forwardedIP(r); got != c.want {
			t.Errorf("peer %s XFF %q: %s, want %s", c.peer, c.xff, got, c.want)
		}
	}
	none := &handler{}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "127.0.0.1:1"
	r.Header.Set("X-Forwarded-For", "198.51.100.1")
	if got := none.forwardedIP(r); got != "127.0.0.1" {
		t.Errorf("no trusted proxies: %s", got)
	}
}

func TestConsumerKey(t *testing.T) {
	for _, c := range []struct {
		h    http.Header
		want string
	}{
		{http.Header{"X-Api-Key": {"ck_a"}}, "ck_a"},
		{http.Header{"Authorization": {"Bearer ck_b"}}, "ck_b"},
		{http.Header{"Authorization": {"bearer  ck_c "}}, "ck_c"},
		{http.Header{"Authorization": {"Bearer eyJhbGciOi"}}, ""}, // the upstream's own token
		{http.Header{"X-Api-Key": {"ck_a"}, "Authorization": {"Bearer ck_b"}}, "ck_a"},
		{http.Header{}, ""},
	} {
		if got := consumerKey(c.h); got != c.want {
			t.Errorf("%v: %q, want %q", c.h, got, c.want)
		}
	}
}
