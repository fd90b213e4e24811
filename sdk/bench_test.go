package sdk

// The middleware's own cost is measured against a canned transport that
// allocates one object per call (the response body's NopCloser), so what
// the benchmarks report is that one, the HTTP layer and the SDK.
// BenchmarkHTTPClientFloor is the least a hand-written check can do
// through the same http.Client (a request, a context deadline, reading the
// answer); the middleware's count minus the floor's is the SDK's own.

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

const (
	allowedAnswer = `{"allowed":true,"reason":"ok","policy":"heavy-example","tier":"pro","identity":{"kind":"key","id":"key_good"},"limit":10,"remaining":9,"reset_ms":6000,"retry_after_ms":0}`
	deniedAnswer  = `{"allowed":false,"reason":"rate_limited","policy":"heavy-example","tier":"anonymous","identity":{"kind":"ip","id":"203.0.113.7"},"limit":10,"remaining":0,"reset_ms":6000,"retry_after_ms":6000}`
)

// cannedTransport answers every request with the same response object.
// It serves one goroutine at a time.
type cannedTransport struct {
	resp http.Response
	body strings.Reader
	text string
}

func newCanned(answer string, hdr http.Header) *cannedTransport {
	t := &cannedTransport{text: answer}
	t.resp = http.Response{StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: hdr, ContentLength: int64(len(answer))}
	return t
}

func (t *cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	t.body.Reset(t.text)
	t.resp.Body = io.NopCloser(&t.body)
	t.resp.Request = r
	return &t.resp, nil
}

// discardWriter is a ResponseWriter that keeps only its header map.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(s int)           { w.status = s }

func answerHeader(denied bool) http.Header {
	h := http.Header{
		"Content-Type":          {"application/json"},
		"Ratelimit-Policy":      {`"heavy-example";q=10;w=60`},
		"Ratelimit":             {`"heavy-example";r=9;t=6`},
		"X-Ratelimit-Limit":     {"10"},
		"X-Ratelimit-Remaining": {"9"},
		"X-Ratelimit-Reset":     {"6"},
	}
	if denied {
		h["Ratelimit"] = []string{`"heavy-example";r=0;t=6`}
		h["X-Ratelimit-Remaining"] = []string{"0"}
		h["Retry-After"] = []string{"6"}
	}
	return h
}

// benchMiddleware measures the middleware with the client's default
// path (its own transport, called directly), or through an http.Client
// given with WithHTTPClient.
func benchMiddleware(b *testing.B, answer string, denied, viaHTTPClient bool, opts ...Option) {
	rt := newCanned(answer, answerHeader(denied))
	if viaHTTPClient {
		opts = append(opts, WithHTTPClient(&http.Client{Transport: rt}))
	}
	c := New("http://sluice.invalid", testServiceKey, append(opts, quiet())...)
	if !viaHTTPClient {
		c.rt = rt
	}
	var reached int
	h := c.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))
	r, _ := http.NewRequest("GET", "http://app.example/api/example?mode=heavy", nil)
	r.RequestURI = "/api/example?mode=heavy"
	r.RemoteAddr = "203.0.113.7:54321"
	if !denied {
		r.Header.Set("X-API-Key", goodKey)
	}
	w := &discardWriter{h: make(http.Header, 16)}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	if denied == (reached > 0) || (denied && w.status != 429) {
		b.Fatalf("denied=%v: handler reached %d times, status %d", denied, reached, w.status)
	}
}

func BenchmarkMiddleware(b *testing.B) {
	b.Run("allowed", func(b *testing.B) { benchMiddleware(b, allowedAnswer, false, false) })
	b.Run("allowed-via-http.Client", func(b *testing.B) { benchMiddleware(b, allowedAnswer, false, true) })
	b.Run("denied", func(b *testing.B) { benchMiddleware(b, deniedAnswer, true, false, WithDenialCache(0)) })
	b.Run("denied-locally", func(b *testing.B) { benchMiddleware(b, deniedAnswer, true, false) })
}

// BenchmarkHTTPClientFloor is a bare check through http.Client: the
// allocations no SDK built on it can avoid.
func BenchmarkHTTPClientFloor(b *testing.B) {
	rt := newCanned(allowedAnswer, answerHeader(false))
	hc := &http.Client{Transport: rt}
	body := []byte(`{"path":"/api/example?mode=heavy","method":"GET","ip":"203.0.113.7"}`)
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://sluice.invalid/v1/check", bytes.NewReader(body))
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
	}
}

func BenchmarkParseRateLimitHeader(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		ParseRateLimitHeader(`"burst";q=100;w=60, "daily";q=1000;w=86400`)
	}
}
