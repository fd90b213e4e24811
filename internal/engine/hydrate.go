package engine

// Hydration: filling the hot cache from what the worker persisted, so that
// no restart resets anyone's quota, without making a restart wait for
// millions of buckets.
//
// A server is ready once it has the config snapshot and the first page of
// persisted buckets. Asking for the first page makes the worker commit
// everything already in the state stream first, so from then on SQLite
// holds every state this server published before it stopped. The rest
// loads in the background, page after page in the table's order
// (partition, then key: bus.CompareBucketKeys); the next page is fetched
// while the last one is inserted.
//
// While the load runs, a check may touch a key that is not in memory yet.
// Keys sort the same way in SQLite and in Go, so every key up to the last
// inserted page's last key (upTo, compared in the page's order) is settled:
// it is in the cache, or it had no live persisted bucket. A check on any other key that is not in the
// cache first fetches that key's bucket from the worker (one round trip, a
// first touch) and loads it. The bulk load and first touches insert with
// LoadIfAbsent, never replacing a bucket: one that a check created or
// already decided on is newer than any persisted copy. So no check is
// decided on a bucket younger than the persisted one, and the answers while
// hydrating are the answers after it.
//
// A reset (config change) of a key not in memory yet is remembered until the
// load ends, so that a page read before the worker deleted the row does not
// bring the old state back.
//
// Nothing has a deadline: a failed page (worker restarting, NATS away) is
// retried from where the load stopped, with a warning and a metric, and
// progress is logged at INFO every few seconds.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
)

const (
	// hydratePage is how many buckets one page asks for; the worker also
	// ends a page early at half of NATS's max_payload.
	hydratePage = 20000
	// firstTouchWait bounds how long a check waits for its bucket to be
	// fetched while the server hydrates, before answering 503.
	firstTouchWait = 2 * time.Second
	// pageTimeout bounds one page of the background load; the first
	// page waits longer, as the worker commits its backlog first.
	pageTimeout = 10 * time.Second
	// hydrateLogEvery is how often hydration progress is logged.
	hydrateLogEvery = 5 * time.Second
)

// hydration loads the persisted buckets into the hot cache: the bulk load
// after the first page, first touches, and the resets that must not come
// back. It is the engine's; it asks the worker over nc.
type hydration struct {
	nc         *nats.Conn
	cache      *quota.Cache
	leases     *leaseKeys
	log        *slog.Logger
	retries    prometheus.Counter // pages asked again
	firstTouch prometheus.Counter // buckets loaded by a first touch
	version    func() int64       // the config version, for the last log line

	done    atomic.Bool
	upTo    atomic.Pointer[loadCursor]
	loaded  atomic.Int64 // buckets inserted by the bulk load
	touched atomic.Int64 // buckets loaded by a first touch

	resetMu sync.Mutex
	resets  map[string]struct{} // keys reset while loading

	// beforePage, when set (tests), runs before each page after the first
	// is asked for.
	beforePage func(after string)
}

// loadCursor is how far the bulk load has settled keys: every key up to
// and including key in the page order (bus.CompareBucketKeys when byPart,
// plain key order from an older worker).
type loadCursor struct {
	key    string
	byPart bool
}

// covers reports whether key sorts at or before the cursor.
func (c *loadCursor) covers(key []byte) bool {
	if c.byPart {
		return bus.CompareBucketKeys(string(key), c.key) <= 0
	}
	return string(key) <= c.key
}

func (h *hydration) requestBuckets(ctx context.Context, req bus.BucketsRequest) (bus.BucketsPage, error) {
	var page bus.BucketsPage
	req.Packed = true
	if req.Partition == nil && len(req.Keys) == 0 {
		req.Order = bus.OrderPartitionKey
	}
	err := bus.Request(ctx, h.nc, bus.BucketsSubject, req, &page)
	return page, err
}

// pageLoader turns the records of pages into hot-cache loads, reusing its
// buffers (the cache copies what it keeps).
type pageLoader struct {
	limits []quota.Limit
	states []quota.State
}

// each calls load for every bucket of page and returns the last key.
func (pl *pageLoader) each(log *slog.Logger, page *bus.BucketsPage, load func(key string, limits []quota.Limit, states []quota.State, fullAt int64)) string {
	last := ""
	for i := range page.Buckets {
		rec := &page.Buckets[i]
		last = rec.Key
		limits, err := bus.DecodeLimits(rec.Limits)
		if err != nil {
			log.Warn("skipping persisted bucket", "key", rec.Key, "err", err)
			continue
		}
		load(rec.Key, limits, bus.DecodeStates(rec.States), rec.FullAt)
	}
	err := bus.WalkPacked(page.Packed, func(r bus.PackedRecord) error {
		key := string(r.Key)
		last = key
		var err error
		if pl.limits, pl.states, err = bus.DecodeStateInto(r.State, pl.limits, pl.states); err != nil {
			log.Warn("skipping persisted bucket", "key", key, "err", err)
			return nil
		}
		load(key, pl.limits, pl.states, r.FullAt)
		return nil
	})
	if err != nil {
		log.Warn("unreadable page of persisted buckets", "err", err)
	}
	return last
}

// insert loads one persisted bucket unless the cache already has one (or
// the key was reset while loading); it reports whether it loaded.
func (h *hydration) insert(key string, limits []quota.Limit, states []quota.State, fullAt int64) bool {
	if !h.done.Load() && h.wasReset(key) {
		return false
	}
	if !h.cache.LoadIfAbsent(key, limits, states, fullAt) {
		return false
	}
	h.leases.note([]byte(key), limits)
	return true
}

