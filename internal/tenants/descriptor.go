package tenants

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on descriptor rules (Envoy's rate limit service, docs/ENVOY.md).
const (
	// MaxDescriptorDepth bounds a rule's path, as the configuration file
	// bounds its nesting (rlsconf.MaxDepth) and a call its entries.
	MaxDescriptorDepth = 64
	// MaxDescriptorText bounds a domain, an entry's key or value, a rule's
	// name and each name it replaces: a call's entries are at most as long.
	MaxDescriptorText = 1024
	// MaxDescriptorNameLength bounds the name of a descriptor policy: its
	// full key, "<domain>.<key>_<value>.<key>…", as the reference server
	// names its statistics, and as the configuration file bounds it
	// (rlsconf.MaxFullKey).
	MaxDescriptorNameLength = 4096
	maxReplaces             = 16
	maxMetadataBytes        = 4096
	// maxDescriptorOrder bounds Order: a file holds at most 10 000 nodes.
	maxDescriptorOrder = 100_000
)

// DescriptorRule makes a policy one node of a domain's descriptor tree in
// the configuration format of Envoy's reference rate limit server
// (envoyproxy/ratelimit). A policy with a rule is matched by the gRPC
// ShouldRateLimit call, never by an HTTP check: its method, path and query
// are empty. Its limits are the tier "default" (the reference's
// rate_limit, a fixed window of requests_per_unit per unit, or Sluice's
// own algorithms); a node without limits only gives its children a place
// in the tree, or (Unlimited) answers OK without counting. The policy's
// Shadow is the node's shadow_mode and its Consistency applies as for any
// policy.
type DescriptorRule struct {
	Domain string `json:"domain"`
	// Path is the node's place in the tree: the key and value of each
	// level from the domain down to the node itself. A value may hold "*"
	// wildcards; an empty value matches any value of its key.
	Path []DescriptorEntry `json:"path"`
	// Limited: the node has a rate_limit (Unit and RequestsPerUnit, or
	// Unlimited). A node without one has no tiers.
	Limited         bool     `json:"limited"`
	Unit            string   `json:"unit,omitempty"` // SECOND … YEAR
	RequestsPerUnit uint32   `json:"requests_per_unit,omitempty"`
	Unlimited       bool     `json:"unlimited,omitempty"`
	RuleName        string   `json:"rule_name,omitempty"` // rate_limit.name
	Replaces        []string `json:"replaces,omitempty"`
	QuotaMode       bool     `json:"quota_mode,omitempty"`
	DetailedMetric  bool     `json:"detailed_metric,omitempty"`
	ValueToMetric   bool     `json:"value_to_metric,omitempty"`
	ShareThreshold  bool     `json:"share_threshold,omitempty"`
	// Metadata is the node's metadata, as JSON, returned to Envoy as the
	// reference does (bounded to 4 KiB).
	Metadata string `json:"metadata,omitempty"`
	// Extras: the node's limits were written with Sluice's own fields
	// (an algorithm, several limits): Tiers holds them, and an export to
	// the reference's format cannot say them.
	Extras bool `json:"extras,omitempty"`
	// DeniedUncounted: a request over the node's limits counts nothing
	// (sluice.denied: uncounted). Without it every request's hits count,
	// allowed or not, as in the reference.
	DeniedUncounted bool `json:"denied_uncounted,omitempty"`
	// Order is a wildcard node's place among its parent's wildcard nodes
	// (0 first): a descriptor value is tried against them in this order,
	// the file's, and the first that matches wins. Nodes of equal Order
	// keep the order they were created in.
	Order int `json:"order,omitempty"`
}

// DescriptorEntry is one level of a descriptor: a key and its value.
type DescriptorEntry struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

// DescriptorUnits are the reference's units, in order, with their length
// in seconds: fixed windows aligned at multiples of it since the unix
// epoch (a month is 30 days and a year 365, as the reference counts them).
var DescriptorUnits = []struct {
	Name    string
	Seconds int64
}{
	{"SECOND", 1}, {"MINUTE", 60}, {"HOUR", 3600}, {"DAY", 86400},
	{"WEEK", 7 * 86400}, {"MONTH", 30 * 86400}, {"YEAR", 365 * 86400},
}

// DescriptorUnitSeconds is the length of a unit ("minute" or "MINUTE"),
// 0 for an unknown one.
func DescriptorUnitSeconds(unit string) int64 {
	for _, u := range DescriptorUnits {
		if strings.EqualFold(u.Name, unit) {
			return u.Seconds
		}
	}
	return 0
}

// FullKey is the node's name as the reference names its statistics, and
// the name of its policy: "<domain>.<key>[_<value>].<key>[_<value>]…".
func (r *DescriptorRule) FullKey() string {
	var b strings.Builder
	b.WriteString(r.Domain)
	for _, e := range r.Path {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// descriptorText reports whether s is acceptable descriptor text:
// UTF-8, no control characters, at most MaxDescriptorText bytes.
func descriptorText(s string) bool {
	if len(s) > MaxDescriptorText || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// problems lists what is wrong with a descriptor policy: its rule, and
// the policy fields a rule leaves no room for.
func (r *DescriptorRule) problems(p *Policy) []error {
	var out []error
	add := func(field, format string, args ...any) {
		out = append(out, invalid("descriptor."+field, format, args...))
	}
	if r.Domain == "" {
		add("domain", "required")
	} else if !descriptorText(r.Domain) {
		add("domain", "must be at most %d bytes of text without control characters", MaxDescriptorText)
	}
	switch {
	case len(r.Path) == 0:
		add("path", "must hold at least one entry")
	case len(r.Path) > MaxDescriptorDepth:
		add("path", "must hold at most %d entries", MaxDescriptorDepth)
	}
	for i, e := range r.Path {
		if e.Key == "" {
			add("path["+itoa(i)+"].key", "required")
		} else if !descriptorText(e.Key) {
			add("path["+itoa(i)+"].key", "must be at most %d bytes of text without control characters", MaxDescriptorText)
		}
		if !descriptorText(e.Value) {
			add("path["+itoa(i)+"].value", "must be at most %d bytes of text without control characters", MaxDescriptorText)
		}
	}
	if r.ShareThreshold && len(r.Path) > 0 && !strings.Contains(r.Path[len(r.Path)-1].Key+"_"+r.Path[len(r.Path)-1].Value, "*") {
		add("share_threshold", "can only be used with wildcard values (containing '*')")
	}
	if r.Order < 0 || r.Order > maxDescriptorOrder {
		add("order", "must be between 0 and %d", maxDescriptorOrder)
	}
	if r.DeniedUncounted && !r.Limited {
		add("denied_uncounted", "needs a node with a rate limit")
	}
	if len(r.Metadata) > maxMetadataBytes {
		add("metadata", "must be at most %d bytes of JSON", maxMetadataBytes)
	}
	switch {
	case !r.Limited:
		if r.Unit != "" || r.RequestsPerUnit != 0 || r.Unlimited || r.RuleName != "" || len(r.Replaces) > 0 || r.Extras {
			add("limited", "must be true for a node with a unit, a limit, a name or replaces")
		}
		if len(p.Tiers) > 0 {
			out = append(out, invalid("tiers", "must be empty for a descriptor node without a rate limit"))
		}
	case r.Unlimited:
		if r.Unit != "" {
			add("unit", "should not specify rate limit unit when unlimited")
		}
		if len(p.Tiers) > 0 {
			out = append(out, invalid("tiers", "must be empty for an unlimited descriptor node"))
		}
	default:
		if r.Unit == "" && !r.Extras {
			add("unit", "required: one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR")
		} else if r.Unit != "" && DescriptorUnitSeconds(r.Unit) == 0 {
			add("unit", "invalid rate limit unit %q", r.Unit)
		}
		if len(p.Tiers) != 1 || len(p.Tiers[TierDefault]) == 0 {
			out = append(out, invalid("tiers", "must hold exactly the tier %q for a descriptor node with a rate limit", TierDefault))
		}
	}
	if r.RuleName != "" && !descriptorText(r.RuleName) {
		add("rule_name", "must be at most %d bytes of text without control characters", MaxDescriptorText)
	}
	if len(r.Replaces) > maxReplaces {
		add("replaces", "must name at most %d rules", maxReplaces)
	}
	for i, n := range r.Replaces {
		switch {
		case n == "":
			add("replaces["+itoa(i)+"]", "should not have an empty replaces entry")
		case n == r.RuleName:
			add("replaces["+itoa(i)+"]", "replaces should not contain name of same descriptor")
		case !descriptorText(n):
			add("replaces["+itoa(i)+"]", "must be at most %d bytes of text without control characters", MaxDescriptorText)
		}
	}
	if p.Method != MethodAny || p.Path != "" || len(p.Query) > 0 {
		out = append(out, invalid("path", "must be empty for a descriptor policy: Envoy's descriptors choose it, not the request path"))
	}
	if p.Name != r.FullKey() {
		out = append(out, invalid("name", "must be the descriptor's full key %q", truncate(r.FullKey(), 80)))
	}
	return out
}

// TierDefault is the tier every descriptor policy's limits are in.
const TierDefault = "default"

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func itoa(i int) string { return strconv.Itoa(i) }

// DescriptorPolicies are the tenant's policies of one domain, in p's order.
func DescriptorPolicies(ps []Policy, domain string) []Policy {
	return slices.DeleteFunc(slices.Clone(ps), func(p Policy) bool {
		return p.Descriptor == nil || p.Descriptor.Domain != domain
	})
}

// descriptorProblems is Problems for a descriptor policy (p.Descriptor
// set), as Normalize leaves it.
func (p Policy) descriptorProblems() []error {
	var out []error
	if len(p.Name) > MaxDescriptorNameLength {
		out = append(out, invalid("name", "the descriptor's full key must be at most %d bytes", MaxDescriptorNameLength))
	}
	if p.Consistency != ConsistencyExact && p.Consistency != ConsistencyLocal {
		out = append(out, invalid("consistency", "must be exact or local"))
	}
	if p.UnlistedTiers != UnlistedAllow {
		out = append(out, invalid("unlisted_tiers", "must be allow for a descriptor policy"))
	}
	out = append(out, p.Descriptor.problems(&p)...)
	if ls, ok := p.Tiers[TierDefault]; ok {
		if r := p.Descriptor; r.Unit != "" && r.RequestsPerUnit == 0 && len(ls) > 0 &&
			ls[0].Limit == 0 && ls[0].Algorithm == FixedWindow && ls[0].Calendar == "" {
			// requests_per_unit: 0, which the reference loads: a rule that
			// counts and admits nothing.
			ls = slices.Clone(ls)
			ls[0].Limit = 1
		}
		out = append(out, limitsProblems("tiers."+TierDefault, ls)...)
		out = append(out, perKeyOnly("tiers."+TierDefault, ls, "for a descriptor policy: a descriptor's caller has no customer")...)
		if ls.HasConcurrency() {
			out = append(out, invalid("tiers."+TierDefault+".algorithm", "must not be concurrency for a descriptor policy: Envoy's rate limit service has no call that gives a slot back"))
		}
	}
	return out
}
