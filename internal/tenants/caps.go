package tenants

// Caps per tenant. What one tenant holds is what every server keeps in
// memory and rebuilds when that tenant changes, so no tenant may hold
// without bound. The worker checks a cap inside the write transaction that
// would exceed it, under the store's one writer: the check is exact across
// every server. The counts come from tenant_usage, kept by triggers
// (migration 0015), so a check reads one row whatever the tenant holds.
//
// A cap lowered below what a tenant already holds deletes nothing: the
// tenant keeps what it has and cannot add more until it is under the cap.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/errs"
)

// Caps bounds what one tenant may hold. A zero field takes its default.
type Caps struct {
	// Policies is the most policies a tenant may have.
	Policies int
	// LimitsPerPolicy is the most limits one policy may hold, its tiers'
	// limits added together.
	LimitsPerPolicy int
	// ConsumerKeys is the most consumer keys a tenant may have issued,
	// revoked ones included: servers keep those too, to name them in
	// answers.
	ConsumerKeys int
	// ServiceKeys is the most active service keys a tenant may have;
	// revoked ones do not count.
	ServiceKeys int
	// Blocks is the most blocks a tenant may have, expired ones counting
	// until they are purged.
	Blocks int
	// Members is the most dashboard logins (owners and members) a tenant
	// may have.
	Members int
	// OpenReservations is the most open (unsettled, unexpired)
	// reservations a tenant may hold; package reserve checks it.
	OpenReservations int
	// Customers is the most customers a tenant may have.
	Customers int
}

// Default caps.
const (
	DefaultMaxPolicies        = 1000
	DefaultMaxLimitsPerPolicy = 16
	DefaultMaxConsumerKeys    = 1_000_000
	DefaultMaxServiceKeys     = 64
	DefaultMaxBlocks          = 100_000
	DefaultMaxMembers         = 1000
	// DefaultMaxOpenReservations is reserve.MaxOpen.
	DefaultMaxOpenReservations = 100_000
	DefaultMaxCustomers        = 100_000
)

// Cap names, as error messages and flags name them.
const (
	CapPolicies         = "policies"
	CapLimitsPerPolicy  = "limits_per_policy"
	CapConsumerKeys     = "consumer_keys"
	CapServiceKeys      = "service_keys"
	CapBlocks           = "blocks"
	CapMembers          = "members"
	CapOpenReservations = "open_reservations"
	CapCustomers        = "customers"
)

// WithDefaults returns c with every zero field set to its default.
func (c Caps) WithDefaults() Caps {
	def := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	def(&c.Policies, DefaultMaxPolicies)
	def(&c.LimitsPerPolicy, DefaultMaxLimitsPerPolicy)
	def(&c.ConsumerKeys, DefaultMaxConsumerKeys)
	def(&c.ServiceKeys, DefaultMaxServiceKeys)
	def(&c.Blocks, DefaultMaxBlocks)
	def(&c.Members, DefaultMaxMembers)
	def(&c.OpenReservations, DefaultMaxOpenReservations)
	def(&c.Customers, DefaultMaxCustomers)
	return c
}

// Validate rejects negative caps. A cap of 0 means its default, so every
// cap is at least 1: a tenant always keeps its owner and one service key.
func (c Caps) Validate() error {
	var bad []error
	for _, f := range c.fields() {
		if *f.v < 0 {
			bad = append(bad, fmt.Errorf("--tenant-max-%s must be at least 1 (0 takes the default), not %d", strings.ReplaceAll(f.name, "_", "-"), *f.v))
		}
	}
	return errors.Join(bad...)
}

type capField struct {
	name string
	v    *int
}

func (c *Caps) fields() []capField {
	return []capField{
		{CapPolicies, &c.Policies}, {CapLimitsPerPolicy, &c.LimitsPerPolicy}, {CapConsumerKeys, &c.ConsumerKeys},
		{CapServiceKeys, &c.ServiceKeys}, {CapBlocks, &c.Blocks}, {CapMembers, &c.Members},
		{CapOpenReservations, &c.OpenReservations}, {CapCustomers, &c.Customers},
	}
}

// capPrefix starts every cap error's message; CapReached looks for it.
const capPrefix = "tenant cap "

