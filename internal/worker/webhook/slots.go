package webhook

import (
	"sync"

	"github.com/sluicehq/sluice/internal/tenants"
)

// slots counts the deliveries in flight, per queue, endpoint and tenant,
// against the pool's bounds, and remembers which queues were released
// since a claim's read and whose turn came last. It is safe for
// concurrent use.
//
// A tenant holds at most perTenant slots, and the last reserve free slots
// go only to tenants that hold none: however many tenants fill their
// share with endpoints that never answer, a tenant with nothing in flight
// still gets a slot as long as fewer than total-reserve are held by them.
type slots struct {
	total, perEndpoint, perTenant, reserve int

	mu       sync.Mutex
	inflight map[tenants.DueQueue]string // the queues in flight, with their tenant
	endpoint map[string]int
	tenant   map[string]int
	// lastTenant is the tenant whose turn came last: the next claim
	// starts after it.
	lastTenant string
	// released counts releases; releasedAt is each queue's last, so that
	// a claim does not start a delivery it read before its queue was
	// released (the delivery it read may be the one just recorded).
	released   uint64
	releasedAt map[tenants.DueQueue]uint64
}

func newSlots(total, perEndpoint, perTenant int) *slots {
	return &slots{total: total, perEndpoint: perEndpoint, perTenant: perTenant, reserve: min(perTenant, total-perTenant),
		inflight: map[tenants.DueQueue]string{}, endpoint: map[string]int{}, tenant: map[string]int{},
		releasedAt: map[tenants.DueQueue]uint64{}}
}

// read answers how many slots are free and the mark of a claim's read:
// what was released after it may have changed since.
func (s *slots) read() (free int, mark uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total - len(s.inflight), s.released
}

// forget drops the releases at or before mark, once a claim that read at
// mark is done.
func (s *slots) forget(mark uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for q, at := range s.releasedAt {
		if at <= mark {
			delete(s.releasedAt, q)
		}
	}
}

// tenantFull reports whether the tenant may take no slot now: it holds
// its share, or it holds some and only the reserve is left.
func (s *slots) tenantFull(tenantID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fullLocked(tenantID)
}

func (s *slots) fullLocked(tenantID string) bool {
	held, free := s.tenant[tenantID], s.total-len(s.inflight)
	return free <= 0 || held >= s.perTenant || held > 0 && free-1 < s.reserve
}

// endpointRoom answers how many of an endpoint's deliveries are in flight
// and how many more may start.
func (s *slots) endpointRoom(webhookID string) (inflight, room int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.endpoint[webhookID]
	return n, max(0, s.perEndpoint-n)
}

// startable reports whether q may start for a claim that read at mark: it
// is not in flight and was not released since the read.
func (s *slots) startable(q tenants.DueQueue, mark uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, busy := s.inflight[q]
	return !busy && s.releasedAt[q] <= mark
}

// take starts q for its tenant, which takes the next turn, if the pool,
// the tenant's share and the endpoint's bound allow it.
func (s *slots) take(q tenants.DueQueue, tenantID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, busy := s.inflight[q]; busy || s.fullLocked(tenantID) || s.endpoint[q.WebhookID] >= s.perEndpoint {
		return false
	}
	s.inflight[q] = tenantID
	s.endpoint[q.WebhookID]++
	s.tenant[tenantID]++
	s.lastTenant = tenantID
	return true
}

// release frees q's slot; it reports whether q was in flight.
func (s *slots) release(q tenants.DueQueue) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	tenantID, ok := s.inflight[q]
	if !ok {
		return false
	}
	delete(s.inflight, q)
	s.released++
	s.releasedAt[q] = s.released
	if s.endpoint[q.WebhookID]--; s.endpoint[q.WebhookID] <= 0 {
		delete(s.endpoint, q.WebhookID)
	}
	if s.tenant[tenantID]--; s.tenant[tenantID] <= 0 {
		delete(s.tenant, tenantID)
	}
	return true
}

// after answers the tenant whose turn came last.
func (s *slots) after() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastTenant
}
