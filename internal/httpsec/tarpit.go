package httpsec

import (
	"context"
	"sync"
	"time"
)

// Tarpit slows the refusals of a client that keeps asking past its limit.
// A client that reads Retry-After sees its few refusals at once; one that
// does not, and asks again as soon as it is answered, has each further
// refusal answered only after the Retry-After it was told, in the header's
// whole seconds (at most Max). A closed loop of
// requests then costs the server a few answers a second instead of
// thousands, and the CPU they would have taken stays with the other
// tenants. The answer never arrives later than the client was told it
// could retry, so a client that honours Retry-After loses nothing.
//
// Bounds: at most PerKey answers are held per key and Total in all (past
// them, refusals are answered at once, as without a tarpit), and at most
// Keys keys are remembered (past it, a new key is not slowed). The work
// per refusal is constant. Safe for concurrent use; the zero value holds
// nothing.
type Tarpit struct {
	// Free is how many refusals a key has answered at once per Window.
	Free   int
	Window time.Duration
	// Max is the longest an answer is held.
	Max time.Duration
	// PerKey and Total bound the answers held at once.
	PerKey, Total int
	// Keys bounds the keys remembered.
	Keys int

	mu   sync.Mutex
	keys map[string]*pitKey
	held int
	// sweepAt is the table's size at which stale keys are dropped next.
	sweepAt int
	// sweptAt is when the last sweep ran: a full table is swept at most
	// once a Window.
	sweptAt time.Time
	// heldTotal counts the answers ever held (Stats).
	heldTotal uint64
}

type pitKey struct {
	since   time.Time // the start of the current window
	refused int       // refusals in it
	held    int       // answers held now
}

// NewTarpit returns the tarpit servers use: 10 refusals a second per key
// answered at once, then held up to a second, 32 at once per key and 4096
// in all, over at most 65 536 keys.
func NewTarpit() *Tarpit {
	return &Tarpit{Free: 10, Window: time.Second, Max: time.Second, PerKey: 32, Total: 4096, Keys: 1 << 16}
}

// Hold is called with a refusal about to be answered to key (a tenant or
// a client's address) at now, telling it to retry after wait (0: not
// said). It returns at once, or after holding the answer for wait rounded
// up to whole seconds, as the Retry-After header says it, at most Max (Max
// when wait is 0), or when ctx ends. It answers how long it
// held.
func (p *Tarpit) Hold(ctx context.Context, key string, wait time.Duration, now time.Time) time.Duration {
	d := p.admit(key, wait, now)
	if d <= 0 {
		return 0
	}
	defer p.release(key)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return d
	case <-ctx.Done():
		return 0
	}
}

// admit counts key's refusal and answers how long to hold it (0: answer
// at once); a positive answer takes a slot release gives back.
func (p *Tarpit) admit(key string, wait time.Duration, now time.Time) time.Duration {
	if p == nil || p.Max <= 0 || p.PerKey <= 0 || p.Total <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.keys[key]
	if k == nil {
		if p.keys == nil {
			p.keys = map[string]*pitKey{}
		}
		if n := len(p.keys); n >= max(p.sweepAt, 64) || n >= p.Keys && now.Sub(p.sweptAt) >= p.Window {
			p.sweep(now)
		}
		if len(p.keys) >= p.Keys {
			return 0
		}
		k = &pitKey{since: now}
		p.keys[key] = k
	}
	if now.Sub(k.since) >= p.Window || now.Before(k.since) {
		k.since, k.refused = now, 0
	}
	k.refused++
	if k.refused <= p.Free || k.held >= p.PerKey || p.held >= p.Total {
		return 0
	}
	k.held++
	p.held++
	p.heldTotal++
	// Retry-After says whole seconds, at least one: what the client
	// was told.
	if wait <= 0 {
		wait = p.Max
	}
	wait = (wait + time.Second - 1).Truncate(time.Second)
	return min(wait, p.Max)
}

func (p *Tarpit) release(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := p.keys[key]; k != nil {
		k.held--
	}
	p.held--
}

// sweep drops the keys whose window has passed and that hold nothing: they
// are as a new key would be. Under p.mu. Its cost is paid once per
// doubling of the table, or once a Window when it is full, so constant
// per refusal.
func (p *Tarpit) sweep(now time.Time) {
	for key, k := range p.keys {
		if k.held == 0 && now.Sub(k.since) >= p.Window {
			delete(p.keys, key)
		}
	}
	p.sweepAt = 2 * len(p.keys)
	p.sweptAt = now
}

// Stats answers the answers held now and in all.
func (p *Tarpit) Stats() (now int, total uint64) {
	if p == nil {
		return 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held, p.heldTotal
}
