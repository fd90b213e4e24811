package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/tenants"
)

// set and without leave the map they are called on as it was.
func TestCowWritesCopy(t *testing.T) {
	m := newCow[string, int](stringShard)
	for i := range 1000 {
		m.put(fmt.Sprint(i), i)
	}
	n := m.set("1", -1).set("new", 7).without("2")
	if v, _ := m.get("1"); v != 1 {
		t.Fatalf("old map's 1 = %d", v)
	}
	if _, ok := m.get("new"); ok || m.len() != 1000 {
		t.Fatal("the old map sees the new entry")
	}
	if _, ok := m.get("2"); !ok {
		t.Fatal("the old map lost 2")
	}
	if v, _ := n.get("1"); v != -1 || n.len() != 1000 {
		t.Fatalf("new map: 1 = %d, len %d", v, n.len())
	}
	if _, ok := n.get("2"); ok {
		t.Fatal("the new map still has 2")
	}
	if n.without("absent").len() != n.len() {
		t.Fatal("removing an absent key changed the length")
	}
	h := hashKeyHex("sk_test")
	if bytesShard(h[:]) != stringShard(string(h[:])) {
		t.Fatal("bytesShard and stringShard disagree")
	}
}

// dump is a view as text: everything a decision reads, in a fixed order.
func dump(v *view) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version %d operator %q\n", v.version, v.operatorHash)
	var ts []string
	v.tenants.all(func(id string, _ *tenantView) bool { ts = append(ts, id); return true })
	slices.Sort(ts)
	for _, id := range ts {
		tv := v.tenant(id)
		fmt.Fprintf(&b, "tenant %s %s suspended=%v\n", id, tv.tenant.Name, tv.tenant.Suspended())
		for i, pv := range tv.policies {
			fmt.Fprintf(&b, "  policy %d %s %s router=%v\n", i, pv.id, pv.name, tv.byName[pv.name] == pv && tv.byID[pv.id] == pv)
		}
		fmt.Fprintf(&b, "  lookups %d %d\n", len(tv.byName), len(tv.byID))
		var refs []string
		for ref, bs := range tv.blocks {
			ids := []string{}
			for _, bl := range bs {
				ids = append(ids, bl.ID)
			}
			slices.Sort(ids)
			refs = append(refs, fmt.Sprintf("  block %s:%s %v", ref.kind, ref.id, ids))
		}
		slices.Sort(refs)
		b.WriteString(strings.Join(refs, "\n") + "\n")
		var keys []string
		tv.keys.byID.all(func(kid string, kv *keyView) bool {
			byHash, _ := tv.keys.byHash.get(kv.hash)
			keys = append(keys, fmt.Sprintf("  key %s %s revoked=%v hash=%v", kid, kv.tier, kv.revoked, byHash == kv))
			return true
		})
		slices.Sort(keys)
		b.WriteString(strings.Join(keys, "\n") + "\n")
	}
	var rest []string
	v.users.all(func(id string, ver int64) bool { rest = append(rest, fmt.Sprintf("user %s %d", id, ver)); return true })
	v.svcHash.all(func(h string, e svcEntry) bool {
		rest = append(rest, fmt.Sprintf("svc %s %s %s", h, e.id, e.tenantID))
		return true
	})
	slices.Sort(rest)
	b.WriteString(strings.Join(rest, "\n"))
	return b.String()
}

