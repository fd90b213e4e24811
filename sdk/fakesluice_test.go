package sdk

// fakeSluice implements the check endpoints of API.md closely enough to
// exercise the client: service-key auth, the error envelope, request
// validation, consumer keys, blocks, policies matched by path prefix with
// one or several fixed-window limits per policy, shadow mode, peek, the
// answer's fields and headers, and the batch endpoint. Time comes from now.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

const testServiceKey = "sk_test0123456789abcdefghijklmnopqrstuv"

type fakeLimit struct {
	name   string // "" for a policy's only limit
	quota  int64
	window time.Duration
}

type fakePolicy struct {
	name   string
	prefix string // matches paths starting with it
	shadow bool
	limits []fakeLimit
}

type fakeCounter struct {
	start time.Time
	used  int64
}

type wireCheck struct {
	APIKey string `json:"api_key"`
	IP     string `json:"ip"`
	Method string `json:"method"`
	Path   string `json:"path"`
	Cost   *int64 `json:"cost"`
	Peek   bool   `json:"peek"`
}

type wireIdentity struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

type wireAnswer struct {
	Allowed      bool         `json:"allowed"`
	Reason       string       `json:"reason"`
	Policy       *string      `json:"policy"`
	Tier         string       `json:"tier"`
	Identity     wireIdentity `json:"identity"`
	Limit        int64        `json:"limit"`
	Remaining    int64        `json:"remaining"`
	ResetMS      int64        `json:"reset_ms"`
	RetryAfterMS int64        `json:"retry_after_ms"`
	ShadowDenied bool         `json:"shadow_denied,omitempty"`
}

type fakeSluice struct {
	mu       sync.Mutex
	now      func() time.Time
	keys     map[string]string // consumer key → tier; absent = invalid
	blocked  map[string]bool   // identity id
	policies []fakePolicy
	counters map[string]*fakeCounter
	requests []wireCheck // every check received, in order
	calls    int         // HTTP calls to check endpoints
}

func newFakeSluice() *fakeSluice {
	return &fakeSluice{
		now:     time.Now,
		keys:    map[string]string{"ck_good0123456789abcdefghijklmnopqrstu": "pro"},
		blocked: map[string]bool{"198.51.100.66": true},
		policies: []fakePolicy{
			{name: "heavy-example", prefix: "/api/heavy", limits: []fakeLimit{{quota: 2, window: 60 * time.Second}}},
			{name: "multi", prefix: "/api/multi", limits: []fakeLimit{
				{name: "burst", quota: 1, window: 10 * time.Second},
				{name: "daily", quota: 100, window: 24 * time.Hour},
			}},
			{name: "shadowed", prefix: "/api/shadow", shadow: true, limits: []fakeLimit{{quota: 1, window: time.Minute}}},
		},
		counters: map[string]*fakeCounter{},
	}
}

// start serves f on a test server that is closed when the test ends.
func (f *fakeSluice) start(t testing.TB) *httptest.Server {
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	return ts
}

