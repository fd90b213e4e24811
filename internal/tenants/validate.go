package tenants

// Validation answers the first problem found as an *errs.Error with code
// errs.Invalid whose message starts with the JSON path of the offending
// field ("tiers.pro[1].period: ..."), so the API can pass it through as is.
// Maps are walked in sorted key order so the same input always names the
// same field.

import (
	"fmt"
	"net/mail"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/errs"
)

// Bounds on configuration values.
const (
	MaxLimitsPerTier  = 10
	MaxTiers          = 64
	MaxSlidingLog     = 1000 // sliding_log keeps one timestamp per request
	MaxConcurrency    = 1000 // a concurrency limit keeps one lease per slot
	MaxLimit          = 1_000_000_000_000
	MinPeriod         = time.Millisecond
	MaxPeriod         = 366 * 24 * time.Hour
	MinPasswordLength = 12
	maxPasswordBytes  = 1024 // bounds the hashing work one request can cause
	maxEmailLength    = 254
	maxPathLength     = 1024
	maxQueryParams    = 20
	maxQueryLength    = 256
	maxKeyNameLength  = 128
	maxOverrides      = 100
	maxReasonLength   = 500
	maxIdentityLength = 256
)

var (
	tenantNameRE = regexp.MustCompile(`^[a-z0-9_.\- ]{1,64}$`)
	policyNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	tierNameRE   = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	limitNameRE  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	paramNameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

var methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

var algorithms = []string{TokenBucket, SlidingWindow, SlidingLog, FixedWindow, Concurrency}

func invalid(field, format string, args ...any) *errs.Error {
	return errs.Errorf(errs.Invalid, "%s: %s", field, fmt.Sprintf(format, args...))
}

// ValidateTenantName checks a tenant's name: 1 to 64 characters of a-z,
// 0-9, "-", "_", "." and space, not starting or ending with a space.
func ValidateTenantName(name string) error {
	switch {
	case name == "":
		return invalid("name", "required")
	case !tenantNameRE.MatchString(name):
		return invalid("name", "must be 1 to 64 characters of a-z, 0-9, -, _, . and space")
	case strings.TrimSpace(name) != name:
		return invalid("name", "must not start or end with a space")
	}
	return nil
}

// NormalizeEmail returns the form emails are stored and looked up in.
func NormalizeEmail(email string) string {
	return strings.ToLower(strings.TrimSpace(email))
}

// ValidateEmail checks a bare address such as "ada@example.com" (no
// display name), after NormalizeEmail.
func ValidateEmail(email string) error { return validateEmail("email", email) }

func validateEmail(field, email string) error {
	email = NormalizeEmail(email)
	if email == "" {
		return invalid(field, "required")
	}
	if len(email) > maxEmailLength {
		return invalid(field, "must be at most %d characters", maxEmailLength)
	}
	a, err := mail.ParseAddress(email)
	if err != nil || a.Name != "" || a.Address != email {
		return invalid(field, "must be an email address such as ada@example.com")
	}
	return nil
}

// ValidatePassword checks a new password: at least MinPasswordLength
// characters.
func ValidatePassword(pw string) error { return validatePassword("password", pw) }

func validatePassword(field, pw string) error {
	if utf8.RuneCountInString(pw) < MinPasswordLength {
		return invalid(field, "must be at least %d characters", MinPasswordLength)
	}
	if len(pw) > maxPasswordBytes {
		return invalid(field, "must be at most %d bytes", maxPasswordBytes)
	}
	return nil
}

// ValidateNewTenant checks the fields of POST /v1/admin/tenants.
func ValidateNewTenant(name, ownerEmail, ownerPassword string) error {
	if err := ValidateTenantName(name); err != nil {
		return err
	}
	if err := validateEmail("owner_email", ownerEmail); err != nil {
		return err
	}
	return validatePassword("owner_password", ownerPassword)
}

// Validate checks the limit's own fields; messages name them without a
// prefix ("period: ...").
func (l LimitSpec) Validate() error { return l.validate("") }

func (l LimitSpec) validate(prefix string) error { return first(l.problems(prefix)) }

// problems lists what is wrong with each of the limit's fields, at most one
// problem a field.
func (l LimitSpec) problems(prefix string) []error {
	var out []error
	if l.Name != "" && !limitNameRE.MatchString(l.Name) {
		out = append(out, invalid(prefix+"name", "must be 1 to 32 characters of A-Z, a-z, 0-9, _ and -"))
	}
	switch {
	case l.Algorithm == "":
		out = append(out, invalid(prefix+"algorithm", "required"))
	case !slices.Contains(algorithms, l.Algorithm):
		out = append(out, invalid(prefix+"algorithm", "must be one of %s", strings.Join(algorithms, ", ")))
	}
	switch {
	case l.Limit < 1:
		out = append(out, invalid(prefix+"limit", "must be at least 1"))
	case l.Algorithm == SlidingLog && l.Limit > MaxSlidingLog:
		out = append(out, invalid(prefix+"limit", "must be at most %d for sliding_log", MaxSlidingLog))
	case l.Algorithm == Concurrency && l.Limit > MaxConcurrency:
		out = append(out, invalid(prefix+"limit", "must be at most %d for concurrency", MaxConcurrency))
	case l.Limit > MaxLimit:
		out = append(out, invalid(prefix+"limit", "must be at most %d", int64(MaxLimit)))
	}
	switch {
	case l.Per != "" && l.Per != PerKey && l.Per != PerCustomer:
		out = append(out, invalid(prefix+"per", "must be key or customer"))
	case l.PerCustomer() && l.Algorithm == Concurrency:
		out = append(out, invalid(prefix+"per", "must be key for a concurrency limit: a slot is held per caller"))
	}
	if l.Algorithm == Concurrency {
		return append(out, l.concurrencyProblems(prefix)...)
	}
	switch {
	case l.Calendar != "":
		if !slices.Contains(calendars, l.Calendar) {
			out = append(out, invalid(prefix+"calendar", "must be one of %s", strings.Join(calendars, ", ")))
		}
		if l.Algorithm != "" && l.Algorithm != FixedWindow {
			out = append(out, invalid(prefix+"algorithm", "must be fixed_window for a calendar limit: a counter that resets at the start of each %s", l.Calendar))
		}
		if l.Period != "" {
			out = append(out, invalid(prefix+"period", "must be empty with calendar: the calendar says when the count resets"))
		}
	case l.Period == "":
		out = append(out, invalid(prefix+"period", "required (or calendar: day, week, month or year)"))
	default:
		d, err := l.PeriodDuration()
		switch {
		case err != nil:
			out = append(out, invalid(prefix+"period", `must be a duration such as "60s" or "1m"`))
		case d < MinPeriod:
			out = append(out, invalid(prefix+"period", "must be at least 1ms"))
		case d > MaxPeriod:
			out = append(out, invalid(prefix+"period", "must be at most 366d"))
		}
	}
	switch {
	case l.Burst < 0:
		out = append(out, invalid(prefix+"burst", "must not be negative"))
	case l.Burst > 0 && l.Algorithm != TokenBucket:
		out = append(out, invalid(prefix+"burst", "only token_bucket takes a burst"))
	case l.Burst > MaxLimit:
		out = append(out, invalid(prefix+"burst", "must be at most %d", int64(MaxLimit)))
	}
	return out
}

// concurrencyProblems are a concurrency limit's problems beyond its name,
// algorithm and limit: it counts requests in flight, so it takes no
// period, calendar or burst.
func (l LimitSpec) concurrencyProblems(prefix string) []error {
	var out []error
	if l.Period != "" {
		out = append(out, invalid(prefix+"period", "must be empty for algorithm concurrency: a slot is held until its lease is released or expires"))
	}
	if l.Calendar != "" {
		out = append(out, invalid(prefix+"calendar", "must be empty for algorithm concurrency"))
	}
	if l.Burst != 0 {
		out = append(out, invalid(prefix+"burst", "only token_bucket takes a burst"))
	}
	return out
}

// HasConcurrency reports whether ls holds a concurrency limit.
func (ls Limits) HasConcurrency() bool {
	for _, l := range ls {
		if l.Algorithm == Concurrency {
			return true
		}
	}
	return false
}

// concurrencyField is the JSON path of the algorithm of ls's first
// concurrency limit, named as limitsProblems names its fields, or "".
func (ls Limits) concurrencyField(field string) string {
	for i, l := range ls {
		if l.Algorithm != Concurrency {
			continue
		}
		if len(ls) == 1 && l.Name == "" {
			return field + ".algorithm"
		}
		return fmt.Sprintf("%s[%d].algorithm", field, i)
	}
	return ""
}

// ConcurrencyField is the JSON path of the algorithm of p's first
// concurrency limit, tiers by name ("tiers.pro[1].algorithm"), or "" when
// p holds none.
func (p Policy) ConcurrencyField() string {
	for _, name := range sortedKeys(p.Tiers) {
		if f := p.Tiers[name].concurrencyField("tiers." + name); f != "" {
			return f
		}
	}
	return ""
}

// OverridesConcurrencyField is ConcurrencyField for a consumer key's
// overrides, policies by name ("overrides.search.algorithm").
func OverridesConcurrencyField(overrides map[string]Limits) string {
	for _, name := range sortedKeys(overrides) {
		if f := overrides[name].concurrencyField("overrides." + name); f != "" {
			return f
		}
	}
	return ""
}

// first is the first of problems, or nil.
func first(problems []error) error {
	if len(problems) == 0 {
		return nil
	}
	return problems[0]
}

// ValidateLimits checks one tier's (or override's) limits; field is its
// JSON path, such as "tiers.pro".
func ValidateLimits(field string, ls Limits) error { return first(limitsProblems(field, ls)) }

// LimitsProblems lists every problem of one tier's (or override's) limits,
// for a form that shows them all at once; ValidateLimits is the first.
func LimitsProblems(field string, ls Limits) []error { return limitsProblems(field, ls) }

// limitsProblems lists every problem of one tier's limits.
func limitsProblems(field string, ls Limits) []error {
	switch {
	case len(ls) == 0:
		return []error{invalid(field, "must hold at least one limit")}
	case len(ls) > MaxLimitsPerTier:
		return []error{invalid(field, "must hold at most %d limits", MaxLimitsPerTier)}
	}
	if len(ls) == 1 && ls[0].Name == "" {
		return ls[0].problems(field + ".")
	}
	var out []error
	seen := make(map[string]bool, len(ls))
	for i, l := range ls {
		f := fmt.Sprintf("%s[%d].", field, i)
		switch {
		case l.Name == "":
			out = append(out, invalid(f+"name", "required when a tier holds several limits"))
		case seen[l.Name]:
			out = append(out, invalid(f+"name", "%q is used twice", l.Name))
		}
		seen[l.Name] = true
		for _, e := range l.problems(f) {
			if len(out) == 0 || fieldOf(out[len(out)-1]) != fieldOf(e) { // one problem a field
				out = append(out, e)
			}
		}
	}
	return out
}

// fieldOf is the field an invalid() error names.
func fieldOf(err error) string {
	field, _, _ := strings.Cut(errs.Message(err), ": ")
	return field
}

// Normalize fills a policy's defaults: method "*" when empty, upper-case
// otherwise; consistency "exact" when empty; no query map when it is empty.
func (p *Policy) Normalize() {
	p.Method = strings.ToUpper(p.Method)
	if p.Method == "" {
		p.Method = MethodAny
	}
	if p.Consistency == "" {
		p.Consistency = ConsistencyExact
	}
	if p.UnlistedTiers == "" {
		p.UnlistedTiers = UnlistedAllow
	}
	if len(p.Query) == 0 {
		p.Query = nil
	}
}

// Validate checks the policy's fields as Normalize would leave them. ID,
// TenantID and the times are the store's and are not checked.
func (p Policy) Validate() error { return first(p.Problems()) }

// Problems lists everything wrong with the policy, at most one problem a
// field, in the order of the policy's JSON (tiers by name); Validate
// returns the first. A form shows them all at once.
func (p Policy) Problems() []error {
	p.Normalize()
	var out []error
	add := func(err error) {
		if err != nil {
			out = append(out, err)
		}
	}
	if p.Descriptor != nil {
		return p.descriptorProblems()
	}
	switch {
	case p.Name == "":
		add(invalid("name", "required"))
	case !policyNameRE.MatchString(p.Name):
		add(invalid("name", "must be 1 to 64 characters of A-Z, a-z, 0-9, ., _ and -"))
	}
	if p.Method != MethodAny && !slices.Contains(methods, p.Method) {
		add(invalid("method", "must be * or one of %s", strings.Join(methods, ", ")))
	}
	add(ValidatePathPattern("path", p.Path))
	add(queryProblem(p.Query))
	if p.Consistency != ConsistencyExact && p.Consistency != ConsistencyLocal {
		add(invalid("consistency", "must be exact or local"))
	}
	if p.Consistency == ConsistencyLocal && p.hasConcurrency() {
		add(invalid("consistency", "must be exact for a policy with a concurrency limit: one owner holds a bucket's slots"))
	}
	if p.UnlistedTiers != UnlistedAllow && p.UnlistedTiers != UnlistedDeny {
		add(invalid("unlisted_tiers", "must be allow or deny"))
	}
	switch {
	case len(p.Tiers) == 0:
		add(invalid("tiers", "must hold at least one tier"))
	case len(p.Tiers) > MaxTiers:
		add(invalid("tiers", "must hold at most %d tiers", MaxTiers))
	}
	for _, name := range sortedKeys(p.Tiers) {
		if !tierNameRE.MatchString(name) {
			add(invalid("tiers", "tier name %q must be 1 to 32 characters of a-z, 0-9, _ and -", name))
			continue
		}
		out = append(out, limitsProblems("tiers."+name, p.Tiers[name])...)
		switch {
		case p.Consistency == ConsistencyLocal:
			out = append(out, perKeyOnly("tiers."+name, p.Tiers[name], "for a local policy: a customer's limit is decided by one owner")...)
		case name == TierAnonymous:
			out = append(out, perKeyOnly("tiers."+name, p.Tiers[name], "for the anonymous tier: a caller known by its IP has no customer")...)
		case p.Tiers[name].HasConcurrency():
			out = append(out, perKeyOnly("tiers."+name, p.Tiers[name], "in a tier with a concurrency limit: its slots are held per caller")...)
		}
	}
	return out
}

// TierAnonymous is the tier of callers known by their IP.
const TierAnonymous = "anonymous"

// perKeyOnly lists a problem for each limit of ls (the limits at field)
// counted per customer where only per-key limits may be, why saying so.
func perKeyOnly(field string, ls Limits, why string) []error {
	var out []error
	for i, l := range ls {
		if !l.PerCustomer() {
			continue
		}
		f := fmt.Sprintf("%s[%d].per", field, i)
		if len(ls) == 1 && l.Name == "" {
			f = field + ".per"
		}
		out = append(out, invalid(f, "must be key %s", why))
	}
	return out
}

// hasConcurrency reports whether a tier of p holds a concurrency limit.
func (p Policy) hasConcurrency() bool {
	for _, ls := range p.Tiers {
		if ls.HasConcurrency() {
			return true
		}
	}
	return false
}

// queryProblem is the first problem of a policy's query parameters.
func queryProblem(q map[string]string) error {
	if len(q) > maxQueryParams {
		return invalid("query", "must hold at most %d parameters", maxQueryParams)
	}
	for _, k := range sortedKeys(q) {
		v := q[k]
		switch {
		case k == "":
			return invalid("query", "parameter names must not be empty")
		case len(k) > maxQueryLength:
			return invalid("query", "parameter names must be at most %d bytes", maxQueryLength)
		case v == "":
			return invalid("query."+k, "must not be empty")
		case len(v) > maxQueryLength:
			return invalid("query."+k, "must be at most %d bytes", maxQueryLength)
		}
	}
	return nil
}

// ValidatePathPattern checks a policy path pattern: it starts with "/",
// and its segments are literals, ":name" parameters, or a final "*".
// Literals are written decoded (requests are percent-decoded before they
// are matched), and empty or dot segments are refused because a normalized
// request never contains them, so such a pattern could never match.
func ValidatePathPattern(field, path string) error {
	switch {
	case path == "":
		return invalid(field, "required")
	case len(path) > maxPathLength:
		return invalid(field, "must be at most %d bytes", maxPathLength)
	case path[0] != '/':
		return invalid(field, `must start with "/"`)
	case path == "/":
		return nil
	}
	segs := strings.Split(path[1:], "/")
	params := map[string]bool{}
	for i, seg := range segs {
		switch {
		case seg == "":
			return invalid(field, `must not hold empty segments or end with "/"`)
		case seg == "*":
			if i != len(segs)-1 {
				return invalid(field, `"*" may only be the last segment`)
			}
		case seg[0] == ':':
			if !paramNameRE.MatchString(seg[1:]) {
				return invalid(field, "parameter %q must be : followed by a name of letters, digits and _", seg)
			}
			if params[seg] {
				return invalid(field, "parameter %q is used twice", seg)
			}
			params[seg] = true
		case seg == "." || seg == "..":
			return invalid(field, "must not hold . or .. segments")
		default:
			if strings.ContainsAny(seg, "*?#%") {
				return invalid(field, `segment %q must not contain "*", "?", "#" or "%%"`, seg)
			}
			if strings.ContainsFunc(seg, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) || !utf8.ValidString(seg) {
				return invalid(field, "segment %q must not contain spaces or control characters", seg)
			}
		}
	}
	return nil
}

// ValidateTier checks a tier name: 1 to 32 characters of a-z, 0-9, _ and -.
func ValidateTier(field, tier string) error {
	switch {
	case tier == "":
		return invalid(field, "required")
	case !tierNameRE.MatchString(tier):
		return invalid(field, "must be 1 to 32 characters of a-z, 0-9, _ and -")
	}
	return nil
}

func validateKeyName(name string) error { return validateName("name", name) }

// validateName checks a consumer key's or customer's name: not blank, at
// most maxKeyNameLength characters, no control characters.
func validateName(field, name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return invalid(field, "required")
	case utf8.RuneCountInString(name) > maxKeyNameLength:
		return invalid(field, "must be at most %d characters", maxKeyNameLength)
	case !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl):
		return invalid(field, "must not contain control characters")
	}
	return nil
}

