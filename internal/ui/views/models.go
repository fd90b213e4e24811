// Package views renders the dashboard's pages as templ components. Every
// component takes plain view values built by the handlers in package ui;
// nothing here knows about services, the worker or Echo, so a view can be
// rendered to a buffer and inspected in a test by its data-testid
// attributes.
package views

import (
	"strconv"
	"strings"
	"time"
)

// Page is what every page's frame needs: the signed-in user, the form
// token, the asset URLs and a one-line notice after a redirect.
type Page struct {
	Title  string
	Nav    string    // the active navigation entry, one of the Nav* constants
	User   *UserInfo // nil when nobody is signed in
	CSRF   string    // the token every form posts back as _csrf
	Assets Assets
	Flash  string // a confirmation such as "Key revoked."
	// Blocked, after a block, names who was blocked and offers to undo it;
	// it replaces Flash.
	Blocked *BlockedNotice
}

// BlockedNotice is the notice after a block: who, in which tenant (on the
// operator's pages), until when, and the form that lifts it again.
type BlockedNotice struct {
	Kind, ID   string // identity kind ("ip" or "key") and id
	TenantName string // set on the operator's pages
	Until      *time.Time
	Undo       UndoForm
}

// UndoForm is a one-button form that posts Fields (plus the form token) to
// Action.
type UndoForm struct {
	Action string
	Fields []Hidden
}

// Hidden is one hidden form field.
type Hidden struct{ Name, Value string }

// Navigation entries.
const (
	NavOverview  = "overview"
	NavPolicies  = "policies"
	NavKeys      = "keys"
	NavAnalytics = "analytics"
	NavCallers   = "callers"
	NavMembers   = "members"
	NavTenants   = "tenants"
	NavAbuse     = "abuse"
	NavBlocks    = "blocks"
	NavService   = "service-keys"
	NavAccount   = "account"
	NavAudit     = "audit"
	NavUsage     = "usage"
	NavWebhooks  = "webhooks"
	NavIssuers   = "jwt-issuers"
	NavCustomers = "customers"
)

// UserInfo is the signed-in user as the frame shows it.
type UserInfo struct {
	Email      string
	Role       string
	TenantName string
	Operator   bool
	Owner      bool
	// InTenant says the operator opened a tenant's dashboard: its pages
	// and navigation are the tenant's, with a way back.
	InTenant bool
}

// Assets are the cache-busted URLs of the static files.
type Assets struct {
	CSS, JS, Logo, Favicon string
}

// Choice is one option of a select or one tab of a picker.
type Choice struct {
	Value, Label string
	URL          string // for tabs and links
	Current      bool
}

// LoginView is the sign-in form.
type LoginView struct {
	Email string
	Next  string
	CSRF  string
	Error string
}

// ErrorView is a page that explains a failure.
type ErrorView struct {
	Status  int
	Title   string
	Message string
}

// ChartPoint is one step of allowed/denied counts. Denied is every
// denial; RateLimited, InvalidKey, Blocked and ConcurrencyLimited split it
// by reason (denials counted before reasons were, or before concurrency
// limits were counted apart, may be in Denied only).
type ChartPoint struct {
	Start                            time.Time
	Allowed                          int64
	Denied                           int64
	RateLimited, InvalidKey, Blocked int64
	ConcurrencyLimited               int64
}

// Unexplained is the part of Denied counted without a reason.
func (p ChartPoint) Unexplained() int64 {
	return max(0, p.Denied-p.RateLimited-p.InvalidKey-p.Blocked-p.ConcurrencyLimited)
}

// Totals sums a range.
type Totals struct {
	Allowed, Denied                  int64
	RateLimited, InvalidKey, Blocked int64
	ConcurrencyLimited               int64
}

// Unexplained is the part of Denied counted without a reason.
func (t Totals) Unexplained() int64 {
	return max(0, t.Denied-t.RateLimited-t.InvalidKey-t.Blocked-t.ConcurrencyLimited)
}

// Ratio is the share of denied decisions, 0 when there were none.
func (t Totals) Ratio() float64 {
	if n := t.Allowed + t.Denied; n > 0 {
		return float64(t.Denied) / float64(n)
	}
	return 0
}

