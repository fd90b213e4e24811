package engine

import "github.com/sluicehq/sluice/internal/tenants"

// Customer is what a server keeps of a tenant's customer: what a check's
// answer names. The view holds them by id (tenantView.customers), and a
// key names its customer by id (keyView.customerID), so a change of a
// customer touches no key. An answer points at the view's own, so naming
// a customer allocates nothing.
type Customer struct {
	ID, ExternalID string
}

// setCustomer replaces (c set) or removes (c nil) the customer id in tv,
// a copy no reader has seen: it copies a shard or two of each of the
// tenant's two customer tables.
func (tv *tenantView) setCustomer(id string, c *tenants.Customer) {
	if old, ok := tv.customers.get(id); ok {
		tv.customers = tv.customers.without(id)
		if cur, _ := tv.customersByExt.get(old.ExternalID); cur == old {
			tv.customersByExt = tv.customersByExt.without(old.ExternalID)
		}
	}
	if c != nil {
		tv.allocCustomers()
		cv := &Customer{ID: c.ID, ExternalID: c.ExternalID}
		tv.customers = tv.customers.set(id, cv)
		tv.customersByExt = tv.customersByExt.set(cv.ExternalID, cv)
	}
}

// nameCustomer fills a's customer with key's, when it has one the view
// knows.
func (tv *tenantView) nameCustomer(key *keyView, a *Answer) {
	if cv, ok := tv.customers.get(key.customerID); ok {
		a.Customer = cv
	}
}

// allocCustomers makes tv's customer tables writable the first time the
// tenant has a customer.
func (tv *tenantView) allocCustomers() {
	if tv.customers.s == nil {
		tv.customers = newCow[string, *Customer](stringShard)
		tv.customersByExt = newCow[string, *Customer](stringShard)
	}
}
