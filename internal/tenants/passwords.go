package tenants

// Password work. An argon2id hash or check costs 19 MiB and about 25 ms of
// a core, on purpose. Every one the store does (sign-in, invites, changes
// of password or email, new tenants, the operator login) goes through the
// store's passwordGate: at most PasswordSlots run at once (half the cores,
// at least one) and at most PasswordQueue more wait; beyond that a request
// is refused at once with errs.Unavailable. So a flood of such requests
// costs at most PasswordSlots × 19 MiB and half the machine, and never
// delays a config write: no lock is held while hashing (hash first, then
// take the writer; or check, then write only if the hash checked is still
// the stored one), and what cannot succeed (unknown user, taken email,
// invalid field) is refused before any hashing.

import (
	"context"
	"runtime"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/errs"
)

// PasswordSlots is how many password hashes or checks run at once, and
// PasswordQueue how many may wait for a slot, by default.
var (
	PasswordSlots = max(1, runtime.GOMAXPROCS(0)/2)
	PasswordQueue = 32 * PasswordSlots
)

// errPasswordBusy is the answer when the queue is full.
var errPasswordBusy = errs.Errorf(errs.Unavailable, "Sluice is busy checking passwords. Try again in a moment.")

// passwordGate bounds concurrent password work. Its zero value is not
// usable; make one with newPasswordGate. It is safe for concurrent use.
type passwordGate struct {
	slots    chan struct{}
	waiting  atomic.Int64
	maxWait  int64
	inFlight atomic.Int64 // running or waiting, for tests and metrics
}

func newPasswordGate(slots, queue int) *passwordGate {
	return &passwordGate{slots: make(chan struct{}, max(slots, 1)), maxWait: int64(max(queue, 0))}
}

// do runs fn in a slot, waiting for one unless the queue is full or ctx ends.
func (g *passwordGate) do(ctx context.Context, fn func()) error {
	g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	select {
	case g.slots <- struct{}{}:
	default:
		if g.waiting.Add(1) > g.maxWait {
			g.waiting.Add(-1)
			return errPasswordBusy
		}
		select {
		case g.slots <- struct{}{}:
			g.waiting.Add(-1)
		case <-ctx.Done():
			g.waiting.Add(-1)
			return ctx.Err()
		}
	}
	defer func() { <-g.slots }()
	fn()
	return nil
}

// hashPassword is HashPassword through the gate.
func (s *core) hashPassword(ctx context.Context, pw string) (string, error) {
	var h string
	var herr error
	if err := s.passwords.do(ctx, func() { h, herr = HashPassword(pw) }); err != nil {
		return "", err
	}
	return h, herr
}

// checkPassword is CheckPassword through the gate. A password longer than
// any that can be set is wrong without hashing it.
func (s *core) checkPassword(ctx context.Context, hash, pw string) (bool, error) {
	if len(pw) > maxPasswordBytes {
		return false, nil
	}
	var ok bool
	if err := s.passwords.do(ctx, func() { ok = CheckPassword(hash, pw) }); err != nil {
		return false, err
	}
	return ok, nil
}

// SetPasswordWork replaces the bounds of concurrent password work (slots
// running, queue waiting). Call it before the store is used.
func (s *Store) SetPasswordWork(slots, queue int) { s.passwords = newPasswordGate(slots, queue) }

// PasswordWorkInFlight is how many password hashes or checks are running
// or waiting now.
func (s *Store) PasswordWorkInFlight() int64 { return s.passwords.inFlight.Load() }
