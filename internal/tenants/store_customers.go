package tenants

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// CustomerStore keeps a tenant's customers and which of its consumer keys
// each holds. Get it from Store.Customers.
type CustomerStore struct{ *core }

const customerColumns = `id, tenant_id, external_id, name, tier, billing_anchor, overrides, metadata, created_at, updated_at`

func scanCustomer(sc scanner) (Customer, error) {
	var c Customer
	var overrides, metadata string
	var created, updated int64
	if err := sc.Scan(&c.ID, &c.TenantID, &c.ExternalID, &c.Name, &c.Tier, &c.BillingAnchor, &overrides, &metadata, &created, &updated); err != nil {
		return Customer{}, err
	}
	if err := json.Unmarshal([]byte(overrides), &c.Overrides); err != nil {
		return Customer{}, fmt.Errorf("customer %s: overrides column: %w", c.ID, err)
	}
	if len(c.Overrides) == 0 {
		c.Overrides = nil
	}
	if err := json.Unmarshal([]byte(metadata), &c.Metadata); err != nil {
		return Customer{}, fmt.Errorf("customer %s: metadata column: %w", c.ID, err)
	}
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	c.CreatedAt, c.UpdatedAt = fromMS(created), fromMS(updated)
	return c, nil
}

// scanCustomerRecord is a customer as servers receive it: without its
// metadata, which no decision reads.
func scanCustomerRecord(sc scanner) (Customer, error) {
	c, err := scanCustomer(sc)
	c.Metadata = nil
	return c, err
}

// customerArgs are c's columns after id and tenant_id, in order.
func customerArgs(c Customer) ([]any, error) {
	ov, err := overridesJSON(c.Overrides)
	if err != nil {
		return nil, err
	}
	md, err := toJSON(c.Metadata)
	if err != nil {
		return nil, fmt.Errorf("encode metadata: %w", err)
	}
	return []any{c.ExternalID, c.Name, c.Tier, c.BillingAnchor, ov, md, toMS(c.CreatedAt), toMS(c.UpdatedAt)}, nil
}

// customerChange announces c to servers, without its metadata.
func customerChange(c Customer) Change {
	c.Metadata = nil
	return Change{Kind: ChangeCustomer, TenantID: c.TenantID, Customer: &c}
}

// Create adds a customer to a tenant. Every field is validated as a key's
// is; an external id the tenant already uses is refused, naming
// external_id, and a tenant at its customers cap is refused.
func (s *CustomerStore) Create(ctx context.Context, tenantID string, b CustomerBody, now time.Time) (Customer, []Change, error) {
	now = normTime(now)
	c := Customer{TenantID: tenantID}
	if err := b.Apply(&c); err != nil {
		return Customer{}, nil, err
	}
	c.ID, c.CreatedAt, c.UpdatedAt = NewID(IDCustomer), now, now
	args, err := customerArgs(c)
	if err != nil {
		return Customer{}, nil, err
	}
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		if err := requireTenant(ctx, tx, tenantID); err != nil {
			return nil, err
		}
		if err := s.checkRoom(ctx, tx, tenantID, CapCustomers); err != nil {
			return nil, err
		}
		if err := checkOverridePolicies(ctx, tx, tenantID, c.Overrides); err != nil {
			return nil, err
		}
		if err := checkExternalID(ctx, tx, c); err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO customers (`+customerColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			append([]any{c.ID, c.TenantID}, args...)...); err != nil {
			return nil, fmt.Errorf("create customer: %w", err)
		}
		err := recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionCreated, ObjectType: AuditCustomer,
			ObjectID: c.ID, ObjectName: c.ExternalID, Changes: created(customerFields(c))})
		if err != nil {
			return nil, err
		}
		return []Change{customerChange(c)}, nil
	})
	if err != nil {
		return Customer{}, nil, err
	}
	return c, changes, nil
}

// checkExternalID refuses an external id another customer of the tenant
// has.
func checkExternalID(ctx context.Context, tx *sql.Tx, c Customer) error {
	var other string
	err := tx.QueryRowContext(ctx, `SELECT id FROM customers WHERE tenant_id = ? AND external_id = ? AND id <> ?`, c.TenantID, c.ExternalID, c.ID).Scan(&other)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("read customers: %w", err)
	}
	return errs.Errorf(errs.Conflict, "external_id: another customer of this tenant (%s) has external id %q", other, c.ExternalID)
}

// Update patches one customer of a tenant; another tenant's answers
// errs.NotFound. An empty patch writes nothing.
func (s *CustomerStore) Update(ctx context.Context, tenantID, id string, b CustomerBody, now time.Time) (Customer, []Change, error) {
	now = normTime(now)
	var out Customer
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		old, err := getCustomer(ctx, tx, tenantID, id)
		if err != nil {
			return nil, err
		}
		c := old
		if err := b.Apply(&c); err != nil {
			return nil, err
		}
		out = c
		if b == (CustomerBody{}) {
			return nil, nil
		}
		c.UpdatedAt = now
		if b.Overrides != nil {
			if err := checkOverridePolicies(ctx, tx, tenantID, c.Overrides); err != nil {
				return nil, err
			}
		}
		if err := checkExternalID(ctx, tx, c); err != nil {
			return nil, err
		}
		args, err := customerArgs(c)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE customers SET external_id = ?, name = ?, tier = ?, billing_anchor = ?, overrides = ?, metadata = ?, created_at = ?, updated_at = ? WHERE id = ?`,
			append(args, c.ID)...); err != nil {
			return nil, fmt.Errorf("update customer: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionUpdated, ObjectType: AuditCustomer,
			ObjectID: c.ID, ObjectName: c.ExternalID, Changes: diffFields(customerFields(old), customerFields(c))})
		if err != nil {
			return nil, err
		}
		out = c
		return []Change{customerChange(c)}, nil
	})
	if err != nil {
		return Customer{}, nil, err
	}
	return out, changes, nil
}

