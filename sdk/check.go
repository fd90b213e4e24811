package sdk

// A check is one small POST whose cost should be the network's, not ours.
// Each call leases a *call from a pool: it holds the encoded request body
// (and is itself the request's Body), the response bytes and the denial-memory
// key. The transport closes the request body when it has written it; a call
// goes back to the pool only if that close happened before the check
// returned. Otherwise (an early answer, an error) the transport may still
// read it (and may close it twice), so it is left to the garbage collector.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Reasons a Decision carries.
const (
	ReasonOK          = "ok"
	ReasonRateLimited = "rate_limited"
	ReasonInvalidKey  = "invalid_key" // unknown, revoked or expired consumer key
	// ReasonInvalidToken is a JWT that failed verification (signature,
	// issuer, audience, expiry, algorithm or size).
	ReasonInvalidToken = "invalid_token"
	ReasonBlocked      = "blocked"
	// ReasonConcurrencyLimited is a denial by a concurrency limit: every
	// slot is held by a lease not yet released or expired.
	ReasonConcurrencyLimited = "concurrency_limited"
	// ReasonUnavailable marks a decision the client made by itself because
	// Sluice did not answer: allowed under FailOpen, denied under FailClosed.
	ReasonUnavailable = "sluice_unavailable"
)

// MaxBatch is the most checks one CheckBatch call takes.
const MaxBatch = 1000

// CheckRequest asks whether a caller may make one request now.
type CheckRequest struct {
	APIKey string // the caller's consumer key ("ck_…"), if it presented one
	// JWT is the caller's compact token from one of the tenant's JWT
	// issuers, used when APIKey is empty; its subject is the caller.
	JWT    string
	IP     string // the caller's IP literal; required when APIKey and JWT are empty
	Method string // default GET
	Path   string // the raw request target as received, possibly percent-encoded; required
	Cost   int    // tokens to consume; 0 means 1
	Peek   bool   // answer as a check would, but consume nothing and record nothing
	// LeaseTTL is how long a slot of a concurrency limit is held unless
	// released (1 s to 24 h); 0 takes Sluice's default, 60 s.
	LeaseTTL time.Duration
	// Wait, when set (at most MaxWait), lets Sluice hold a check that a
	// rate limit denies for up to this long and admit it as soon as its
	// bucket allows, first come first served, instead of denying it at
	// once. The check's timeout grows by Wait. Not with Peek, and not in
	// CheckBatch; such a check neither consults nor fills the denial
	// memory, and is never batched (WithBatching).
	Wait time.Duration
}

// MaxWait is the longest CheckRequest.Wait Sluice accepts.
const MaxWait = 30 * time.Second

func (r *CheckRequest) cost() int { return max(r.Cost, 1) }

// Identity is who Sluice counted a check against.
type Identity struct {
	Kind string `json:"kind"` // "ip", "key" or "jwt"
	ID   string `json:"id"`
}

// CustomerRef names a customer in a check's answer.
type CustomerRef struct {
	ID         string `json:"id"`
	ExternalID string `json:"external_id"`
}

// Decision is Sluice's answer to one check, or the client's own answer when
// Local is set.
type Decision struct {
	Allowed  bool
	Reason   string // ReasonOK, ReasonRateLimited, ReasonConcurrencyLimited, ReasonInvalidKey, ReasonInvalidToken, ReasonBlocked or ReasonUnavailable
	Policy   string // the matching policy's name; "" when none matched
	Tier     string
	Identity Identity
	// Customer is the caller's customer, when its key belongs to one
	// (zero otherwise).
	Customer     CustomerRef
	Limit        int64         // the limit that denied, else the one with least remaining
	Remaining    int64         // whole tokens left after this check
	Reset        time.Duration // until that limit's bucket is full again
	RetryAfter   time.Duration // until this same check would be allowed; 0 if allowed
	ShadowDenied bool          // a shadow policy would have denied
	// Waited is how long the check waited for its bucket (CheckRequest.Wait).
	Waited time.Duration
	// WaitRefused says why a check with a Wait was denied before its wait
	// ended ("retry_after_beyond_wait", "bucket_queue_full",
	// "tenant_queue_full", "server_queue_full", "shutting_down",
	// "handover", "owner_cannot_wait"); "" otherwise.
	WaitRefused string
	// Local is set when the client answered without Sluice: from its denial
	// memory, or by the failure mode (Reason ReasonUnavailable).
	Local bool
	// Header holds the answer's rate-limit header fields (RateLimit-Policy,
	// RateLimit, X-RateLimit-*, Retry-After) for copying onto a response.
	// It is nil for batch results and failure-mode decisions; WriteHeaders
	// then derives what it can from the fields above. Treat it as
	// read-only: a remembered denial shares it.
	Header http.Header

	// Lease names the slot of a concurrency limit an allowed check took
	// ("" when it took none); give it back with Client.Release when the
	// request ends, or it is held until LeaseExpiresAt.
	Lease          string
	LeaseExpiresAt time.Time

	// violated caches violatedPolicies for a remembered denial.
	violated []string
}

