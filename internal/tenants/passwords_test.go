package tenants_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// At most PasswordSlots hashes or checks run and PasswordQueue wait; one
// more is refused at once, and the waiting ones run once a slot frees.
func TestPasswordWorkIsBounded(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustTenant(t, s, "a")
	s.SetPasswordWork(1, 2)
	release := tenants.HoldPasswordSlots(s)
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := s.Users().Authenticate(ctx, "a@example.com", "correct horse battery")
			done <- err
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.PasswordWorkInFlight() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("in flight: %d, want 2 waiting", s.PasswordWorkInFlight())
		}
		time.Sleep(time.Millisecond)
	}
	_, err := s.Users().Authenticate(ctx, "a@example.com", "correct horse battery")
	wantCode(t, err, errs.Unavailable)
	if !strings.Contains(errs.Message(err), "busy") {
		t.Errorf("refusal: %q", errs.Message(err))
	}
	// A caller that gives up stops waiting.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	release()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("a waiting sign-in: %v", err)
		}
	}
	release = tenants.HoldPasswordSlots(s)
	defer release()
	if _, err := s.Users().Authenticate(cctx, "a@example.com", "correct horse battery"); err == nil {
		t.Fatal("a cancelled sign-in went on waiting and succeeded")
	}
}

// What cannot succeed is refused before any password work: with every
// slot taken and no queue, these calls answer their own error, not
// "busy", while one that can succeed answers "busy".
func TestNothingHashedForWhatCannotSucceed(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTenant(t, s, "a")
	owner := must[tenants.User](t)(s.Users().ByEmail(ctx, "a@example.com"))
	s.SetPasswordWork(1, 0)
	defer tenants.HoldPasswordSlots(s)()
	now := time.Now()
	long := strings.Repeat("x", 2000)

	for _, c := range []struct {
		name string
		call func() error
		want string
	}{
		{"invite to a tenant that does not exist", func() error {
			_, err := s.Users().Create(ctx, "ten_missing", "new@example.com", "a long password", tenants.RoleMember, now)
			return err
		}, errs.NotFound},
		{"invite of a taken email", func() error {
			_, err := s.Users().Create(ctx, a.ID, "A@example.com", "a long password", tenants.RoleMember, now)
			return err
		}, errs.Conflict},
		{"invite with a bad role", func() error {
			_, err := s.Users().Create(ctx, a.ID, "new@example.com", "a long password", "admin", now)
			return err
		}, errs.Invalid},
		{"invite with a short password", func() error {
			_, err := s.Users().Create(ctx, a.ID, "new@example.com", "short", tenants.RoleMember, now)
			return err
		}, errs.Invalid},
		{"tenant with a taken name", func() error {
			_, _, _, err := s.Tenants().Create(ctx, "a", "b@example.com", "a long password", now)
			return err
		}, errs.Conflict},
		{"tenant with a taken owner email", func() error {
			_, _, _, err := s.Tenants().Create(ctx, "b", "a@example.com", "a long password", now)
			return err
		}, errs.Conflict},
		{"password change of an unknown user", func() error {
			_, _, err := s.Users().ChangePassword(ctx, "usr_missing", "correct horse battery", "a new long password", now)
			return err
		}, errs.NotFound},
		{"password change to a short password", func() error {
			_, _, err := s.Users().ChangePassword(ctx, owner.ID, "correct horse battery", "short", now)
			return err
		}, errs.Invalid},
		{"password change with an overlong current password", func() error {
			_, _, err := s.Users().ChangePassword(ctx, owner.ID, long, "a new long password", now)
			return err
		}, errs.Invalid},
		{"email change of an unknown user", func() error {
			_, _, err := s.Users().ChangeEmail(ctx, "usr_missing", "correct horse battery", "new@example.com", now)
			return err
		}, errs.NotFound},
		{"email change to an invalid email", func() error {
			_, _, err := s.Users().ChangeEmail(ctx, owner.ID, "correct horse battery", "not an email", now)
			return err
		}, errs.Invalid},
		{"sign-in with an overlong password", func() error {
			_, err := s.Users().Authenticate(ctx, "a@example.com", long)
			return err
		}, errs.Unauthenticated},
		// Controls: these need password work, and find no slot.
		{"a valid invite", func() error {
			_, err := s.Users().Create(ctx, a.ID, "new@example.com", "a long password", tenants.RoleMember, now)
			return err
		}, errs.Unavailable},
		{"a sign-in of an unknown email", func() error {
			_, err := s.Users().Authenticate(ctx, "nobody@example.com", "a long password")
			return err
		}, errs.Unavailable},
	} {
		if err := c.call(); !errs.Is(err, c.want) {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
}

// A change prepared (password checked, new one hashed) is written only if
// the password checked is still the stored one.
func TestPreparedChangesNeedTheCheckedPassword(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustTenant(t, s, "a")
	owner := must[tenants.User](t)(s.Users().ByEmail(ctx, "a@example.com"))
	now := time.Now()
	pw := must[tenants.PasswordChange](t)(s.Users().PreparePasswordChange(ctx, owner.ID, "correct horse battery", "first new password"))
	em := must[tenants.EmailChange](t)(s.Users().PrepareEmailChange(ctx, owner.ID, "correct horse battery", "new@example.com"))
	if _, _, err := s.Users().ChangePassword(ctx, owner.ID, "correct horse battery", "second new password", now); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.Users().CommitPasswordChange(ctx, pw, now)
	wantCode(t, err, errs.Invalid)
	_, _, err = s.Users().CommitEmailChange(ctx, em, now)
	wantCode(t, err, errs.Invalid)
	if _, err := s.Users().Authenticate(ctx, "a@example.com", "second new password"); err != nil {
		t.Fatalf("the later change did not stay: %v", err)
	}
}