// Offender is one identity ranked by denials.
type Offender struct {
	TenantID   string
	TenantName string
	Kind       string // "ip" or "key"
	ID         string
	Label      string // the key's name, when known
	Allowed    int64
	Denied     int64
	// RateLimited, InvalidKey and Blocked split Denied by reason.
	RateLimited, InvalidKey, Blocked int64
	Ratio                            float64
	FirstSeen                        time.Time
	LastSeen                         time.Time
	DrillURL                         string // the identity's history; empty on operator pages
	// BlockedUntil says how long an active block on the caller lasts
	// (operator pages only); empty when it is not blocked.
	BlockedUntil string
}

// PolicyStat is one policy's decisions in a range; its denials split by
// reason (those counted before reasons were are in Denied only).
type PolicyStat struct {
	Name               string
	URL                string
	Allowed            int64
	Denied             int64
	RateLimited        int64
	ConcurrencyLimited int64
}

// OverviewView is the tenant's landing page.
type OverviewView struct {
	Ranges        []Choice
	RangeLabel    string
	Chart         Chart
	Totals        Totals
	TopPolicies   []PolicyStat
	TopIdentities []Offender
	PolicyCount   int
	KeyCount      int
	AnalyticsURL  string
	Error         string
}

// TopPoliciesConcurrency reports whether a ranked policy was denied by a
// concurrency limit: the ranking then splits each policy's denials into
// rate limited and concurrency limited.
func (v OverviewView) TopPoliciesConcurrency() bool {
	for _, s := range v.TopPolicies {
		if s.ConcurrencyLimited > 0 {
			return true
		}
	}
	return false
}

// PolicyRow is one policy in the list.
type PolicyRow struct {
	ID, Name, Method, Path, Query string
	Consistency                   string
	Shadow                        bool
	Tiers                         []TierSummary
	UpdatedAt                     time.Time
	URL                           string
}

// TierSummary describes one tier's limits in words ("10 per 60s").
type TierSummary struct {
	Name   string
	Limits string
}

// PoliciesView is the list of policies with the path tester.
type PoliciesView struct {
	Policies []PolicyRow
	// Domains are the tenant's rules of Envoy's rate limit service, one
	// descriptor tree per domain, written with `sluice apply -f`.
	Domains []DomainView
	Test    PathTest
}

// DomainView is one domain's descriptor tree, its nodes in tree order.
type DomainView struct {
	Name  string
	Rules []DescriptorRow
}

// DescriptorRow is one node of a descriptor tree.
type DescriptorRow struct {
	Depth  int      // 0 for a node at the top of the tree
	Match  string   // "key" or "key = value"
	Limit  string   // "5 per minute", "unlimited", or "" for a node without a limit
	Flags  []string // shadow, quota mode, replaces …, local
	Name   string   // the policy's name: the full key
	Shadow bool
}

// PathTest is the "test this path" box and its answer.
type PathTest struct {
	Method  string
	Path    string
	Caller  string // an IP address or a consumer key
	Methods []string
	Error   string
	Result  *PathTestResult
}

// PathTestResult says what a sample request would hit.
type PathTestResult struct {
	Target       string // the request as given: "GET /api/x"
	Normalized   string // the path after normalization
	Matched      bool
	Policy       string
	PolicyURL    string
	Tier         string
	Identity     string
	Reason       string // ok, rate_limited, invalid_key, blocked
	Allowed      bool
	ShadowDenied bool
	Limit        int64
	Remaining    int64
	Reset        string
	RetryAfter   string
	// UnlistedDenied: denied because the policy denies tiers it does
	// not list.
	UnlistedDenied bool
	NoLimit        bool // the policy defines no limit for the tier
}

// PolicyForm is the create/edit form of a policy. Errors are keyed by the
// input's name ("path", "tier.0.limit.1.period"); FormError is a problem
// that belongs to no single input.
type PolicyForm struct {
	ID          string // empty for a new policy
	Name        string
	Method      string
	Path        string
	Query       string // one "name=value" per line
	Consistency string
	Shadow      bool
	Tiers       []TierRow
	// UnlistedTiers is "allow" or "deny": what tiers not listed get.
	UnlistedTiers string
	Methods       []string
	Algorithms    []string
	Errors        map[string]string
	FormError     string
	Action        string // the form's URL
	DeleteURL     string
}

