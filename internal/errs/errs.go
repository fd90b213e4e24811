// Package errs defines Sluice's one application error type.
//
// Every layer returns *Error (or wraps one with %w) for failures a caller
// should see; the HTTP layer maps Code to a status with one table, and the
// NATS request/reply layer carries Code and Message across the wire, so an
// error raised in the worker reaches the API client unchanged. Anything that
// is not an *Error is internal: it is logged and answered with a generic
// message, never with its text.
package errs

import (
	"errors"
	"fmt"
	"time"
)

// Codes, as the public API names them.
const (
	Invalid          = "invalid_request"
	Unauthenticated  = "unauthenticated"
	Forbidden        = "forbidden"
	NotFound         = "not_found"
	Conflict         = "conflict"
	TooLarge         = "payload_too_large"
	UnsupportedMedia = "unsupported_media_type"
	RateLimited      = "rate_limited"
	Unavailable      = "unavailable"
	Internal         = "internal"
)

// Error is a failure with a code from the list above and a human sentence
// that is safe to show to the caller.
type Error struct {
	Code    string
	Message string
	// RetryAfter, on a RateLimited error, is how long until the same
	// request would be admitted (0: not known). It travels with the error
	// over NATS and becomes the answer's Retry-After.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf returns an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Limited returns a RateLimited *Error whose request may be retried after
// wait.
func Limited(wait time.Duration, format string, args ...any) *Error {
	return &Error{Code: RateLimited, Message: fmt.Sprintf(format, args...), RetryAfter: wait}
}

// RetryAfter returns the RetryAfter of the first *Error in err's chain,
// or 0.
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// Code returns the code of the first *Error in err's chain, or Internal.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// Message returns the message of the first *Error in err's chain, or a
// generic sentence for internal errors, whose text is never shown.
func Message(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "An internal error occurred."
}

// Is reports whether err carries the given code.
func Is(err error, code string) bool { return err != nil && Code(err) == code }