// PolicyItems parses the decision's RateLimit-Policy field.
func (d Decision) PolicyItems() ([]RateLimitItem, error) {
	return parseHeaderValues(d.Header[hdrPolicy])
}

// LimitItems parses the decision's RateLimit field.
func (d Decision) LimitItems() ([]RateLimitItem, error) {
	return parseHeaderValues(d.Header[hdrRateLimit])
}

// Check asks Sluice whether req may proceed and consumes req.Cost tokens if
// so. A denial is a Decision, not an error. When Sluice could not answer,
// err says why and d is the failure-mode decision (see FailOpen), so d is
// always usable.
func (c *Client) Check(ctx context.Context, req CheckRequest) (Decision, error) {
	return c.check(ctx, &req)
}

// Peek is Check with req.Peek set: the answer a check would get, consuming
// nothing.
func (c *Client) Peek(ctx context.Context, req CheckRequest) (Decision, error) {
	req.Peek = true
	return c.check(ctx, &req)
}

func (c *Client) check(ctx context.Context, req *CheckRequest) (Decision, error) {
	c.checks.Add(1)
	now := c.now()
	k := getCall()
	remember := c.denials != nil && req.Wait == 0
	if remember {
		k.key = appendDenialKey(k.key[:0], req)
		if d, ok := c.denials.lookup(k.key, req.cost(), now); ok {
			putCall(k)
			c.localDenials.Add(1)
			return d, nil
		}
	}
	var d Decision
	var err error
	if c.batch != nil && req.Wait == 0 {
		d, err = c.batch.check(ctx, req)
	} else {
		d, err = c.checkOne(ctx, k, req)
	}
	if err != nil {
		putCall(k)
		return c.failure(ctx, err, 1), fmt.Errorf("sluice: check: %w", err)
	}
	// A concurrency denial is not remembered: a release may free a slot
	// long before the first lease's expiry that RetryAfter counts to.
	if remember && !d.Allowed && d.RetryAfter > 0 && d.Reason != ReasonConcurrencyLimited {
		c.denials.insert(k.key, req.cost(), d, now)
	}
	putCall(k)
	return d, nil
}

// CheckBatch asks for up to MaxBatch checks in one round trip and returns
// their decisions in order. It neither consults nor fills the denial memory.
// When Sluice could not answer, err says why and every decision is the
// failure-mode decision. A batch that is empty or too large is refused
// with an *Error before anything is sent.
func (c *Client) CheckBatch(ctx context.Context, reqs []CheckRequest) ([]Decision, error) {
	if len(reqs) == 0 || len(reqs) > MaxBatch {
		return nil, &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("a batch holds 1 to %d checks, not %d", MaxBatch, len(reqs))}
	}
	c.checks.Add(uint64(len(reqs)))
	k := getCall()
	out, err := c.checkMany(ctx, k, reqs)
	putCall(k)
	if err != nil {
		d := c.failure(ctx, err, len(reqs))
		out = make([]Decision, len(reqs))
		for i := range out {
			out[i] = d
		}
		return out, fmt.Errorf("sluice: check batch: %w", err)
	}
	return out, nil
}

