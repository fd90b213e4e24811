package sdk

// The denial memory lets a client shed a caller that keeps knocking after
// Sluice said no, without a round trip per knock. Its one rule is that it
// only ever denies: an entry is created from a denial Sluice made, for the
// exact check it answered (same API key, or same IP when there is no key;
// same method; same raw path), and it answers locally only a check of at
// least the same cost, before Sluice's retry_after has passed. Sluice would
// deny that check too, unless an operator reset the bucket or loosened the
// policy in the meantime; capping an entry's life at maxDenialTTL bounds how
// long such a change goes unnoticed. Nothing is ever allowed locally.
//
// Entries live in shards keyed by a hash of the check, each a map guarded
// by its own mutex. A full shard drops expired entries, then any entry:
// forgetting a denial costs one network call, never correctness.

import (
	"hash/maphash"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// maxDenialTTL bounds how long a denial is answered locally.
const maxDenialTTL = time.Minute

const denialShards = 16

type denialCache struct {
	seed     maphash.Seed
	perShard int
	shards   [denialShards]denialShard
}

type denialShard struct {
	mu sync.Mutex
	m  map[string]*denial
}

type denial struct {
	at    time.Time // when Sluice denied
	until time.Time // answer locally before this instant
	cost  int       // the denied check's cost
	d     Decision
	items []RateLimitItem // d's RateLimit field, parsed once; nil if absent

	// last is the most recent local answer's header and violated names.
	// Their values change only when a countdown crosses a whole second,
	// so a caller hammering within one second is answered without
	// building anything.
	last atomic.Pointer[denialAnswer]
}

type denialAnswer struct {
	elapsed, retry, reset int64 // whole seconds the header was built for
	h                     http.Header
	violated              []string
}

func newDenialCache(size int) *denialCache {
	c := &denialCache{seed: maphash.MakeSeed(), perShard: max(size/denialShards, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*denial)
	}
	return c
}

// appendDenialKey appends the identity of a check as the denial memory
// sees it.
func appendDenialKey(dst []byte, req *CheckRequest) []byte {
	if req.APIKey != "" {
		dst = append(dst, 'k')
		dst = append(dst, req.APIKey...)
	} else if req.JWT != "" {
		dst = append(dst, 'j')
		dst = append(dst, req.JWT...)
	} else {
		dst = append(dst, 'i')
		dst = append(dst, req.IP...)
	}
	dst = append(dst, 0)
	if req.Method == "" {
		dst = append(dst, http.MethodGet...)
	} else {
		dst = append(dst, req.Method...)
	}
	dst = append(dst, 0)
	return append(dst, req.Path...)
}

func (c *denialCache) shard(key []byte) *denialShard {
	return &c.shards[maphash.Bytes(c.seed, key)%denialShards]
}

// lookup returns a local denial for a check of the given cost at now, if
// the memory holds one.
func (c *denialCache) lookup(key []byte, cost int, now time.Time) (Decision, bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[string(key)]
	if ok && !now.Before(e.until) {
		delete(sh.m, string(key))
		ok = false
	}
	sh.mu.Unlock()
	if !ok || cost < e.cost {
		return Decision{}, false
	}
	return e.answer(now), true
}

// insert remembers that Sluice denied the check key of the given cost at
// now. A newer denial replaces an older one: each is justified on its own.
func (c *denialCache) insert(key []byte, cost int, d Decision, now time.Time) {
	e := &denial{at: now, until: now.Add(min(d.RetryAfter, maxDenialTTL)), cost: cost, d: d}
	if vs := d.Header[hdrRateLimit]; len(vs) > 0 {
		e.items, _ = parseHeaderValues(vs)
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[string(key)]; !ok && len(sh.m) >= c.perShard {
		for k, old := range sh.m {
			if !now.Before(old.until) {
				delete(sh.m, k)
			}
		}
		for k := range sh.m {
			if len(sh.m) < c.perShard {
				break
			}
			delete(sh.m, k)
		}
	}
	sh.m[string(key)] = e
}

func (c *denialCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// answer is the remembered denial as of now: the times count down, and the
// header fields say so.
func (e *denial) answer(now time.Time) Decision {
	elapsed := now.Sub(e.at)
	d := e.d
	d.Local = true
	d.RetryAfter -= elapsed
	d.Reset = max(d.Reset-elapsed, 0)
	if e.d.Header == nil {
		return d
	}
	secs, retry, reset := int64(elapsed/time.Second), ceilSeconds(d.RetryAfter), ceilSeconds(d.Reset)
	if a := e.last.Load(); a != nil && a.elapsed == secs && a.retry == retry && a.reset == reset {
		d.Header, d.violated = a.h, a.violated
		return d
	}
	h := make(http.Header, 6)
	for _, k := range [...]string{hdrPolicy, hdrXLimit, hdrXRemaining} {
		if vs, ok := e.d.Header[k]; ok {
			h[k] = vs
		}
	}
	if e.items != nil {
		items := make([]RateLimitItem, len(e.items))
		for i, it := range e.items {
			items[i] = RateLimitItem{Name: it.Name, Params: append([]RateLimitParam(nil), it.Params...)}
			if t, ok := it.Int("t"); ok {
				// t was rounded up by Sluice; subtracting whole elapsed
				// seconds keeps it an upper bound.
				items[i].setParam("t", max(t-secs, 0))
			}
		}
		if s, err := FormatRateLimitHeader(items); err == nil {
			h[hdrRateLimit] = []string{s}
		}
	}
	if _, ok := e.d.Header[hdrXReset]; ok {
		h[hdrXReset] = []string{strconv.FormatInt(reset, 10)}
	}
	h[hdrRetryAfter] = []string{strconv.FormatInt(retry, 10)}
	d.Header = h
	d.violated = violatedPolicies(d)
	e.last.Store(&denialAnswer{elapsed: secs, retry: retry, reset: reset, h: h, violated: d.violated})
	return d
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