// Get returns one customer of a tenant.
func (s *CustomerStore) Get(ctx context.Context, tenantID, id string) (Customer, error) {
	return getCustomer(ctx, s.db, tenantID, id)
}

func getCustomer(ctx context.Context, q querier, tenantID, id string) (Customer, error) {
	return queryOne(ctx, q, scanCustomer, "customer not found",
		`SELECT `+customerColumns+` FROM customers WHERE id = ? AND tenant_id = ?`, id, tenantID)
}

// requireCustomer answers errs.NotFound naming customer_id unless id is
// "" or one of the tenant's customers: another tenant's customer is
// answered as an unknown one, so a tenant never learns it exists.
func requireCustomer(ctx context.Context, q querier, tenantID, id string) error {
	if id == "" {
		return nil
	}
	ok, err := exists(ctx, q, `SELECT 1 FROM customers WHERE id = ? AND tenant_id = ?`, id, tenantID)
	if err != nil {
		return fmt.Errorf("find customer: %w", err)
	}
	if !ok {
		return errs.Errorf(errs.NotFound, "customer_id: no customer %q in this tenant", truncate(id, 64))
	}
	return nil
}

// Page returns one page of the tenant's customers that q keeps, oldest
// first. Like KeyStore.Page it reads outside a transaction.
func (s *CustomerStore) Page(ctx context.Context, q CustomerQuery) (CustomerPage, error) {
	if err := q.validate(); err != nil {
		return CustomerPage{}, err
	}
	if q.Limit == 0 {
		q.Limit = DefaultCustomerPage
	}
	page := CustomerPage{Customers: []Customer{}, Limit: q.Limit}
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM customers WHERE tenant_id = ?`, q.TenantID).Scan(&page.Total); err != nil {
		return CustomerPage{}, fmt.Errorf("count customers: %w", err)
	}
	where, args := `tenant_id = ?`, []any{q.TenantID}
	page.Matched = page.Total
	if q.Search != "" {
		// sluice_fold is strings.ToLower (internal/sqlitedb).
		where += ` AND instr(sluice_fold(external_id || ' ' || name || ' ' || tier), ?) > 0`
		args = append(args, strings.ToLower(q.Search))
		if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM customers WHERE `+where, args...).Scan(&page.Matched); err != nil {
			return CustomerPage{}, fmt.Errorf("count customers: %w", err)
		}
	}
	page.Offset = q.Offset
	if page.Offset >= page.Matched {
		page.Offset = max(0, (page.Matched-1)/q.Limit*q.Limit)
	}
	if page.Matched == 0 {
		return page, nil
	}
	cs, err := queryAll(ctx, s.db, scanCustomer,
		`SELECT `+customerColumns+` FROM customers WHERE `+where+` ORDER BY created_at, id LIMIT ? OFFSET ?`, append(args, q.Limit, page.Offset)...)
	if err != nil {
		return CustomerPage{}, fmt.Errorf("list customers: %w", err)
	}
	if cs != nil {
		page.Customers = cs
	}
	return page, nil
}

// Delete removes one customer of a tenant. A customer that still holds
// keys (revoked ones included) is refused with errs.Conflict: detaching
// them (PATCH "customer_id": null) is the tenant's explicit choice, since
// it changes the limits the keys are decided under.
func (s *CustomerStore) Delete(ctx context.Context, tenantID, id string, now time.Time) ([]Change, error) {
	return s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		c, err := getCustomer(ctx, tx, tenantID, id)
		if err != nil {
			return nil, err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM consumer_keys WHERE customer_id = ?`, id).Scan(&n); err != nil {
			return nil, fmt.Errorf("count customer keys: %w", err)
		}
		if n > 0 {
			return nil, errs.Errorf(errs.Conflict, "customer %s holds %d keys: detach them first (PATCH /v1/keys/{id} with \"customer_id\": null)", id, n)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM customers WHERE id = ?`, id); err != nil {
			return nil, fmt.Errorf("delete customer: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: normTime(now), Action: ActionDeleted, ObjectType: AuditCustomer,
			ObjectID: c.ID, ObjectName: c.ExternalID, Changes: diffFields(customerFields(c), nil)})
		if err != nil {
			return nil, err
		}
		return []Change{{Kind: ChangeCustomerDeleted, TenantID: tenantID, ID: id}}, nil
	})
}

// optString is s as a nullable column: NULL for "".
func optString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
