package tenants_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

func TestHashesStayOutOfAPIJSON(t *testing.T) {
	ck := tenants.ConsumerKey{ID: "ckey_1", Hash: "secret-hash", Prefix: "ck_AbC12"}
	sk := tenants.ServiceKey{ID: "skey_1", Hash: "secret-hash"}
	u := tenants.User{ID: "usr_1", PasswordHash: "secret-hash"}
	for _, v := range []any{ck, sk, u} {
		b, _ := json.Marshal(v)
		if strings.Contains(string(b), "secret-hash") || strings.Contains(string(b), `"hash"`) {
			t.Errorf("%T marshals its hash: %s", v, b)
		}
	}
	// The records servers receive do carry it, and read it back.
	exp := t0.Truncate(time.Millisecond)
	ck.ExpiresAt = &exp
	ck.Overrides = map[string]tenants.Limits{"heavy": {tb(5, "1s")}}
	rec := roundTrip(t, tenants.ConsumerKeyRecord{ConsumerKey: ck})
	if !reflect.DeepEqual(rec.ConsumerKey, ck) {
		t.Fatalf("consumer key record round trip: %+v", rec)
	}
	srec := roundTrip(t, tenants.ServiceKeyRecord{ServiceKey: sk})
	if !reflect.DeepEqual(srec.ServiceKey, sk) {
		t.Fatalf("service key record round trip: %+v", srec)
	}
}

func TestChangeJSON(t *testing.T) {
	p := samplePolicy("heavy")
	p.ID, p.TenantID = "pol_1", "ten_1"
	for _, c := range []tenants.Change{
		{Version: 3, Kind: tenants.ChangePolicy, TenantID: "ten_1", Policy: &p},
		{Version: 4, Kind: tenants.ChangePolicyDeleted, TenantID: "ten_1", ID: "pol_1"},
		{Version: 5, Kind: tenants.ChangeConsumerKey, TenantID: "ten_1", ConsumerKey: &tenants.ConsumerKeyRecord{ConsumerKey: tenants.ConsumerKey{ID: "ckey_1", Hash: "h"}}},
		{Version: 6, Kind: tenants.ChangeOperatorToken, OperatorTokenHash: "h"},
		{Version: 7, Kind: tenants.ChangeBucketReset, TenantID: "ten_1", BucketReset: &tenants.BucketReset{PolicyID: "pol_1", Policy: "heavy", Identity: tenants.Identity{Kind: "ip", ID: "192.0.2.1"}}},
	} {
		if got := roundTrip(t, c); !reflect.DeepEqual(got, c) {
			t.Errorf("change round trip\n got %+v\nwant %+v", got, c)
		}
	}
}

func TestSnapshotApply(t *testing.T) {
	pol := func(id, name string) *tenants.Policy { return &tenants.Policy{ID: id, TenantID: "ten_1", Name: name} }
	s := tenants.Snapshot{Version: 10}
	steps := []struct {
		change  tenants.Change
		want    []string // policy names after the step
		version int64
		err     error
	}{
		{tenants.Change{Version: 11, Kind: tenants.ChangePolicy, Policy: pol("pol_b", "b")}, []string{"b"}, 11, nil},
		{tenants.Change{Version: 12, Kind: tenants.ChangePolicy, Policy: pol("pol_a", "a")}, []string{"a", "b"}, 12, nil},
		// A second change of the same write.
		{tenants.Change{Version: 12, Kind: tenants.ChangePolicy, Policy: pol("pol_c", "c")}, []string{"a", "b", "c"}, 12, nil},
		// Redelivered: same result.
		{tenants.Change{Version: 12, Kind: tenants.ChangePolicy, Policy: pol("pol_a", "a")}, []string{"a", "b", "c"}, 12, nil},
		{tenants.Change{Version: 13, Kind: tenants.ChangePolicy, Policy: pol("pol_b", "b2")}, []string{"a", "b2", "c"}, 13, nil},
		// Older than the snapshot: skipped.
		{tenants.Change{Version: 11, Kind: tenants.ChangePolicyDeleted, ID: "pol_a"}, []string{"a", "b2", "c"}, 13, nil},
		{tenants.Change{Version: 14, Kind: tenants.ChangePolicyDeleted, ID: "pol_a"}, []string{"b2", "c"}, 14, nil},
		{tenants.Change{Version: 14, Kind: tenants.ChangePolicyDeleted, ID: "pol_a"}, []string{"b2", "c"}, 14, nil},
		// A gap: refused, nothing applied.
		{tenants.Change{Version: 16, Kind: tenants.ChangePolicyDeleted, ID: "pol_c"}, []string{"b2", "c"}, 14, tenants.ErrVersionGap},
	}
	for i, st := range steps {
		err := s.Apply(st.change)
		if !errors.Is(err, st.err) {
			t.Fatalf("step %d: err = %v, want %v", i, err, st.err)
		}
		var names []string
		for _, p := range s.Policies {
			names = append(names, p.Name)
		}
		if !reflect.DeepEqual(names, st.want) || s.Version != st.version {
			t.Fatalf("step %d: policies %v at %d, want %v at %d", i, names, s.Version, st.want, st.version)
		}
	}
	if err := s.Apply(tenants.Change{Version: 15, Kind: "surprise"}); err == nil {
		t.Fatal("unknown kind applied")
	}
	if err := s.Apply(tenants.Change{Version: 15, Kind: tenants.ChangeBlock}); err == nil {
		t.Fatal("change without payload applied")
	}
}

func TestKeyPatchJSON(t *testing.T) {
	exp := t0.Truncate(time.Millisecond)
	name, tier := "n", "pro"
	ov := map[string]tenants.Limits{"heavy": {tb(1, "1s")}}
	var nilMap map[string]tenants.Limits
	tests := []struct {
		in   string
		want tenants.KeyPatch
		msg  string // errs.Invalid message if rejected
	}{
		{in: `{}`, want: tenants.KeyPatch{}},
		{in: `{"name": "n", "tier": "pro"}`, want: tenants.KeyPatch{Name: &name, Tier: &tier}},
		{in: `{"expires_at": "` + exp.Format(time.RFC3339Nano) + `"}`, want: tenants.KeyPatch{ExpiresAt: &exp}},
		{in: `{"expires_at": null}`, want: tenants.KeyPatch{ClearExpiry: true}},
		{in: `{"overrides": {"heavy": {"algorithm": "token_bucket", "limit": 1, "period": "1s"}}}`, want: tenants.KeyPatch{Overrides: &ov}},
		{in: `{"overrides": null}`, want: tenants.KeyPatch{Overrides: &nilMap}},
		{in: `{"tier": null}`, msg: "tier: must be a string"},
		{in: `{"name": 5}`, msg: "name: must be a string"},
		{in: `{"expires_at": "tomorrow"}`, msg: "expires_at: must be an RFC 3339 time or null"},
		{in: `{"overrides": []}`, msg: "overrides: must be an object of policy names to limits"},
		{in: `{"overrides": {"heavy": {"limit": 1, "burts": 2}}}`, msg: `limits: unknown field "burts"`},
		{in: `{"nmae": "x"}`, msg: `unknown field "nmae"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var got tenants.KeyPatch
			err := json.Unmarshal([]byte(tt.in), &got)
			if tt.msg != "" {
				if errs.Code(err) != errs.Invalid || errs.Message(err) != tt.msg {
					t.Fatalf("err = %v, want %s", err, tt.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if again := roundTrip(t, got); !reflect.DeepEqual(again, got) {
				t.Fatalf("round trip %+v", again)
			}
		})
	}
}