// ProblemLabel names an input in the form's summary of problems by what
// the user typed: "pro › limit" for the limit of tier "pro".
func (f PolicyForm) ProblemLabel(key string) string {
	parts := strings.Split(key, ".")
	if len(parts) < 3 || parts[0] != "tier" {
		return ""
	}
	i, err := strconv.Atoi(parts[1])
	if err != nil || i < 0 || i >= len(f.Tiers) || f.Tiers[i].Name == "" {
		return ""
	}
	t := f.Tiers[i]
	label := []string{t.Name}
	if len(parts) >= 5 && parts[2] == "limit" {
		j, err := strconv.Atoi(parts[3])
		if err == nil && j >= 0 && j < len(t.Limits) && len(t.Limits) > 1 {
			name := strings.TrimSpace(t.Limits[j].Name)
			if name == "" {
				name = "limit " + strconv.Itoa(j+1)
			}
			label = append(label, name)
		}
		label = append(label, parts[4])
	} else {
		label = append(label, strings.Join(parts[2:], " "))
	}
	return strings.Join(label, " › ")
}

// TierRow is one tier in the form.
type TierRow struct {
	Name   string
	Limits []LimitRow
}

// LimitRow is one limit in the form; numbers stay text so a mistyped
// value is shown back as typed.
type LimitRow struct {
	Name, Algorithm, Limit, Period, Burst string
	Per                                   string // "" or "key": each caller; "customer": shared by a customer's callers
}

// KeyRow is one consumer key.
type KeyRow struct {
	ID, Name, Prefix, Tier string
	Status                 string // active, revoked, expired
	ExpiresAt              *time.Time
	LastUsed               *time.Time
	Usage                  Totals // checks in the last 30 days
	CreatedAt              time.Time
	URL                    string
	Overrides              int
	// CustomerID is the key's customer, "" for none.
	CustomerID string
}

// SortColumn is a sortable column header.
type SortColumn struct {
	Label   string
	URL     string
	Current bool
}

// KeysView is the key list with the create form.
type KeysView struct {
	Keys        []KeyRow // one page
	Total       int      // keys before filtering
	Filter      string
	Tier        string // "" for every tier
	TierChoices []Choice
	ShowRevoked bool
	// Page says which of the matching keys Keys are.
	Page KeysPage
	// HiddenRevoked counts the revoked keys left out because ShowRevoked
	// is off (among those the filter matches).
	HiddenRevoked int
	Columns       []SortColumn
	Create        KeyForm
	Created       *CreatedKey
	Tiers         []string
}

// KeysPage places a page of keys among those the filter keeps: keys From
// to To (from 1) of Of, with links to the pages before and after ("" when
// there is none).
type KeysPage struct {
	From, To, Of     int
	PrevURL, NextURL string
}

// KeyForm is the create or edit form of a key.
type KeyForm struct {
	Name      string
	Tier      string
	ExpiresAt string // datetime-local text, UTC
	Errors    map[string]string
	FormError string
}

// CreatedKey shows a new key's secret, once.
type CreatedKey struct {
	Name, Tier, Prefix, Secret, URL string
}

// KeyView is one key's page.
type KeyView struct {
	// Quotas are the key's calendar limits now, each a meter.
	Quotas       []QuotaMeter
	Key          KeyRow
	RevokedAt    *time.Time
	UpdatedAt    time.Time
	Edit         KeyForm
	Overrides    OverridesForm
	Reset        ResetForm
	Tiers        []string
	AnalyticsURL string
	// ReadOnly is the operator's view of another tenant's key: its facts
	// and use, no forms, with a link to its tenant.
	ReadOnly   bool
	TenantName string
	TenantURL  string
}

// OverridesForm edits a key's per-policy limits.
type OverridesForm struct {
	Rows       []OverrideRow
	Policies   []string
	Algorithms []string
	Errors     map[string]string
	FormError  string
}

