package tenants

// How servers keep their copy of the configuration.
//
// The worker is the only writer. Every committed config write increments
// the settings row config_version by exactly one in the same transaction
// and yields one or more Changes, all stamped with that new version (a new
// tenant yields a "tenant" and a "service_key" change). The worker
// publishes the Changes of one write together, in one message.
//
// A server starts from a Snapshot, which carries the version it reflects,
// and applies each change with the rule Snapshot.Apply implements:
//   - Version below its own: already reflected, skip;
//   - Version equal to or one above its own: apply, then adopt the version;
//   - further ahead: a change was missed, so fetch a new Snapshot.
//
// Applying is idempotent because every change carries the whole new object
// (upserted by id) or the id of the deleted one, never a delta; receiving a
// change twice, or a change already contained in the Snapshot, is harmless.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Change kinds.
const (
	ChangeTenant        = "tenant"         // Tenant: created or updated
	ChangeServiceKey    = "service_key"    // ServiceKey: created or revoked
	ChangeConsumerKey   = "consumer_key"   // ConsumerKey: created, updated or revoked
	ChangePolicy        = "policy"         // Policy: created or updated
	ChangePolicyDeleted = "policy_deleted" // ID, TenantID
	ChangeBlock         = "block"          // Block: created
	ChangeBlockDeleted  = "block_deleted"  // ID, TenantID
	ChangeOperatorToken = "operator_token" // OperatorTokenHash
	ChangeBucketReset   = "bucket_reset"   // BucketReset: refill one identity's buckets of a policy
	ChangeUserSession   = "user_session"   // UserSession: a user's session version, new or moved
	ChangeUserDeleted   = "user_deleted"   // ID, TenantID: the user and every session of theirs are gone
	ChangeTenantDeleted = "tenant_deleted" // TenantID: the tenant and everything it owned are gone
	// ChangeJWTIssuer (JWTIssuer: created or updated) and
	// ChangeJWTIssuerDeleted (ID, TenantID) are new: a server that does
	// not know them only advances its version.
	ChangeJWTIssuer        = "jwt_issuer"
	ChangeJWTIssuerDeleted = "jwt_issuer_deleted"
	// ChangeCustomer (Customer: created or updated, without its metadata)
	// and ChangeCustomerDeleted (ID, TenantID) are new: a server that does
	// not know them only advances its version.
	ChangeCustomer        = "customer"
	ChangeCustomerDeleted = "customer_deleted"
)

// Change is one committed config change, as the worker announces it.
// Exactly the payload field its Kind names is set; TenantID is set for
// every kind that belongs to a tenant.
type Change struct {
	Version  int64  `json:"version"`
	Kind     string `json:"kind"`
	TenantID string `json:"tenant_id,omitempty"`
	// ID is the deleted object's id (policy_deleted, block_deleted).
	ID                string             `json:"id,omitempty"`
	Tenant            *Tenant            `json:"tenant,omitempty"`
	ServiceKey        *ServiceKeyRecord  `json:"service_key,omitempty"`
	ConsumerKey       *ConsumerKeyRecord `json:"consumer_key,omitempty"`
	Policy            *Policy            `json:"policy,omitempty"`
	Block             *Block             `json:"block,omitempty"`
	OperatorTokenHash string             `json:"operator_token_hash,omitempty"`
	BucketReset       *BucketReset       `json:"bucket_reset,omitempty"`
	UserSession       *UserSession       `json:"user_session,omitempty"`
	JWTIssuer         *JWTIssuer         `json:"jwt_issuer,omitempty"`
	Customer          *Customer          `json:"customer,omitempty"`
}

// UserSession is what servers know of a dashboard user: the session
// version their session tokens must carry. A user servers do not know (never
// announced, or deleted) has no valid session.
type UserSession struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id,omitempty"`
	Version  int64  `json:"version"`
}

// BucketReset asks every server to refill one identity's buckets for one
// policy. It changes no stored configuration, but it is versioned like the
// rest so that it is ordered with the policy changes around it.
type BucketReset struct {
	PolicyID string   `json:"policy_id"`
	Policy   string   `json:"policy"` // the policy's name
	Identity Identity `json:"identity"`
}

