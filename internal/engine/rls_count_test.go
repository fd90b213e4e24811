package engine

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/quota"
)

const countYAML = `domain: edge
descriptors:
  - key: model
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: strict
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: lenient
    rate_limit: {unit: minute, requests_per_unit: 10}
    sluice: {denied: uncounted}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
`

func rlsCall(t *testing.T, e *Engine, at time.Time, d RLSDescriptor) RLSStatus {
	t.Helper()
	a, err := e.ShouldRateLimit(context.Background(), "ten_a", &RLSRequest{Domain: "edge", Descriptors: []RLSDescriptor{d}}, at)
	if err != nil {
		t.Fatal(err)
	}
	if a.OverLimit != a.Statuses[0].OverLimit {
		t.Fatalf("overall %v, descriptor %+v", a.OverLimit, a.Statuses[0])
	}
	return a.Statuses[0]
}

// The token-quota pattern of the reference's example (look with
// hits_addend 0 on the request, charge the real usage when the response
// ends): responses bigger than the quota limit the client after the first,
// as with the reference (1 served of 10).
func TestShouldRateLimitTokenQuota(t *testing.T) {
	e := rlsEngineWith(t, countYAML)
	at := time.Unix(1_800_000_000-1_800_000_000%60+1, 0)
	served := 0
	for range 10 {
		look := desc("model", "gpt")
		look.Hits = 0
		if rlsCall(t, e, at, look).OverLimit {
			continue
		}
		served++
		charge := desc("model", "gpt")
		charge.Hits = 1500 // apply_on_stream_done: the usage has happened
		rlsCall(t, e, at, charge)
		at = at.Add(time.Second)
	}
	if served != 1 {
		t.Fatalf("served %d of 10 with 1500-token responses and a 1000-token quota, want 1", served)
	}
}

// By default a denied call counts (a later small call is over too); a
// rule with sluice.denied: uncounted counts only what it allows.
func TestShouldRateLimitDenied(t *testing.T) {
	e := rlsEngineWith(t, countYAML)
	at := time.Unix(1_800_000_000-1_800_000_000%60+1, 0)
	for _, c := range []struct {
		key       string
		overAfter bool
		remaining uint32
	}{{"strict", true, 0}, {"lenient", false, 9}} {
		big := desc(c.key, "x")
		big.Hits = 15
		if st := rlsCall(t, e, at, big); !st.OverLimit {
			t.Fatalf("%s: 15 of 10 allowed", c.key)
		}
		st := rlsCall(t, e, at, desc(c.key, "x"))
		if st.OverLimit != c.overAfter || st.Remaining != c.remaining {
			t.Fatalf("%s: a call after a denied 15: %+v, want over %v with %d left", c.key, st, c.overAfter, c.remaining)
		}
	}
}

// requests_per_unit: 0 is over for every call that takes hits; a look is
// OK with nothing left until a hit was counted, as in the reference.
func TestShouldRateLimitBanned(t *testing.T) {
	e := rlsEngineWith(t, countYAML)
	at := time.Unix(1_800_000_000-1_800_000_000%60+1, 0)
	look := desc("banned", "x")
	look.Hits = 0
	if st := rlsCall(t, e, at, look); st.OverLimit || st.Remaining != 0 || st.Limit == nil || st.Limit.RequestsPerUnit != 0 {
		t.Fatalf("look at a banned rule: %+v %+v", st, st.Limit)
	}
	for range 3 {
		if st := rlsCall(t, e, at, desc("banned", "x")); !st.OverLimit {
			t.Fatalf("a call on a banned rule: %+v", st)
		}
	}
	if st := rlsCall(t, e, at, look); !st.OverLimit {
		t.Fatalf("look after counted hits: %+v", st)
	}
}

// A call of more hits than the limit is over and still says when the
// window turns, as the reference does (Envoy's reset header).
func TestShouldRateLimitResetPastLimit(t *testing.T) {
	e := rlsEngineWith(t, countYAML)
	at := time.Unix(1_800_000_000-1_800_000_000%60+45, 0)
	for _, key := range []string{"strict", "lenient"} {
		d := desc(key, "fresh")
		d.Hits = math.MaxUint32
		st := rlsCall(t, e, at, d)
		if !st.OverLimit || st.ResetAfter != 15*time.Second {
			t.Fatalf("%s: %d hits: %+v, want over resetting in 15s", key, d.Hits, st)
		}
	}
}