// OverrideRow is one limit of one policy's override.
type OverrideRow struct {
	Policy string
	LimitRow
}

// ResetForm refills one identity's bucket for a policy.
type ResetForm struct {
	Action   string
	Kind, ID string
	Policies []string
	Policy   string
	Error    string
}

// AnalyticsView is the analytics page.
type AnalyticsView struct {
	Ranges    []Choice
	Steps     []Choice
	Policies  []Choice
	Range     string
	Step      string
	Policy    string
	Chart     Chart
	Offenders []ReasonOffender
	Error     string
}

// ReasonOffender is one identity and one reason it was denied for, ranked
// by that reason's denials: an identity denied for two reasons has a row
// for each.
type ReasonOffender struct {
	Offender
	Reason string // rate_limited, invalid_key or blocked
	Count  int64  // denials for Reason
	Checks int64  // the identity's decisions in the range, allowed and denied
}

// Share is Count's part of the identity's checks.
func (o ReasonOffender) Share() float64 {
	if o.Checks == 0 {
		return 0
	}
	return float64(o.Count) / float64(o.Checks)
}

// ReasonLabel names a denial reason for people.
func ReasonLabel(r string) string {
	switch r {
	case "rate_limited":
		return "Rate limited"
	case "invalid_key":
		return "Invalid key"
	case "blocked":
		return "Blocked"
	case "concurrency_limited":
		return "Concurrency limited"
	}
	return r
}

// IdentityView is one identity's history.
type IdentityView struct {
	Kind, ID, Label string
	KeyURL          string
	Ranges          []Choice
	Policies        []Choice
	Range           string
	Policy          string
	Chart           Chart
	Totals          Totals
	Summary         *Offender
	CallerURL       string // the caller's live state and actions
	Reset           ResetForm
	BackURL         string
	Error           string
}

// MembersView is the owner's invitation form and list of members.
type MembersView struct {
	Form    MemberForm
	Invited string
	Members []MemberRow
	Error   string // a refused role change or removal
}

// MemberRow is one of a tenant's users.
type MemberRow struct {
	ID, Email, Role string
	CreatedAt       time.Time
	LastSignIn      *time.Time
	Self            bool
}

// ServiceKeysView lists a tenant's service keys. Base is the page's path,
// which the forms post under (the tenant's own page, or the operator's
// page of a tenant, with TenantName set).
type ServiceKeysView struct {
	Base       string
	TenantName string
	Keys       []ServiceKeyRow
	Secret     string // a key added just now, shown once
	Error      string
}

// ServiceKeyRow is one service key.
type ServiceKeyRow struct {
	ID, Prefix string
	CreatedAt  time.Time
	LastUsed   *time.Time
	Status     string // "active" or "revoked"
}

// AccountView is the signed-in user's own account page.
type AccountView struct {
	Email          string
	PasswordErrors map[string]string
	EmailErrors    map[string]string
}

// MemberForm invites a member.
type MemberForm struct {
	Email  string
	Errors map[string]string
}

// TenantRow is one tenant in the operator's list.
type TenantRow struct {
	ID, Name                           string
	CreatedAt                          time.Time
	Suspended                          bool
	Demo                               bool
	Policies, Keys, ServiceKeys, Users int
	Allowed, Denied                    int64
}

// TenantView is the operator's page of one tenant: its details, suspend or
// resume, and delete with the tenant's name typed to confirm.
type TenantView struct {
	ID, Name    string
	CreatedAt   time.Time
	SuspendedAt *time.Time
	Demo        bool
	// Owners are the owners' emails; Users counts every login of the tenant.
	Owners                             []string
	Policies, Keys, ServiceKeys, Users int
	// Allowed and Denied are the tenant's checks of the last 24 hours.
	Allowed, Denied int64
	Error           string
	// ConfirmError is shown under the delete form's name input.
	ConfirmError string
}

// TenantsView is the operator's tenant list.
type TenantsView struct {
	Tenants []TenantRow
	Form    TenantForm
	Created *CreatedTenant
	Error   string
}

// TenantForm creates a tenant.
type TenantForm struct {
	Name, OwnerEmail string
	Errors           map[string]string
	FormError        string
}