func writeEnvelope(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func (f *fakeSluice) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || (r.URL.Path != "/v1/check" && r.URL.Path != "/v1/check/batch") {
		writeEnvelope(w, http.StatusNotFound, "not_found", "no such endpoint")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+testServiceKey {
		writeEnvelope(w, http.StatusUnauthorized, "unauthenticated", "bad service key")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		writeEnvelope(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "want application/json")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil || len(body) > 1<<20 {
		writeEnvelope(w, http.StatusRequestEntityTooLarge, "payload_too_large", "body over 1 MiB")
		return
	}
	dec := func(v any) error {
		d := json.NewDecoder(strings.NewReader(string(body)))
		d.DisallowUnknownFields()
		return d.Decode(v)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	now := f.now()
	if r.URL.Path == "/v1/check" {
		var c wireCheck
		if err := dec(&c); err != nil {
			writeEnvelope(w, http.StatusBadRequest, "invalid_request", err.Error())
			return
		}
		if msg := validate(c); msg != "" {
			writeEnvelope(w, http.StatusBadRequest, "invalid_request", msg)
			return
		}
		f.requests = append(f.requests, c)
		a, hdr := f.decide(c, now)
		for k, v := range hdr {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(a)
		return
	}
	var b struct {
		Checks []wireCheck `json:"checks"`
	}
	if err := dec(&b); err != nil {
		writeEnvelope(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	if len(b.Checks) < 1 || len(b.Checks) > 1000 {
		writeEnvelope(w, http.StatusBadRequest, "invalid_request", "checks: 1 to 1000")
		return
	}
	for i, c := range b.Checks {
		if msg := validate(c); msg != "" {
			writeEnvelope(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("checks[%d].%s", i, msg))
			return
		}
	}
	out := struct {
		Results []wireAnswer `json:"results"`
	}{}
	for _, c := range b.Checks {
		f.requests = append(f.requests, c)
		a, _ := f.decide(c, now)
		out.Results = append(out.Results, a)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

func validate(c wireCheck) string {
	if c.Path == "" {
		return "path is required"
	}
	if c.APIKey == "" {
		if c.IP == "" {
			return "ip is required without api_key"
		}
		if _, err := netip.ParseAddr(c.IP); err != nil {
			return "ip is not an IP literal"
		}
	}
	if c.Cost != nil && *c.Cost < 1 {
		return "cost must be at least 1"
	}
	return ""
}

// decide answers one check; f.mu is held.
func (f *fakeSluice) decide(c wireCheck, now time.Time) (wireAnswer, http.Header) {
	cost := int64(1)
	if c.Cost != nil {
		cost = *c.Cost
	}
	id := wireIdentity{Kind: "ip", ID: c.IP}
	tier := "anonymous"
	if c.APIKey != "" {
		id = wireIdentity{Kind: "key", ID: "key_" + strings.TrimPrefix(c.APIKey, "ck_")[:4]}
		t, ok := f.keys[c.APIKey]
		if !ok {
			return wireAnswer{Reason: "invalid_key", Identity: id}, nil
		}
		tier = t
	}
	if f.blocked[id.ID] {
		return wireAnswer{Reason: "blocked", Identity: id, Tier: tier}, nil
	}
	path, _, _ := strings.Cut(c.Path, "?")
	var pol *fakePolicy
	for i := range f.policies {
		if strings.HasPrefix(path, f.policies[i].prefix) {
			pol = &f.policies[i]
		}
	}
	if pol == nil {
		return wireAnswer{Allowed: true, Reason: "ok", Tier: tier, Identity: id}, nil
	}

	type state struct {
		c                *fakeCounter
		l                fakeLimit
		remaining, reset int64 // after this check; reset in ms
	}
	states := make([]state, len(pol.limits))
	allowed := true
	for i, l := range pol.limits {
		key := pol.name + "/" + l.name + "/" + id.Kind + ":" + id.ID
		ctr := f.counters[key]
		if ctr == nil || now.Sub(ctr.start) >= l.window {
			ctr = &fakeCounter{start: now}
			if !c.Peek {
				f.counters[key] = ctr
			}
		}
		states[i] = state{c: ctr, l: l, reset: ctr.start.Add(l.window).Sub(now).Milliseconds()}
		if ctr.used+cost > l.quota {
			allowed = false
		}
	}
	deny := -1
	for i := range states {
		s := &states[i]
		if allowed && !c.Peek {
			s.c.used += cost
		}
		used := s.c.used
		if allowed && c.Peek {
			used += cost
		}
		s.remaining = max(s.l.quota-used, 0)
		if !allowed && deny < 0 && s.c.used+cost > s.l.quota {
			deny = i
		}
	}
	pick := deny
	if pick < 0 {
		pick = 0
		for i := range states {
			if states[i].remaining < states[pick].remaining {
				pick = i
			}
		}
	}
	name := pol.name
	a := wireAnswer{
		Allowed: allowed, Reason: "ok", Policy: &name, Tier: tier, Identity: id,
		Limit: states[pick].l.quota, Remaining: states[pick].remaining, ResetMS: states[pick].reset,
	}
	if !allowed {
		a.Reason = "rate_limited"
		a.RetryAfterMS = states[deny].reset
	}
	if pol.shadow && !allowed {
		a.Allowed, a.Reason, a.ShadowDenied, a.RetryAfterMS = true, "ok", true, 0
	}

	hdr := http.Header{}
	var pols, lims []string
	for _, s := range states {
		n := pol.name
		if len(pol.limits) > 1 {
			n += "." + s.l.name
		}
		pols = append(pols, fmt.Sprintf("%q;q=%d;w=%d", n, s.l.quota, int64(s.l.window/time.Second)))
		lims = append(lims, fmt.Sprintf("%q;r=%d;t=%d", n, s.remaining, ceilMS(s.reset)))
	}
	hdr.Set("RateLimit-Policy", strings.Join(pols, ", "))
	hdr.Set("RateLimit", strings.Join(lims, ", "))
	hdr.Set("X-RateLimit-Limit", fmt.Sprint(a.Limit))
	hdr.Set("X-RateLimit-Remaining", fmt.Sprint(a.Remaining))
	hdr.Set("X-RateLimit-Reset", fmt.Sprint(ceilMS(a.ResetMS)))
	if !a.Allowed {
		hdr.Set("Retry-After", fmt.Sprint(ceilMS(a.RetryAfterMS)))
	}
	return a, hdr
}

func ceilMS(ms int64) int64 { return int64(math.Ceil(float64(ms) / 1000)) }

// checks returns a copy of the checks received so far.
func (f *fakeSluice) checks() []wireCheck {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wireCheck(nil), f.requests...)
}

func (f *fakeSluice) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}