// checkOne sends req alone to /v1/check through k and decodes the answer,
// keeping Sluice's header fields.
func (c *Client) checkOne(ctx context.Context, k *call, req *CheckRequest) (Decision, error) {
	var d Decision
	k.body = appendCheck(k.body[:0], req)
	// A check that may wait for its bucket is answered up to Wait later.
	hdr, body, err := c.post(ctx, c.checkURL, c.timeout+req.Wait, k)
	if err != nil {
		return d, err
	}
	s := scanner{b: body}
	if err := c.decodeDecision(&s, &d, req); err != nil {
		return d, err
	}
	if err := s.end(); err != nil {
		return d, err
	}
	d.Header = hdr
	return d, nil
}

// checkMany sends reqs (1 to MaxBatch) to /v1/check/batch through k and
// returns their decisions in order; the timeout grows by 100 µs per check.
func (c *Client) checkMany(ctx context.Context, k *call, reqs []CheckRequest) ([]Decision, error) {
	k.body = append(k.body[:0], `{"checks":[`...)
	for i := range reqs {
		if i > 0 {
			k.body = append(k.body, ',')
		}
		k.body = appendCheck(k.body, &reqs[i])
	}
	k.body = append(k.body, "]}"...)
	timeout := c.timeout + time.Duration(len(reqs))*100*time.Microsecond
	_, body, err := c.post(ctx, c.batchURL, timeout, k)
	if err != nil {
		return nil, err
	}
	return c.decodeBatch(body, reqs)
}

// post sends k.body to u and reads the answer into k.resp. A non-200 answer
// is an *Error.
func (c *Client) post(ctx context.Context, u *url.URL, timeout time.Duration, k *call) (http.Header, []byte, error) {
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	hdr := c.checkHeader
	if c.cloneHeader {
		hdr = hdr.Clone()
	}
	k.off = 0
	k.inflight = true
	req := (&http.Request{
		Method:        http.MethodPost,
		URL:           u,
		Header:        hdr,
		Body:          k,
		GetBody:       k.getBody,
		ContentLength: int64(len(k.body)),
	}).WithContext(ctx)
	var resp *http.Response
	var err error
	if c.rt != nil {
		resp, err = c.rt.RoundTrip(req)
	} else {
		resp, err = c.hc.Do(req)
	}
	if err != nil {
		return nil, nil, err
	}
	k.resp, err = readBody(k.resp[:0], resp.Body, maxAnswer)
	resp.Body.Close()
	if err != nil {
		return nil, nil, err
	}
	k.inflight = !k.closed.Load()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, errorFromResponse(resp.StatusCode, k.resp)
	}
	return resp.Header, k.resp, nil
}

// maxAnswer bounds what the client reads from one answer: a full batch is
// well under 1 MiB.
const maxAnswer = 4 << 20

var errAnswerTooLarge = errors.New("answer larger than 4 MiB")

// readBody appends r's content to dst, up to limit bytes.
func readBody(dst []byte, r io.Reader, limit int) ([]byte, error) {
	if cap(dst) == 0 {
		dst = make([]byte, 0, 512)
	}
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if len(dst) > limit {
			return dst, errAnswerTooLarge
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// call is the per-check scratch space, reused through callPool.
type call struct {
	body   []byte // request body
	off    int    // read offset in body
	resp   []byte // answer body
	key    []byte // denial-memory key
	closed atomic.Bool
	// inflight is set while the transport may still read or close body:
	// from the request until a complete answer arrived after the close.
	inflight bool
	getBody  func() (io.ReadCloser, error) // bound once, so a request does not allocate it
}

var callPool = sync.Pool{New: func() any {
	k := &call{body: make([]byte, 0, 256), resp: make([]byte, 0, 512)}
	k.getBody = k.rewind
	return k
}}

func getCall() *call { return callPool.Get().(*call) }

// putCall returns k to the pool unless the transport may still use it.
func putCall(k *call) {
	if k.inflight {
		return
	}
	if cap(k.body) > 64<<10 || cap(k.resp) > 64<<10 {
		return
	}
	k.closed.Store(false)
	callPool.Put(k)
}

func (k *call) Read(p []byte) (int, error) {
	if k.off >= len(k.body) {
		return 0, io.EOF
	}
	n := copy(p, k.body[k.off:])
	k.off += n
	return n, nil
}

func (k *call) Close() error {
	k.closed.Store(true)
	return nil
}

// rewind gives the transport a fresh copy of the body when it retries a
// request on a new connection; the copy is the transport's to keep.
func (k *call) rewind() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(bytes.Clone(k.body))), nil
}