// Applying changes one by one gives the view a snapshot with the same
// changes applied gives, for random sequences of every kind of change.
func TestApplyMatchesSnapshot(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(n int) int { return r.IntN(n) }
	for seq := range 40 {
		snap := tenants.Snapshot{Version: 1, Tenants: []tenants.Tenant{{ID: "ten_0", Name: "zero"}}}
		v, err := viewFromSnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		for step := range 60 {
			ver := snap.Version + 1
			tid := fmt.Sprint("ten_", pick(3))
			at := t0.Add(time.Duration(pick(5)) * time.Second)
			var c tenants.Change
			switch pick(11) {
			case 0:
				tn := tenants.Tenant{ID: tid, Name: fmt.Sprint("t", step)}
				if pick(2) == 0 {
					tn.SuspendedAt = &at
				}
				c = tenants.Change{Kind: tenants.ChangeTenant, TenantID: tid, Tenant: &tn}
			case 1, 2:
				n := pick(6)
				p := tenants.Policy{ID: fmt.Sprintf("pol_%s_%d", tid, n), TenantID: tid, Name: fmt.Sprint("p", n, "_", pick(2)), Method: "GET",
					Path: fmt.Sprintf("/a/%d", pick(3)), Consistency: "exact", CreatedAt: at,
					Tiers: map[string]tenants.Limits{"default": limit("token_bucket", int64(1+pick(9)), "60s")}}
				c = tenants.Change{Kind: tenants.ChangePolicy, TenantID: tid, Policy: &p}
			case 3:
				c = tenants.Change{Kind: tenants.ChangePolicyDeleted, TenantID: tid, ID: fmt.Sprintf("pol_%s_%d", tid, pick(6))}
			case 4:
				n := pick(5)
				bl := tenants.Block{ID: fmt.Sprintf("blk_%s_%d", tid, n), TenantID: tid, Identity: tenants.Identity{Kind: "ip", ID: fmt.Sprint("192.0.2.", pick(3))}, CreatedAt: at}
				c = tenants.Change{Kind: tenants.ChangeBlock, TenantID: tid, Block: &bl}
			case 5:
				c = tenants.Change{Kind: tenants.ChangeBlockDeleted, TenantID: tid, ID: fmt.Sprintf("blk_%s_%d", tid, pick(5))}
			case 6:
				n := pick(8)
				k := tenants.ConsumerKeyRecord{ConsumerKey: tenants.ConsumerKey{ID: fmt.Sprintf("ckey_%s_%d", tid, n), TenantID: tid,
					Tier: fmt.Sprint("tier", pick(3)), Hash: tenants.HashKey(fmt.Sprintf("ck_%s_%d", tid, n))}}
				if pick(3) == 0 {
					k.RevokedAt = &at
				}
				c = tenants.Change{Kind: tenants.ChangeConsumerKey, TenantID: tid, ConsumerKey: &k}
			case 7:
				n := pick(4)
				k := tenants.ServiceKeyRecord{ServiceKey: tenants.ServiceKey{ID: fmt.Sprintf("skey_%s_%d", tid, n), TenantID: tid,
					Hash: tenants.HashKey(fmt.Sprintf("sk_%s_%d", tid, n))}}
				if pick(2) == 0 {
					k.RevokedAt = &at
				}
				c = tenants.Change{Kind: tenants.ChangeServiceKey, TenantID: tid, ServiceKey: &k}
			case 8:
				c = tenants.Change{Kind: tenants.ChangeUserSession, TenantID: tid, UserSession: &tenants.UserSession{ID: fmt.Sprint("usr_", pick(4)), TenantID: tid, Version: int64(step)}}
			case 9:
				c = tenants.Change{Kind: tenants.ChangeUserDeleted, TenantID: tid, ID: fmt.Sprint("usr_", pick(4))}
			case 10:
				if pick(4) != 0 {
					continue
				}
				c = tenants.Change{Kind: tenants.ChangeTenantDeleted, TenantID: tid}
			}
			if c.Kind != tenants.ChangeTenant && c.Kind != tenants.ChangeUserSession && c.Kind != tenants.ChangeUserDeleted &&
				c.Kind != tenants.ChangeTenantDeleted && v.tenant(tid) == nil {
				// Objects come after their tenant, as the worker writes them.
				continue
			}
			cs := []tenants.Change{c}
			if c.Kind == tenants.ChangeTenantDeleted {
				// The worker announces a deleted tenant's users with it.
				cs = nil
				for _, u := range snap.Users {
					if u.TenantID == tid {
						cs = append(cs, tenants.Change{Kind: tenants.ChangeUserDeleted, TenantID: tid, ID: u.ID})
					}
				}
				cs = append(cs, c)
			}
			for _, c := range cs {
				c.Version = ver
				if err := snap.Apply(c); err != nil {
					t.Fatal(err)
				}
				if v, err = v.apply(c); err != nil {
					t.Fatal(err)
				}
			}
			fresh, err := viewFromSnapshot(snap)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := dump(v), dump(fresh); got != want {
				t.Fatalf("sequence %d step %d (%s): applied\n%s\nsnapshot\n%s", seq, step, c.Kind, got, want)
			}
		}
	}
}