// CreatedTenant shows a new tenant's service key, once.
type CreatedTenant struct {
	ID, Name, OwnerEmail, ServiceKey string
}

// AbuseView is the cross-tenant abuse report.
type AbuseView struct {
	Ranges   []Choice
	Range    string
	Rows     []Offender
	Expiries []Choice
	Error    string
	// Now is when the report was made; "seen" reads relative to it.
	Now time.Time
}

// BlockRow is one block.
type BlockRow struct {
	ID, TenantID, TenantName string
	Kind, IdentityID, Reason string
	ExpiresAt                *time.Time
	CreatedAt                time.Time
	Active                   bool
}

// BlocksView lists blocks with a form to add one.
type BlocksView struct {
	Blocks []BlockRow
	Form   BlockForm
}

// BlockForm blocks an identity.
type BlockForm struct {
	TenantID, Kind, ID, Reason, Expiry string
	Tenants                            []Choice
	Expiries                           []Choice
	Errors                             map[string]string
	FormError                          string
}

// CallersView is the Callers page: a search box and, once a caller is
// found, its state.
type CallersView struct {
	Query   string
	Message string        // the search found nothing, or cannot be read
	Matches []CallerMatch // a prefix matched several keys
	Caller  *CallerView
}

// CallerMatch is one key a search matched.
type CallerMatch struct {
	Label, Prefix, Tier, URL string
}

// CallerView is one caller: its buckets now, its recent decisions, and
// the forms that act on it.
type CallerView struct {
	Kind, ID   string
	Label      string // the key's name
	KeyURL     string
	KeyStatus  string // active, revoked or expired; empty for an IP
	Tier       string
	HistoryURL string
	Block      *CallerBlock
	Policies   []CallerPolicyRow
	Recent     Chart
	Minutes    int
	Reset      ResetForm
	BlockForm  CallerBlockForm
	Error      string
}

// CallerBlock is the block in force on a caller.
type CallerBlock struct {
	ID, Reason string
	Since      time.Time
	Until      *time.Time
}

// CallerPolicyRow is one policy's bucket for the caller.
type CallerPolicyRow struct {
	Policy, Tier           string
	Override               bool
	Unlisted, DenyUnlisted bool
	Allowed                bool
	RetryAfter             string
	Limits                 []CallerLimitRow
	Err                    string
	ResetURL               string
}

// CallerLimitRow is one limit's bucket.
type CallerLimitRow struct {
	Name, Period, FullIn string
	Limit, Remaining     int64
}

// CallerBlockForm blocks the caller for a while.
type CallerBlockForm struct {
	Reason, Expiry string
	Expiries       []Choice
	Error          string
}

// AuditView is one page of the audit log: a tenant's, or with Operator
// every tenant's, with a Tenant column and filter.
type AuditView struct {
	Operator bool
	// Action is the URL the filter form is sent to.
	Action      string
	ObjectTypes []Choice // the object type filter, "" first (all)
	Tenants     []Choice // the operator's tenant filter, "" first (all)
	Actor       string   // the actor filter's value
	Filtered    bool     // a filter is set: offer to clear it
	Entries     []AuditRow
	// OlderURL is the next page's address, NewestURL the first page's
	// when this is not it; empty when there is none.
	OlderURL, NewestURL string
	Error               string
}

// AuditRow is one entry of the audit log.
type AuditRow struct {
	ID         int64
	At         time.Time
	TenantName string // on the operator's page; "" for the platform's entries
	Actor      string // as people read it: an email, "service key sk_AbC12…", "operator"
	ActorURL   string // the page filtered to this actor
	Action     string // "created", "role changed", …
	ObjectType string // "policy", "consumer key", …
	ObjectName string
	ObjectID   string
	Changes    []AuditChange
}

// AuditChange is one field before and after; an empty side was not set.
type AuditChange struct {
	Field, Before, After string
}

// QuotaMeter is one calendar quota of a key: how much of it is used in the
// current period, and when the period resets.
type QuotaMeter struct {
	Name        string // "<policy>" or "<policy>.<limit>"
	Calendar    string // day, week, month, year
	Quota, Used int64
	ResetsAt    time.Time
}