func validateFuture(field string, t *time.Time, now time.Time) error {
	if t != nil && !t.After(now) {
		return invalid(field, "must be in the future")
	}
	return nil
}

// ValidateOverrides checks a consumer key's overrides: policy names mapped
// to valid limits. Whether the policies exist is the store's check.
func ValidateOverrides(overrides map[string]Limits) error {
	if len(overrides) > maxOverrides {
		return invalid("overrides", "must hold at most %d policies", maxOverrides)
	}
	for _, name := range sortedKeys(overrides) {
		if !policyNameRE.MatchString(name) {
			return invalid("overrides", "%q is not a policy name", name)
		}
		if err := ValidateLimits("overrides."+name, overrides[name]); err != nil {
			return err
		}
		if err := first(perKeyOnly("overrides."+name, overrides[name], "in an override: it replaces one caller's tier")); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks the fields a client sets on a consumer key: name, tier,
// expires_at (in the future at now) and overrides.
func (k ConsumerKey) Validate(now time.Time) error {
	if err := validateKeyName(k.Name); err != nil {
		return err
	}
	if err := ValidateTier("tier", k.Tier); err != nil {
		return err
	}
	if err := validateFuture("expires_at", k.ExpiresAt, now); err != nil {
		return err
	}
	return ValidateOverrides(k.Overrides)
}

// Validate checks the fields the patch sets.
func (p KeyPatch) Validate(now time.Time) error {
	if p.Name != nil {
		if err := validateKeyName(*p.Name); err != nil {
			return err
		}
	}
	if p.Tier != nil {
		if err := ValidateTier("tier", *p.Tier); err != nil {
			return err
		}
	}
	if p.ExpiresAt != nil && p.ClearExpiry {
		return invalid("expires_at", "set a time or null, not both")
	}
	if err := validateFuture("expires_at", p.ExpiresAt, now); err != nil {
		return err
	}
	if p.BillingAnchor != nil {
		if err := ValidateBillingAnchor("billing_anchor", *p.BillingAnchor); err != nil {
			return err
		}
	}
	if p.Overrides != nil {
		return ValidateOverrides(*p.Overrides)
	}
	return nil
}

// ValidateIdentity checks an identity; an IP must be an IPv4 or IPv6
// literal without a zone.
func ValidateIdentity(field string, id Identity) error {
	switch id.Kind {
	case IdentityIP, IdentityKey, IdentityJWT:
	case "":
		return invalid(field+".kind", "required")
	default:
		return invalid(field+".kind", "must be ip, key or jwt")
	}
	switch {
	case id.ID == "":
		return invalid(field+".id", "required")
	case len(id.ID) > maxIdentityLength:
		return invalid(field+".id", "must be at most %d bytes", maxIdentityLength)
	}
	if id.Kind == IdentityIP {
		a, err := netip.ParseAddr(id.ID)
		if err != nil || a.Zone() != "" {
			return invalid(field+".id", "must be an IPv4 or IPv6 address")
		}
	}
	return nil
}

// NormalizeIdentity writes an IP in its canonical form (IPv4-mapped IPv6
// addresses as IPv4, IPv6 compressed and lower-case), so one address has
// one spelling. Other identities are returned unchanged.
func NormalizeIdentity(id Identity) Identity {
	if id.Kind == IdentityIP {
		if a, err := netip.ParseAddr(id.ID); err == nil && a.Zone() == "" {
			id.ID = a.Unmap().String()
		}
	}
	return id
}

// Validate checks a block's tenant, identity, reason (at most 500
// characters) and expiry (in the future at now).
func (b Block) Validate(now time.Time) error {
	if b.TenantID == "" {
		return invalid("tenant_id", "required")
	}
	if err := ValidateIdentity("identity", b.Identity); err != nil {
		return err
	}
	if utf8.RuneCountInString(b.Reason) > maxReasonLength {
		return invalid("reason", "must be at most %d characters", maxReasonLength)
	}
	return validateFuture("expires_at", b.ExpiresAt, now)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