// ServiceKeyRecord is a service key with its hash, the form servers
// receive: its JSON is ServiceKey's plus "hash".
type ServiceKeyRecord struct{ ServiceKey }

// MarshalJSON implements json.Marshaler.
func (r ServiceKeyRecord) MarshalJSON() ([]byte, error) {
	type plain ServiceKey
	return json.Marshal(struct {
		plain
		Hash string `json:"hash"`
	}{plain(r.ServiceKey), r.Hash})
}

// UnmarshalJSON implements json.Unmarshaler.
func (r *ServiceKeyRecord) UnmarshalJSON(b []byte) error {
	type plain ServiceKey
	var v struct {
		plain
		Hash string `json:"hash"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r.ServiceKey = ServiceKey(v.plain)
	r.ServiceKey.Hash = v.Hash
	return nil
}

// ConsumerKeyRecord is a consumer key with its hash, the form servers
// receive: its JSON is ConsumerKey's plus "hash".
type ConsumerKeyRecord struct{ ConsumerKey }

// MarshalJSON implements json.Marshaler.
func (r ConsumerKeyRecord) MarshalJSON() ([]byte, error) {
	type plain ConsumerKey
	return json.Marshal(struct {
		plain
		Hash string `json:"hash"`
	}{plain(r.ConsumerKey), r.Hash})
}

// UnmarshalJSON implements json.Unmarshaler.
func (r *ConsumerKeyRecord) UnmarshalJSON(b []byte) error {
	type plain ConsumerKey
	var v struct {
		plain
		Hash string `json:"hash"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r.ConsumerKey = ConsumerKey(v.plain)
	r.ConsumerKey.Hash = v.Hash
	return nil
}

// Snapshot is everything servers need, consistent as of Version. Each
// list is sorted by ID. Revoked keys and expired blocks are included;
// a server checks RevokedAt and ExpiresAt at decision time.
type Snapshot struct {
	Version      int64               `json:"version"`
	Tenants      []Tenant            `json:"tenants"`
	ServiceKeys  []ServiceKeyRecord  `json:"service_keys"`
	ConsumerKeys []ConsumerKeyRecord `json:"consumer_keys"`
	Policies     []Policy            `json:"policies"`
	Blocks       []Block             `json:"blocks"`
	// JWTIssuers is absent from an older worker's snapshot.
	JWTIssuers []JWTIssuer `json:"jwt_issuers,omitempty"`
	// Customers (without their metadata) is absent from an older
	// worker's snapshot.
	Customers         []Customer    `json:"customers,omitempty"`
	Users             []UserSession `json:"users"`
	OperatorTokenHash string        `json:"operator_token_hash,omitempty"`
}

// ErrVersionGap is returned by Snapshot.Apply for a change that is more
// than one version ahead: one was missed, and the caller should fetch a
// fresh Snapshot.
var ErrVersionGap = errors.New("tenants: config change skips a version")

// Apply applies changes in order, following the rule in this file's top
// comment, and keeps every list sorted by ID. It modifies s in place. On
// an error, changes before the failing one have been applied.
func (s *Snapshot) Apply(changes ...Change) error {
	for _, c := range changes {
		if err := s.apply(c); err != nil {
			return err
		}
	}
	return nil
}

func (s *Snapshot) apply(c Change) error {
	switch {
	case c.Version < s.Version:
		return nil
	case c.Version > s.Version+1:
		return fmt.Errorf("%w: at %d, got %d", ErrVersionGap, s.Version, c.Version)
	}
	missing := fmt.Errorf("tenants: %s change %d without its payload", c.Kind, c.Version)
	switch c.Kind {
	case ChangeTenant:
		if c.Tenant == nil {
			return missing
		}
		s.Tenants = upsert(s.Tenants, *c.Tenant, func(t Tenant) string { return t.ID })
	case ChangeServiceKey:
		if c.ServiceKey == nil {
			return missing
		}
		s.ServiceKeys = upsert(s.ServiceKeys, *c.ServiceKey, func(k ServiceKeyRecord) string { return k.ID })
	case ChangeConsumerKey:
		if c.ConsumerKey == nil {
			return missing
		}
		s.ConsumerKeys = upsert(s.ConsumerKeys, *c.ConsumerKey, func(k ConsumerKeyRecord) string { return k.ID })
	case ChangePolicy:
		if c.Policy == nil {
			return missing
		}
		s.Policies = upsert(s.Policies, *c.Policy, func(p Policy) string { return p.ID })
	case ChangePolicyDeleted:
		s.Policies = remove(s.Policies, c.ID, func(p Policy) string { return p.ID })
	case ChangeBlock:
		if c.Block == nil {
			return missing
		}
		s.Blocks = upsert(s.Blocks, *c.Block, func(b Block) string { return b.ID })
	case ChangeBlockDeleted:
		s.Blocks = remove(s.Blocks, c.ID, func(b Block) string { return b.ID })
	case ChangeJWTIssuer:
		if c.JWTIssuer == nil {
			return missing
		}
		s.JWTIssuers = upsert(s.JWTIssuers, *c.JWTIssuer, func(i JWTIssuer) string { return i.ID })
	case ChangeJWTIssuerDeleted:
		s.JWTIssuers = remove(s.JWTIssuers, c.ID, func(i JWTIssuer) string { return i.ID })
	case ChangeCustomer:
		if c.Customer == nil {
			return missing
		}
		s.Customers = upsert(s.Customers, *c.Customer, func(x Customer) string { return x.ID })
	case ChangeCustomerDeleted:
		s.Customers = remove(s.Customers, c.ID, func(x Customer) string { return x.ID })
	case ChangeUserSession:
		if c.UserSession == nil {
			return missing
		}
		s.Users = upsert(s.Users, *c.UserSession, func(u UserSession) string { return u.ID })
	case ChangeUserDeleted:
		s.Users = remove(s.Users, c.ID, func(u UserSession) string { return u.ID })
	case ChangeTenantDeleted:
		s.deleteTenant(c.TenantID)
	case ChangeOperatorToken:
		s.OperatorTokenHash = c.OperatorTokenHash
	case ChangeBucketReset:
		// Not configuration: the server's cache acts on it.
	default:
		return fmt.Errorf("tenants: unknown change kind %q", c.Kind)
	}
	s.Version = c.Version
	return nil
}

// deleteTenant drops a tenant and every object that belongs to it.
func (s *Snapshot) deleteTenant(id string) {
	s.Tenants = remove(s.Tenants, id, func(t Tenant) string { return t.ID })
	s.ServiceKeys = dropTenant(s.ServiceKeys, id, func(k ServiceKeyRecord) string { return k.TenantID })
	s.ConsumerKeys = dropTenant(s.ConsumerKeys, id, func(k ConsumerKeyRecord) string { return k.TenantID })
	s.Policies = dropTenant(s.Policies, id, func(p Policy) string { return p.TenantID })
	s.Blocks = dropTenant(s.Blocks, id, func(b Block) string { return b.TenantID })
	s.JWTIssuers = dropTenant(s.JWTIssuers, id, func(i JWTIssuer) string { return i.TenantID })
	s.Customers = dropTenant(s.Customers, id, func(c Customer) string { return c.TenantID })
	s.Users = dropTenant(s.Users, id, func(u UserSession) string { return u.TenantID })
}

func dropTenant[T any](s []T, tenantID string, tenant func(T) string) []T {
	s = slices.DeleteFunc(s, func(v T) bool { return tenant(v) == tenantID })
	if len(s) == 0 {
		return nil
	}
	return s
}

func upsert[T any](s []T, v T, id func(T) string) []T {
	i, found := slices.BinarySearchFunc(s, id(v), func(e T, target string) int { return strings.Compare(id(e), target) })
	if found {
		s[i] = v
		return s
	}
	return slices.Insert(s, i, v)
}

func remove[T any](s []T, target string, id func(T) string) []T {
	i, found := slices.BinarySearchFunc(s, target, func(e T, target string) int { return strings.Compare(id(e), target) })
	if !found {
		return s
	}
	s = slices.Delete(s, i, i+1)
	if len(s) == 0 {
		return nil
	}
	return s
}