// UsageView is the usage page: one month's units in the tenant's time
// zone, per key and policy and per policy, with the CSV downloads.
type UsageView struct {
	Month    string // "2027-01", the month picker's value
	From, To string // its first and last day
	TimeZone string
	Total    int64
	Keys     []UsageKeyRow
	Policies []UsagePolicyRow
	// CSVByKey and CSVByPolicy download the month's daily rows.
	CSVByKey, CSVByPolicy string
	Error                 string
}

// UsageKeyRow is a month's units of one key under one policy; KeyID ""
// counts the callers without a key.
type UsageKeyRow struct {
	KeyID, Name, Prefix, Policy string
	Units                       int64
}

// UsagePolicyRow is a month's units of one policy.
type UsagePolicyRow struct {
	Policy string
	Units  int64
}

// WebhooksView lists a tenant's webhook endpoints with the form adding one.
type WebhooksView struct {
	Hooks  []WebhookRow
	Events []string // every event type, in order
	Form   WebhookForm
	Error  string
	Full   bool // the tenant has as many endpoints as it may
}

// WebhookRow is one endpoint.
type WebhookRow struct {
	ID, URL, Description, SecretPrefix string
	Events                             []string
	Thresholds                         string // "80 %, 100 %"
	CreatedAt                          time.Time
	PreviousSecretUntil                *time.Time
	// Paused says why the endpoint is paused, "" when it is not.
	Paused string
}

// WebhookForm is the endpoint form as submitted.
type WebhookForm struct {
	URL, Description string
	Thresholds       string // "80, 100"
	Events           map[string]bool
}

// WebhookView is one endpoint: its settings and its deliveries.
type WebhookView struct {
	Hook       WebhookRow
	Events     []string
	Form       WebhookForm
	Error      string
	Secret     string // made just now (created or rotated), shown once
	Deliveries []DeliveryRow
	Next       string // the next, older page of deliveries
}

// DeliveryRow is one delivery of an endpoint.
type DeliveryRow struct {
	ID, Event, Status, Error string
	Attempts, Code           int
	LatencyMS                int64
	CreatedAt                time.Time
	LastAttempt, NextAttempt *time.Time
}

// JWTIssuersView lists a tenant's JWT issuers with the form adding one.
type JWTIssuersView struct {
	Issuers []JWTIssuerRow
	Form    JWTIssuerForm
	Error   string
	Full    bool // the tenant has as many issuers as it may
}

// JWTIssuerRow is one issuer, its lists as text.
type JWTIssuerRow struct {
	ID, Issuer, Audiences, Keys, Algorithms, Claims string
	CreatedAt                                       time.Time
}

// JWTIssuerForm is the issuer form as submitted; lists are comma-separated.
// JWKS is an inline key set (JSON); ID is set when an issuer is edited.
type JWTIssuerForm struct {
	ID, Issuer, Audiences, JWKSURL, JWKS, Algorithms, Subject, Tier string
}

// CustomersView is one page of a tenant's customers, the search that
// kept them, and the form adding one.
type CustomersView struct {
	Rows     []CustomerRow
	Search   string
	Offset   int // where Rows start among the matched customers
	Matched  int
	Total    int
	PrevHref string // "" on the first page
	NextHref string // "" on the last page
	Form     CustomerForm
	Error    string
}

// CustomerRow is one customer as lists show it.
type CustomerRow struct {
	ID, ExternalID, Name, Tier string
	BillingAnchor              int
	CreatedAt                  time.Time
}

// CustomerForm is the customer form as submitted.
type CustomerForm struct {
	ExternalID, Name, Tier string
}

// CustomerView is one customer and a page of its keys.
type CustomerView struct {
	Customer CustomerRow
	Metadata [][2]string // key and value, by key
	Keys     []CustomerKeyRow
	// KeysMatched counts every key of the customer; Keys shows the first
	// of them.
	KeysMatched int
}

// CustomerKeyRow is one key of a customer.
type CustomerKeyRow struct {
	ID, Name, Prefix, Tier, Status string
}
