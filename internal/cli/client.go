package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// client speaks Sluice's HTTP API with one credential. It never talks to
// SQLite or NATS: everything goes through /v1, as for any other client.
type client struct {
	base  string
	token string
	// credential names where the token came from, for error messages
	// ("the service key (SLUICE_SERVICE_KEY)").
	credential string
	hc         *http.Client
	// sleep waits d or until ctx ends; a timer unless a test sets it.
	sleep func(ctx context.Context, d time.Duration) error
}

func newClient(base, token, credential string, timeout time.Duration) *client {
	return &client{base: strings.TrimRight(base, "/"), token: token, credential: credential, hc: &http.Client{Timeout: timeout}, sleep: sleepCtx}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sluice's own limits (a tenant's config writes a second, say) refuse a
// request with 429 rate_limited before doing anything, so it is safe to
// send again: do waits the answer's Retry-After, if it is at most
// maxRetryWait, up to maxRetries times.
const (
	maxRetries   = 5
	maxRetryWait = 10 * time.Second
)

// do sends one request as once does, again after a rate_limited refusal
// that says when.
func (c *client) do(ctx context.Context, method, path string, in, out any) (http.Header, error) {
	for attempt := 0; ; attempt++ {
		h, err := c.once(ctx, method, path, in, out)
		var ae *APIError
		if attempt == maxRetries || !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests || ae.Code != "rate_limited" {
			return h, err
		}
		secs, perr := strconv.Atoi(h.Get("Retry-After"))
		wait := time.Duration(secs) * time.Second
		if perr != nil || secs < 0 || wait > maxRetryWait {
			return h, err
		}
		if serr := c.sleep(ctx, wait); serr != nil {
			return h, err
		}
	}
}

// APIError is a non-2xx answer of the server, in the API's error envelope.
type APIError struct {
	Method, Path string
	Status       int
	Code         string
	Message      string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, e.Code, e.Message)
}

// errUnreachable is a server that did not answer at all.
type errUnreachable struct {
	base string
	err  error
}

func (e *errUnreachable) Error() string {
	return fmt.Sprintf("cannot reach Sluice at %s (%v): is the server running, and is --url (or SLUICE_URL) right?", e.base, e.err)
}

func (e *errUnreachable) Unwrap() error { return e.err }

// errRefused is a 401: the credential is wrong.
type errRefused struct {
	credential string
	api        *APIError
}

func (e *errRefused) Error() string {
	return fmt.Sprintf("the server refused %s (401 %s: %s)", e.credential, e.api.Code, e.api.Message)
}

func (e *errRefused) Unwrap() error { return e.api }

// once sends one request with the client's bearer token. in, when not nil,
// is sent as JSON; a 2xx answer is decoded into out when out is not nil.
// The answer's headers are returned for the callers that show them.
func (c *client) once(ctx context.Context, method, path string, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("--url %q: %w", c.base, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "sluice-cli")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%s %s: interrupted before Sluice answered", method, path)
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("%s %s: Sluice at %s did not answer within %s", method, path, c.base, c.hc.Timeout)
		}
		return nil, &errUnreachable{base: c.base, err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		ae := &APIError{Method: method, Path: path, Status: resp.StatusCode}
		var env struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &env) == nil && env.Error.Code != "" {
			ae.Code, ae.Message = env.Error.Code, env.Error.Message
		} else {
			ae.Code = "unexpected_answer"
			ae.Message = fmt.Sprintf("%s is not a Sluice API error (is --url a Sluice server?)", describeBody(resp.Header.Get("Content-Type"), raw))
		}
		if resp.StatusCode == http.StatusUnauthorized {
			return resp.Header, &errRefused{credential: c.credential, api: ae}
		}
		return resp.Header, ae
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.Header, fmt.Errorf("%s %s: the answer is not what Sluice sends (%v): is --url a Sluice server?", method, path, err)
		}
	}
	return resp.Header, nil
}

func describeBody(ct string, raw []byte) string {
	if len(raw) == 0 {
		return "an empty answer"
	}
	if ct == "" {
		ct = "an answer"
	}
	return ct
}

// get reads path into v, or, with raw set, copies the answer's JSON to w
// as it came and reports that it did (the verbs' --json).
func (c *client) get(ctx context.Context, path string, raw bool, w io.Writer, v any) (printed bool, err error) {
	var body json.RawMessage
	if _, err := c.do(ctx, "GET", path, nil, &body); err != nil {
		return false, err
	}
	if raw {
		fmt.Fprintf(w, "%s\n", body)
		return true, nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return false, fmt.Errorf("GET %s: the answer is not what Sluice sends: %v", path, err)
	}
	return false, nil
}
