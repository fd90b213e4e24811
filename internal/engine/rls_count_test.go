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
