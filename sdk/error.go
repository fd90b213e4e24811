package sdk

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Error codes of the API's error envelope.
const (
	CodeInvalidRequest   = "invalid_request"
	CodeUnauthenticated  = "unauthenticated"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodePayloadTooLarge  = "payload_too_large"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeRateLimited      = "rate_limited"
	CodeUnavailable      = "unavailable"
)

// Error is a non-2xx answer from Sluice: the HTTP status and the
// {"error": {"code", "message"}} envelope. When the body is not an envelope
// (say, a proxy's HTML page), Code is derived from Status and Message is the
// status text.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is the answer's Retry-After, when it has one: on a
	// rate_limited answer (Sluice's own limits, such as a tenant's settles
	// a second), when the same request may be sent again.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return "sluice: " + strconv.Itoa(e.Status) + " " + e.Code + ": " + e.Message
}

// retryAfter reads a Retry-After of whole seconds, or 0.
func retryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// errorFromResponse builds an *Error from a non-2xx answer.
func errorFromResponse(status int, body []byte) *Error {
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e := &Error{Status: status}
	if json.Unmarshal(body, &env) == nil && env.Error.Code != "" {
		e.Code, e.Message = env.Error.Code, env.Error.Message
		return e
	}
	e.Code = codeForStatus(status)
	e.Message = http.StatusText(status)
	return e
}

func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalidRequest
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusConflict:
		return CodeConflict
	case http.StatusRequestEntityTooLarge:
		return CodePayloadTooLarge
	case http.StatusUnsupportedMediaType:
		return CodeUnsupportedMedia
	case http.StatusTooManyRequests:
		return CodeRateLimited
	}
	if status >= 500 {
		return CodeUnavailable
	}
	return CodeInvalidRequest
}
