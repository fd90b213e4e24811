package sdk

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Customer is one of the tenant's own customers: an organisation that
// holds several of its keys (Key.CustomerID).
type Customer struct {
	ID            string            `json:"id"`
	ExternalID    string            `json:"external_id"` // the tenant's own id, unique in the tenant
	Name          string            `json:"name"`
	Tier          string            `json:"tier"`
	BillingAnchor int               `json:"billing_anchor,omitempty"`
	Overrides     map[string]Limits `json:"overrides,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
}

// NewCustomer describes a customer to create; ExternalID and Tier are
// required.
type NewCustomer struct {
	ExternalID    string            `json:"external_id"`
	Name          string            `json:"name,omitempty"`
	Tier          string            `json:"tier"`
	BillingAnchor int               `json:"billing_anchor,omitempty"` // 1-31; 0 = the 1st
	Overrides     map[string]Limits `json:"overrides,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"` // at most 50 string values
}

// CustomerUpdate changes the fields that are set.
type CustomerUpdate struct {
	ExternalID    *string            `json:"external_id,omitempty"`
	Name          *string            `json:"name,omitempty"`
	Tier          *string            `json:"tier,omitempty"`
	BillingAnchor *int               `json:"billing_anchor,omitempty"`
	Overrides     *map[string]Limits `json:"overrides,omitempty"` // a pointer to an empty map removes them
	Metadata      *map[string]string `json:"metadata,omitempty"`  // a pointer to an empty map removes it
}

// CustomerQuery selects one page of customers, oldest first.
type CustomerQuery struct {
	Search string // keeps customers whose external id, name or tier contains it
	Limit  int    // 1-500; 0 leaves it to Sluice (50)
	Offset int
}

// CustomerPage is one page of customers and the counts a list shows.
type CustomerPage struct {
	Customers []Customer `json:"customers"`
	Offset    int        `json:"offset"`
	Limit     int        `json:"limit"`
	Total     int        `json:"total"`   // every customer of the tenant
	Matched   int        `json:"matched"` // those Search keeps
}

// CreateCustomer adds a customer.
func (c *Client) CreateCustomer(ctx context.Context, nc NewCustomer) (Customer, error) {
	var out Customer
	return out, c.do(ctx, http.MethodPost, "/v1/customers", nil, nc, &out)
}

// ListCustomers returns one page of the tenant's customers.
func (c *Client) ListCustomers(ctx context.Context, q CustomerQuery) (CustomerPage, error) {
	v := url.Values{}
	if q.Search != "" {
		v.Set("search", q.Search)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Offset > 0 {
		v.Set("offset", strconv.Itoa(q.Offset))
	}
	var out CustomerPage
	return out, c.do(ctx, http.MethodGet, "/v1/customers", v, nil, &out)
}

// GetCustomer returns one customer.
func (c *Client) GetCustomer(ctx context.Context, id string) (Customer, error) {
	var out Customer
	return out, c.do(ctx, http.MethodGet, "/v1/customers/"+url.PathEscape(id), nil, nil, &out)
}

// UpdateCustomer changes a customer's fields.
func (c *Client) UpdateCustomer(ctx context.Context, id string, u CustomerUpdate) (Customer, error) {
	var out Customer
	return out, c.do(ctx, http.MethodPatch, "/v1/customers/"+url.PathEscape(id), nil, u, &out)
}

// DeleteCustomer deletes a customer that holds no keys; one that still
// does answers an *Error with status 409.
func (c *Client) DeleteCustomer(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/customers/"+url.PathEscape(id), nil, nil, nil)
}
