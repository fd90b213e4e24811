package tenants_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// sessionVersion is what servers hold for a user, read from a snapshot.
func sessionVersion(t *testing.T, s *tenants.Store, id string) (int64, bool) {
	t.Helper()
	for _, u := range must[tenants.Snapshot](t)(s.Snapshot(context.Background())).Users {
		if u.ID == id {
			return u.Version, true
		}
	}
	return 0, false
}

func TestPasswordAndEmailChangesEndSessions(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustTenant(t, s, "a")
	owner := must[tenants.User](t)(s.Users().ByEmail(ctx, "a@example.com"))
	if v, ok := sessionVersion(t, s, owner.ID); !ok || v != 1 || owner.SessionVersion != 1 {
		t.Fatalf("new owner's session version: %d %v (%d)", v, ok, owner.SessionVersion)
	}

	_, _, err := s.Users().ChangePassword(ctx, owner.ID, "wrong password here", "a new long password", time.Now())
	wantCode(t, err, errs.Invalid)
	if errs.Message(err) != "current_password: is not your current password" {
		t.Errorf("wrong current password: %q", errs.Message(err))
	}
	_, _, err = s.Users().ChangePassword(ctx, owner.ID, "correct horse battery", "short", time.Now())
	wantCode(t, err, errs.Invalid)
	_, _, err = s.Users().ChangePassword(ctx, "usr_missing", "correct horse battery", "a new long password", time.Now())
	wantCode(t, err, errs.NotFound)

	v := version(t, s)
	u, changes, err := s.Users().ChangePassword(ctx, owner.ID, "correct horse battery", "a new long password", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeUserSession)
	if u.SessionVersion != 2 || changes[0].UserSession.Version != 2 || changes[0].UserSession.ID != owner.ID {
		t.Fatalf("after a password change: user %d, change %+v", u.SessionVersion, changes[0].UserSession)
	}
	if _, err := s.Users().Authenticate(ctx, "a@example.com", "correct horse battery"); !errs.Is(err, errs.Unauthenticated) {
		t.Fatalf("old password still accepted: %v", err)
	}
	must[tenants.User](t)(s.Users().Authenticate(ctx, "a@example.com", "a new long password"))

	// Email: the password is required, a taken email is a conflict, the
	// same email is no change.
	mustTenant(t, s, "b")
	_, _, err = s.Users().ChangeEmail(ctx, owner.ID, "a new long password", "b@example.com", time.Now())
	wantCode(t, err, errs.Conflict)
	_, _, err = s.Users().ChangeEmail(ctx, owner.ID, "correct horse battery", "new@example.com", time.Now())
	wantCode(t, err, errs.Invalid)
	v = version(t, s)
	if _, changes, err := s.Users().ChangeEmail(ctx, owner.ID, "a new long password", "A@example.com", time.Now()); err != nil || len(changes) != 0 {
		t.Fatalf("same email: %v, %d changes", err, len(changes))
	}
	u, changes, err = s.Users().ChangeEmail(ctx, owner.ID, "a new long password", "New@Example.com", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeUserSession)
	if u.Email != "new@example.com" || u.SessionVersion != 3 {
		t.Fatalf("after an email change: %+v", u)
	}
	if got, _ := sessionVersion(t, s, owner.ID); got != 3 {
		t.Fatalf("snapshot session version %d, want 3", got)
	}
}