// hydrate loads the config snapshot and the first page of buckets; the
// server may answer checks once it returns. It returns the cursor the
// rest of the load starts from ("" when there is nothing more).
func (e *Engine) hydrate(ctx context.Context) (string, error) {
	if err := e.sync.resync(ctx); err != nil {
		return "", err
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	page, err := e.hyd.requestBuckets(rctx, bus.BucketsRequest{Limit: hydratePage})
	if err != nil {
		return "", fmt.Errorf("load buckets: %w", err)
	}
	var pl pageLoader
	e.hyd.insertPage(&pl, &page)
	return page.Next, nil
}

// insertPage loads a page of the bulk load and moves upTo past it.
func (h *hydration) insertPage(pl *pageLoader, page *bus.BucketsPage) {
	n := int64(0)
	last := pl.each(h.log, page, func(key string, limits []quota.Limit, states []quota.State, fullAt int64) {
		if h.insert(key, limits, states, fullAt) {
			n++
		}
	})
	h.loaded.Add(n)
	if page.Next != "" {
		last = page.Next
	}
	if last != "" {
		h.upTo.Store(&loadCursor{key: last, byPart: page.Order == bus.OrderPartitionKey})
	}
}

// loadRest loads the pages after the first one, fetching the next page
// while inserting the last, until every persisted bucket is in the cache or
// ctx ends. A failed page is retried from where the load stopped.
func (h *hydration) loadRest(ctx context.Context, after string, started time.Time) {
	if after == "" {
		h.finish(started)
		return
	}
	pages := make(chan bus.BucketsPage, 1)
	go func() {
		defer close(pages)
		for failures := 0; after != ""; {
			if h.beforePage != nil {
				h.beforePage(after)
			}
			// A page takes well under a second; while NATS is away a
			// request waits in the reconnect buffer, so give up early
			// and ask again.
			rctx, cancel := context.WithTimeout(ctx, pageTimeout)
			page, err := h.requestBuckets(rctx, bus.BucketsRequest{After: after, Limit: hydratePage})
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				failures++
				h.retries.Inc()
				h.log.Warn("hydration paused; retrying from where it stopped",
					"loaded", h.loaded.Load(), "after_key", after, "attempt", failures, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(min(time.Duration(failures)*500*time.Millisecond, 5*time.Second)):
				}
				continue
			}
			failures = 0
			after = page.Next
			select {
			case pages <- page:
			case <-ctx.Done():
				return
			}
		}
	}()
	lastLog := time.Now()
	var pl pageLoader
	for page := range pages {
		h.insertPage(&pl, &page)
		if time.Since(lastLog) >= hydrateLogEvery {
			lastLog = time.Now()
			n := h.loaded.Load()
			el := time.Since(started)
			h.log.Info("hydrating hot cache", "loaded", n, "first_touch", h.touched.Load(),
				"elapsed_s", el.Seconds(), "buckets_per_s", int64(float64(n)/el.Seconds()))
		}
		if page.Next == "" {
			h.finish(started)
		}
	}
}

func (h *hydration) finish(started time.Time) {
	h.done.Store(true)
	h.resetMu.Lock()
	h.resets = nil
	h.resetMu.Unlock()
	el := time.Since(started)
	h.log.Info("hot cache hydrated", "buckets", h.loaded.Load(), "first_touch", h.touched.Load(),
		"seconds", el.Seconds(), "config_version", h.version())
}

// Hydrated reports whether every persisted bucket is in the cache (the
// server answers exactly before that too, loading buckets on first touch).
func (e *Engine) Hydrated() bool { return e.hyd.done.Load() }

// touch makes sure key's persisted bucket, if any, is in the cache before a
// check decides on it, while the bulk load has not reached the key. The
// fetch ends after firstTouchWait or when ctx ends.
// touchDecision is touch for every bucket d decides: its own, the
// overflow bucket it would fall to, its customer's.
func (h *hydration) touchDecision(ctx context.Context, d *decision, b *tenantBound) error {
	if err := h.touch(ctx, d.key); err != nil {
		return err
	}
	if of := b.hydrating(d.key, d.tier, d.keyID); of != nil {
		if err := h.touch(ctx, of); err != nil {
			return err
		}
	}
	if d.cusKey != nil {
		return h.touch(ctx, d.cusKey)
	}
	return nil
}

func (h *hydration) touch(ctx context.Context, key []byte) error {
	if up := h.upTo.Load(); up != nil && up.covers(key) {
		return nil
	}
	if h.cache.Has(key) {
		return nil
	}
	tctx, cancel := context.WithTimeout(ctx, firstTouchWait)
	defer cancel()
	k := string(key)
	page, err := h.requestBuckets(tctx, bus.BucketsRequest{Keys: []string{k}, Limit: 1})
	if err != nil {
		if ctx.Err() != nil {
			return cancelled(ctx)
		}
		h.log.Warn("first-touch load failed", "err", err)
		return errs.Errorf(errs.Unavailable, "This caller's quota is still loading after a restart; try again shortly.")
	}
	var pl pageLoader
	pl.each(h.log, &page, func(key string, limits []quota.Limit, states []quota.State, fullAt int64) {
		if key == k && h.insert(key, limits, states, fullAt) {
			h.touched.Add(1)
			h.firstTouch.Inc()
		}
	})
	return nil
}

// noteReset remembers a key reset while the bulk load runs.
func (h *hydration) noteReset(key string) {
	if h.done.Load() {
		return
	}
	h.resetMu.Lock()
	if !h.done.Load() {
		if h.resets == nil {
			h.resets = map[string]struct{}{}
		}
		h.resets[key] = struct{}{}
	}
	h.resetMu.Unlock()
}

func (h *hydration) wasReset(key string) bool {
	h.resetMu.Lock()
	_, ok := h.resets[key]
	h.resetMu.Unlock()
	return ok
}