// Oversized input is decided, with bounded memory: values far past 1 KiB
// are matched and counted, each bucket's key standing for its counter by
// a hash, and distinct values keep distinct counters.
func TestShouldRateLimitLongValues(t *testing.T) {
	e := rlsEngineWith(t, countYAML+`  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	at := time.Unix(1_800_000_000-1_800_000_000%60+1, 0)
	const n, size = 200, 64 << 10
	for i := range n {
		v := strings.Repeat("x", size) + strconv.Itoa(i)
		if st := rlsCall(t, e, at, desc("user", v)); st.OverLimit || st.Limit == nil {
			t.Fatalf("value %d: %+v, want OK under the user rule", i, st)
		}
		if st := rlsCall(t, e, at, desc("user", v)); !st.OverLimit {
			t.Fatalf("value %d again: %+v, want over (its own counter)", i, st)
		}
	}
	keys, bytes := 0, 0
	e.cache.DrainDirty(func(key string, _ []quota.Limit, _ []quota.State, _ int64) {
		keys++
		bytes += len(key)
	})
	if keys != n || bytes > n*(maxCounterKeyBytes+64) {
		t.Fatalf("%d buckets of %d key bytes in all for %d values of %d bytes, want %d of at most %d each", keys, bytes, n, size, n, maxCounterKeyBytes+64)
	}
}

// The statistics split a call that crosses the limit as the reference
// does: 7 of 10 used, a call of 5 is 2 over and 2 near (past 8).
func TestShouldRateLimitStatsAcrossTheLimit(t *testing.T) {
	e := rlsEngineWith(t, countYAML)
	at := time.Unix(1_800_000_000-1_800_000_000%60+1, 0)
	d := desc("strict", "s")
	d.Hits = 7
	rlsCall(t, e, at, d)
	d.Hits = 5
	if st := rlsCall(t, e, at, d); !st.OverLimit {
		t.Fatalf("12 of 10: %+v", st)
	}
	m := e.metrics.rls
	over := testutil.ToFloat64(m.overLimit.WithLabelValues("ten_a", "edge", "strict"))
	near := testutil.ToFloat64(m.nearLimit.WithLabelValues("ten_a", "edge", "strict"))
	total := testutil.ToFloat64(m.totalHits.WithLabelValues("ten_a", "edge", "strict"))
	if over != 2 || near != 2 || total != 12 {
		t.Fatalf("over %v near %v total %v, want 2, 2, 12", over, near, total)
	}
}

// A descriptor's own limit counts in the file's counter for the same
// entries when the units agree, as the reference's cache key names the
// domain, the entries and the window start but not the limit; overrides
// of one entries and unit share a counter whatever their limits; a
// different unit, a rule with sluice extras or one matched through a
// share_threshold counts apart; the rule's shadow mode is not the
// override's.
func TestShouldRateLimitOverrideSharesTheRulesCounter(t *testing.T) {
	e := rlsEngineWith(t, `domain: edge
descriptors:
  - key: strict
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: lenient
    rate_limit: {unit: minute, requests_per_unit: 10}
    sluice: {denied: uncounted}
  - key: quiet
    rate_limit: {unit: minute, requests_per_unit: 2}
    shadow_mode: true
`)
	at := time.Unix(1_800_000_000-1_800_000_000%60+1, 0)
	over := func(key, value string, o *RLSOverride, hits int64) RLSStatus {
		d := desc(key, value)
		d.Override, d.Hits = o, hits
		return rlsCall(t, e, at, d)
	}
	perMinute := func(n uint32) *RLSOverride { return &RLSOverride{RequestsPerUnit: n, Unit: "MINUTE"} }

	// 6 through an override of 20, then the rule's 10 has 4 left.
	if st := over("strict", "a", perMinute(20), 6); st.OverLimit || st.Remaining != 14 {
		t.Fatalf("override: %+v", st)
	}
	if st := over("strict", "a", nil, 1); st.OverLimit || st.Remaining != 3 {
		t.Fatalf("the rule after the override's 6: %+v, want 3 left of 10", st)
	}
	// Another override of the same unit: the same counter, 7 used.
	if st := over("strict", "a", perMinute(8), 1); st.OverLimit || st.Remaining != 0 {
		t.Fatalf("a second override after 7 used: %+v, want 0 left of 8", st)
	}
	// Another value is another counter.
	if st := over("strict", "b", nil, 1); st.Remaining != 9 {
		t.Fatalf("another value: %+v", st)
	}
	// An hourly override counts apart from the minute rule.
	if st := over("strict", "a", &RLSOverride{RequestsPerUnit: 100, Unit: "HOUR"}, 1); st.OverLimit || st.Remaining != 99 {
		t.Fatalf("an hourly override: %+v, want its own counter", st)
	}
	// A rule with sluice extras keeps its counter to itself.
	over("lenient", "a", perMinute(20), 6)
	if st := over("lenient", "a", nil, 1); st.Remaining != 9 {
		t.Fatalf("a rule with sluice extras after an override: %+v, want 9 left", st)
	}
	// The shadow rule's counter is shared, its shadow mode is not.
	if st := over("quiet", "a", perMinute(1), 2); !st.OverLimit {
		t.Fatalf("an override over its limit on a shadow rule answered %+v, want over", st)
	}
	if st := over("quiet", "a", nil, 1); st.OverLimit || st.Remaining != 0 {
		t.Fatalf("the shadow rule after 2 counted through the override: %+v, want OK (shadow) with 0 left", st)
	}

	// The bucket's owner, asked by another server, finds the override's
	// limit under the rule's policy.
	v := e.view.Load()
	for name, pv := range v.tenant("ten_a").rls["edge"].rules {
		ls := v.limitsFor("ten_a", pv.id, overrideTier(perMinute(20)), "")
		if len(ls) != 1 || ls[0].Limit != 20 || ls[0].Period != time.Minute {
			t.Fatalf("limits of an override forwarded under rule %s: %+v", name, ls)
		}
	}
}
