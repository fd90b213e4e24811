package engine

// When each service key was last used, at a cost the API's hot path does
// not notice: every active key's entry in the config view holds an atomic
// minute. Authenticating a request compares it with the server's current
// minute (itself an atomic, moved once a second by a loop, so the request
// never reads the clock) and stores it when it is older, which happens at
// most once a minute per key. Every KeyUseInterval one loop sends the
// worker, in one small request, the keys used since its last report; the
// worker keeps the latest minute in SQLite. A report that fails is sent
// again with the next one.

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/tenants"
)

// svcEntry is an active service key in the view. used is shared by every
// view that holds the key, so a config change does not lose it.
type svcEntry struct {
	tenantID, id string
	used         *atomic.Int64 // unix minute of the last use this server saw; 0 = none
}

func newSvcEntry(k tenants.ServiceKey) svcEntry {
	return svcEntry{tenantID: k.TenantID, id: k.ID, used: new(atomic.Int64)}
}

// carryKeyUse keeps the use recorded in old for the keys a view built from
// a fresh snapshot still holds.
func (v *view) carryKeyUse(old *view) {
	v.svcHash.all(func(h string, ne svcEntry) bool {
		if oe, ok := old.svcHash.get(h); ok && oe.id == ne.id {
			ne.used = oe.used
			v.svcHash.put(h, ne)
		}
		return true
	})
}

// keyUse notes when each service key is used and reports it to the worker:
// the current minute authentications compare with, and what the reporting
// loop sent last.
type keyUse struct {
	nc   *nats.Conn
	node string
	log  *slog.Logger
	now  func() time.Time
	view *atomic.Pointer[view]

	minute   atomic.Int64 // the current unix minute, moved by a loop
	mu       sync.Mutex
	reported map[string]int64 // key id -> minute last reported
}

func (u *keyUse) tick() { u.minute.Store(u.now().Unix() / 60) }

// note records a use of ent in the current minute.
func (u *keyUse) note(ent svcEntry) {
	if m := u.minute.Load(); ent.used.Load() < m {
		ent.used.Store(m)
	}
}

// report sends the worker the keys used since the last report.
func (u *keyUse) report(ctx context.Context) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.reported == nil {
		u.reported = map[string]int64{}
	}
	var used []tenants.KeyUse
	var minutes []int64
	u.view.Load().svcHash.all(func(_ string, ent svcEntry) bool {
		m := ent.used.Load()
		if m > 0 && m > u.reported[ent.id] {
			used = append(used, tenants.KeyUse{ID: ent.id, At: time.Unix(m*60, 0).UTC()})
			minutes = append(minutes, m)
		}
		return true
	})
	if len(used) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := bus.Request(rctx, u.nc, bus.OpServiceKeyUsed.Subject(), bus.ServiceKeyUsed{V: bus.WireVersion, Node: u.node, Used: used}, nil); err != nil {
		u.log.Warn("service key use report failed; it is sent again with the next one", "keys", len(used), "err", err)
		return
	}
	for i, k := range used {
		u.reported[k.ID] = minutes[i]
	}
}