func TestMembersRolesAndRemoval(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	owner := must[tenants.User](t)(s.Users().ByEmail(ctx, "a@example.com"))
	m := must[tenants.User](t)(s.Users().Create(ctx, a.ID, "m@example.com", "member password 1", tenants.RoleMember, t0))
	if _, ok := sessionVersion(t, s, m.ID); !ok {
		t.Fatal("a created user is in the snapshot")
	}
	v := version(t, s)
	changes := must[[]tenants.Change](t)(s.Users().Announce(ctx, m.ID))
	checkChanges(t, s, v, changes, tenants.ChangeUserSession)

	// Another tenant's member is not found, whatever the operation.
	_, _, err := s.Users().SetRole(ctx, b.ID, m.ID, tenants.RoleOwner, time.Now())
	wantCode(t, err, errs.NotFound)
	_, _, err = s.Users().Delete(ctx, b.ID, m.ID, time.Now())
	wantCode(t, err, errs.NotFound)
	_, _, err = s.Users().SetRole(ctx, a.ID, m.ID, tenants.RoleOperator, time.Now())
	wantCode(t, err, errs.Invalid)

	// The only owner stays an owner and stays.
	_, _, err = s.Users().SetRole(ctx, a.ID, owner.ID, tenants.RoleMember, time.Now())
	wantCode(t, err, errs.Conflict)
	_, _, err = s.Users().Delete(ctx, a.ID, owner.ID, time.Now())
	wantCode(t, err, errs.Conflict)

	v = version(t, s)
	if _, changes, err := s.Users().SetRole(ctx, a.ID, m.ID, tenants.RoleMember, time.Now()); err != nil || len(changes) != 0 {
		t.Fatalf("same role: %v, %d changes", err, len(changes))
	}
	u, changes, err := s.Users().SetRole(ctx, a.ID, m.ID, tenants.RoleOwner, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeUserSession)
	if u.Role != tenants.RoleOwner || u.SessionVersion != 2 {
		t.Fatalf("promoted: %+v", u)
	}
	// With two owners, the first may step down or leave.
	must[tenants.User](t)(first(s.Users().SetRole(ctx, a.ID, owner.ID, tenants.RoleMember, time.Now())))
	v = version(t, s)
	_, changes, err = s.Users().Delete(ctx, a.ID, owner.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeUserDeleted)
	if changes[0].ID != owner.ID || changes[0].TenantID != a.ID {
		t.Fatalf("deletion change %+v", changes[0])
	}
	if _, ok := sessionVersion(t, s, owner.ID); ok {
		t.Fatal("a removed user is still in the snapshot")
	}
	if users := must[[]tenants.User](t)(s.Users().List(ctx, a.ID)); len(users) != 1 || users[0].ID != m.ID {
		t.Fatalf("members after removal: %+v", users)
	}
}

func TestSignInAndKeyUseTimes(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTenant(t, s, "a")
	owner := must[tenants.User](t)(s.Users().ByEmail(ctx, "a@example.com"))
	if owner.LastLoginAt != nil {
		t.Fatal("a new user has a last sign-in")
	}
	v := version(t, s)
	if err := s.Users().RecordSignIn(ctx, owner.ID, t0); err != nil {
		t.Fatal(err)
	}
	users := must[[]tenants.User](t)(s.Users().List(ctx, a.ID))
	if users[0].LastLoginAt == nil || !users[0].LastLoginAt.Equal(t0.Truncate(time.Millisecond)) {
		t.Fatalf("last sign-in %v", users[0].LastLoginAt)
	}

	key := must[[]tenants.ServiceKey](t)(s.ServiceKeys().List(ctx, a.ID))[0]
	if key.LastUsedAt != nil {
		t.Fatal("a new key was used")
	}
	later, earlier := t0.Truncate(time.Minute), t0.Truncate(time.Minute).Add(-time.Minute)
	// Reports arrive from several servers in any order; the latest wins.
	if err := s.ServiceKeys().RecordUse(ctx, []tenants.KeyUse{{ID: key.ID, At: later}, {ID: "skey_unknown", At: later}}); err != nil {
		t.Fatal(err)
	}
	if err := s.ServiceKeys().RecordUse(ctx, []tenants.KeyUse{{ID: key.ID, At: earlier}}); err != nil {
		t.Fatal(err)
	}
	key = must[[]tenants.ServiceKey](t)(s.ServiceKeys().List(ctx, a.ID))[0]
	if key.LastUsedAt == nil || !key.LastUsedAt.Equal(later) {
		t.Fatalf("last used %v, want %v", key.LastUsedAt, later)
	}
	if version(t, s) != v {
		t.Fatal("sign-in and key use times moved the config version")
	}
}
