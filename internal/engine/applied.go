package engine

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/cluster"
)

// appliedKeep is how long an owner remembers what it answered a forwarded
// item: at least this long, at most twice. A sender sends an item again
// only to the same owner and only while its own wait lasts (HandoverWait,
// plus the last round trip's timeout), which this outlasts, so a repeat
// always finds the first answer.
const appliedKeep = 10 * time.Second

// appliedTable remembers, per item id, what this server answered a
// decision that moved a bucket (cluster/forward.go, "once means once"). A
// stripe's lock is held from the look-up to the record, so two copies of
// one item arriving at once are decided once. Entries live in two
// generations per stripe that turn every appliedKeep, so the table holds
// what the last 10–20 s of moving decisions answered, and nothing for
// denied checks' peeks.
type appliedTable struct {
	stripes [64]appliedStripe
}

type appliedStripe struct {
	mu        sync.Mutex
	cur, prev map[uint64]cluster.Result
	turned    time.Time
}

// lock returns id's stripe, locked, its generations turned if due.
func (t *appliedTable) lock(id uint64, now time.Time) *appliedStripe {
	s := &t.stripes[id%uint64(len(t.stripes))]
	s.mu.Lock()
	if s.cur == nil || now.Sub(s.turned) >= appliedKeep {
		s.prev, s.cur, s.turned = s.cur, map[uint64]cluster.Result{}, now
	}
	return s
}

func (s *appliedStripe) get(id uint64) (cluster.Result, bool) {
	if r, ok := s.cur[id]; ok {
		return r, true
	}
	r, ok := s.prev[id]
	return r, ok
}

func (s *appliedStripe) put(id uint64, r cluster.Result) { s.cur[id] = r }

// size is how many answers the table holds (metrics, tests).
func (t *appliedTable) size() int {
	n := 0
	for i := range t.stripes {
		s := &t.stripes[i]
		s.mu.Lock()
		n += len(s.cur) + len(s.prev)
		s.mu.Unlock()
	}
	return n
}

// itemIDs makes the ids of this server's decisions: a random base per
// process plus a counter, so that ids from different servers do not meet
// (two bases a few billion apart would need that many decisions).
type itemIDs struct {
	base uint64
	seq  atomic.Uint64
}

func newItemIDs() *itemIDs {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &itemIDs{base: binary.LittleEndian.Uint64(b[:])}
}

func (g *itemIDs) next() uint64 {
	for {
		if id := g.base + g.seq.Add(1); id != 0 {
			return id
		}
	}
}

// settleID is the id of a reservation's settle: the same on every server
// and for every retry, so that an owner applies a settle once however
// many servers the client's retries reach within appliedKeep.
func settleID(tenantID, reservation string) uint64 {
	h := sha256.Sum256([]byte("settle\x00" + tenantID + "\x00" + reservation))
	return binary.LittleEndian.Uint64(h[:8]) | 1
}