// capError is the error of a write that would take a tenant past a cap.
// It is a conflict with the tenant's state (409), and its message names
// the cap and its value.
func capError(name string, limit int, what string) *errs.Error {
	return errs.Errorf(errs.Conflict, "%s%q reached: a tenant may hold at most %d %s. Delete some first, or ask the platform operator to raise the cap.",
		capPrefix, name, limit, what)
}

// CapReached reports whether err is a cap error (as it travels between
// processes, a code and a message).
func CapReached(err error) bool {
	return errs.Is(err, errs.Conflict) && strings.HasPrefix(errs.Message(err), capPrefix)
}

// SetCaps sets the caps later writes are checked against.
func (s *Store) SetCaps(c Caps) {
	c = c.WithDefaults()
	s.caps.Store(&c)
}

// Caps returns the caps writes are checked against.
func (s *Store) Caps() Caps { return s.currentCaps() }

func (s *core) currentCaps() Caps {
	if c := s.caps.Load(); c != nil {
		return *c
	}
	return Caps{}.WithDefaults()
}

// usage columns by cap.
var usageColumn = map[string]string{
	CapPolicies:     "policies",
	CapConsumerKeys: "consumer_keys",
	CapServiceKeys:  "service_keys",
	CapBlocks:       "blocks",
	CapMembers:      "users",
	CapCustomers:    "customers",
}

// capWhat is what each counted cap counts, for its message.
var capWhat = map[string]string{
	CapPolicies:     "policies",
	CapConsumerKeys: "consumer keys (revoked ones included)",
	CapServiceKeys:  "active service keys",
	CapBlocks:       "blocks",
	CapMembers:      "dashboard logins (owners and members)",
	CapCustomers:    "customers",
}

// checkRoom answers a cap error when the tenant already holds as many of
// what cap counts as the cap allows. It runs in the write transaction
// that would add one, so no concurrent write can slip past it.
func (s *core) checkRoom(ctx context.Context, q querier, tenantID, cap string) error {
	limit := 0
	caps := s.currentCaps()
	for _, f := range caps.fields() {
		if f.name == cap {
			limit = *f.v
		}
	}
	var n int
	err := q.QueryRowContext(ctx, `SELECT `+usageColumn[cap]+` FROM tenant_usage WHERE tenant_id = ?`, tenantID).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return errs.Errorf(errs.NotFound, "tenant not found")
	}
	if err != nil {
		return fmt.Errorf("read tenant usage: %w", err)
	}
	if n >= limit {
		return capError(cap, limit, capWhat[cap])
	}
	return nil
}

// checkPolicyLimits answers a cap error when p holds more limits, its
// tiers' added together, than one policy may.
func (s *PolicyStore) checkPolicyLimits(p Policy) error {
	n := 0
	for _, ls := range p.Tiers {
		n += len(ls)
	}
	if limit := s.currentCaps().LimitsPerPolicy; n > limit {
		return errs.Errorf(errs.Conflict, "%s%q exceeded: a policy may hold at most %d limits, its tiers' added together, and this one has %d.",
			capPrefix, CapLimitsPerPolicy, limit, n)
	}
	return nil
}

// Usage is what a tenant holds of what its caps count.
type Usage struct {
	Policies     int `json:"policies"`
	ConsumerKeys int `json:"consumer_keys"`
	ServiceKeys  int `json:"service_keys"`
	Blocks       int `json:"blocks"`
	Members      int `json:"members"`
	Customers    int `json:"customers"`
}

// Usage returns what a tenant holds of what its caps count.
func (s *TenantStore) Usage(ctx context.Context, tenantID string) (Usage, error) {
	var u Usage
	err := s.db.QueryRowContext(ctx, `SELECT policies, consumer_keys, service_keys, blocks, users, customers FROM tenant_usage WHERE tenant_id = ?`, tenantID).
		Scan(&u.Policies, &u.ConsumerKeys, &u.ServiceKeys, &u.Blocks, &u.Members, &u.Customers)
	if errors.Is(err, sql.ErrNoRows) {
		return Usage{}, errs.Errorf(errs.NotFound, "tenant not found")
	}
	return u, err
}
