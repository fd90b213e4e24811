package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamLimits bound the state and counter streams. Both streams discard
// new messages at a bound (jetstream.DiscardNew): a server whose flush is
// refused keeps its pending bucket states and counters, merged per bucket
// and per counter cell, and retries at every flush until the worker has
// drained the stream. Nothing a server saw acknowledged is dropped to make
// room. MaxAge is the exception: a message older than MaxAge expires
// whether or not the worker applied it, so it is only a backstop for a
// worker that stays down for days. Config writes never travel on these
// streams (they are request/reply to the worker), so no bound affects them.
type StreamLimits struct {
	// MaxBytes is the most bytes each stream holds; 0 means
	// DefaultStreamMaxBytes, a negative value no limit.
	MaxBytes int64
	// MaxAge is how long an unapplied message is kept; 0 means
	// DefaultStreamMaxAge, a negative value no limit.
	MaxAge time.Duration
	// Replicas is how many NATS servers keep each stream (0: one).
	Replicas int
}

// Defaults of StreamLimits: a gibibyte is minutes of a flood of new
// callers (a bucket state is about 100 bytes on the stream), and a week
// outlasts any worker outage that someone is not already fixing.
const (
	DefaultStreamMaxBytes = 1 << 30
	DefaultStreamMaxAge   = 7 * 24 * time.Hour
)

// resolved returns the limits as JetStream takes them (-1: no limit).
func (l StreamLimits) resolved() (maxBytes int64, maxAge time.Duration) {
	maxBytes, maxAge = l.MaxBytes, l.MaxAge
	switch {
	case maxBytes == 0:
		maxBytes = DefaultStreamMaxBytes
	case maxBytes < 0:
		maxBytes = -1
	}
	switch {
	case maxAge == 0:
		maxAge = DefaultStreamMaxAge
	case maxAge < 0:
		maxAge = 0 // JetStream: no age limit
	}
	return maxBytes, maxAge
}

// Resolved reports the limits in effect, with 0 for "no limit".
func (l StreamLimits) Resolved() (maxBytes int64, maxAge time.Duration) {
	maxBytes, maxAge = l.resolved()
	return max(maxBytes, 0), maxAge
}

// EnsureStreamsWith returns an ensure function for WaitStreams that creates
// or updates both streams with limits.
func EnsureStreamsWith(limits StreamLimits) func(context.Context, jetstream.JetStream) error {
	return func(ctx context.Context, js jetstream.JetStream) error {
		for _, sc := range streamConfigs(limits) {
			if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
				return fmt.Errorf("ensure stream %s: %w", sc.Name, err)
			}
		}
		return nil
	}
}

// RestoreStreamsWith is RestoreStreams making missing streams with limits.
func RestoreStreamsWith(ctx context.Context, js jetstream.JetStream, limits StreamLimits) error {
	_, err := RestoreStreamsMade(ctx, js, limits)
	return err
}

// RestoreStreamsMade is RestoreStreamsWith, and names the streams it made
// (none when every stream was there: NATS was slow, not lost).
func RestoreStreamsMade(ctx context.Context, js jetstream.JetStream, limits StreamLimits) ([]string, error) {
	var made []string
	for _, sc := range streamConfigs(limits) {
		// CreateStream also succeeds for a stream that exists with the
		// same configuration: ask first.
		_, err := js.Stream(ctx, sc.Name)
		if err == nil {
			continue
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return made, fmt.Errorf("restore stream %s: %w", sc.Name, err)
		}
		_, err = js.CreateStream(ctx, sc)
		switch {
		case err == nil:
			made = append(made, sc.Name)
		case !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
			return made, fmt.Errorf("restore stream %s: %w", sc.Name, err)
		}
	}
	return made, nil
}
