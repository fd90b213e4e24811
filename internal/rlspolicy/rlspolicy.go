// Package rlspolicy turns a configuration file of Envoy's reference rate
// limit server (internal/rlsconf) into Sluice's policies and back: each
// node of a domain's descriptor tree is one policy with a
// tenants.DescriptorRule, named by its full key, so that the tree is
// stored, changed, audited and spread to every server as policies are.
//
// A rule's rate_limit becomes the policy's tier "default": a fixed window
// of requests_per_unit per unit (windows aligned at multiples of the unit
// since the unix epoch, as the reference aligns them), or Sluice's own
// algorithm and further limits when the node has a sluice: mapping.
package rlspolicy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/rlsconf"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Policies lists the policies of f's tree, one per node, parents before
// children, in the file's order. Each wildcard node records its place
// among its wildcard siblings (DescriptorRule.Order), since the first of
// them to match a value wins.
func Policies(f *rlsconf.File) ([]tenants.Policy, error) {
	var out []tenants.Policy
	var walk func(path []tenants.DescriptorEntry, ds []*rlsconf.Descriptor) error
	walk = func(path []tenants.DescriptorEntry, ds []*rlsconf.Descriptor) error {
		wild := 0
		for _, d := range ds {
			p := append(slices.Clip(path), tenants.DescriptorEntry{Key: d.Key, Value: d.Value})
			pol, err := policyOf(f.Domain, p, d)
			if err != nil {
				return err
			}
			if isWildcard(d.Key, d.Value) {
				pol.Descriptor.Order = wild
				wild++
			}
			out = append(out, pol)
			if err := walk(p, d.Descriptors); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(nil, f.Descriptors); err != nil {
		return nil, err
	}
	return out, nil
}

// isWildcard reports whether a node's key and value, as the reference
// joins them, hold a '*': the reference tries such nodes in order.
func isWildcard(key, value string) bool {
	return strings.Contains(key, "*") || strings.Contains(value, "*")
}

// policyOf is one node as a policy.
func policyOf(domain string, path []tenants.DescriptorEntry, d *rlsconf.Descriptor) (tenants.Policy, error) {
	r := &tenants.DescriptorRule{
		Domain: domain, Path: path,
		QuotaMode: d.QuotaMode, DetailedMetric: d.DetailedMetric, ValueToMetric: d.ValueToMetric, ShareThreshold: d.ShareThreshold,
	}
	if len(d.Metadata) > 0 {
		b, err := json.Marshal(d.Metadata)
		if err != nil {
			return tenants.Policy{}, fmt.Errorf("%s: metadata: %w", r.FullKey(), err)
		}
		r.Metadata = string(b)
	}
	p := tenants.Policy{Name: r.FullKey(), Shadow: d.ShadowMode, Descriptor: r, Consistency: tenants.ConsistencyExact}
	var specs []rlsconf.Spec
	if rl := d.RateLimit; rl != nil {
		r.Limited = true
		r.RuleName, r.Replaces, r.Unlimited = rl.Name, slices.Clone(rl.Replaces), rl.Unlimited
		if !rl.Unlimited {
			r.Unit, r.RequestsPerUnit = rl.Unit.String(), rl.RequestsPerUnit
			spec := rlsconf.Spec{RequestsPerUnit: rl.RequestsPerUnit, Unit: rl.Unit}
			if x := d.Sluice; x != nil {
				spec.Algorithm, spec.Burst = x.Algorithm, x.Burst
			}
			specs = append(specs, spec)
		}
	}
	if x := d.Sluice; x != nil {
		r.Extras = true
		r.Limited = true
		r.DeniedUncounted = x.Denied == rlsconf.DeniedUncounted
		specs = append(specs, x.Limits...)
		if x.Consistency == rlsconf.ConsistencyLocal {
			p.Consistency = tenants.ConsistencyLocal
		}
	}
	if len(specs) > 0 {
		ls := make(tenants.Limits, len(specs))
		for i, s := range specs {
			ls[i] = limitSpec(s, len(specs) > 1, i)
		}
		p.Tiers = map[string]tenants.Limits{tenants.TierDefault: ls}
	}
	return p, nil
}

// limitSpec is one rule limit as a policy limit. Several limits of one
// tier need names: an unnamed one is named by its place.
func limitSpec(s rlsconf.Spec, several bool, i int) tenants.LimitSpec {
	alg := string(s.Algorithm)
	if alg == "" {
		alg = string(rlsconf.FixedWindow)
	}
	name := s.Name
	if several && name == "" {
		name = "limit" + strconv.Itoa(i)
	}
	if s.Calendar != "" {
		return tenants.LimitSpec{Name: name, Algorithm: alg, Limit: int64(s.RequestsPerUnit), Calendar: s.Calendar}
	}
	return tenants.LimitSpec{Name: name, Algorithm: alg, Limit: int64(s.RequestsPerUnit), Period: strconv.FormatInt(s.Unit.Seconds(), 10) + "s", Burst: int64(s.Burst)}
}

// FromPolicies rebuilds a domain's file from its descriptor policies (any
// order). A node whose parent is missing, which a half-applied change can
// leave for a moment, hangs under a parent without a limit, as the tree
// the reference would read from the nodes present.
func FromPolicies(domain string, ps []tenants.Policy) (*rlsconf.File, error) {
	f := &rlsconf.File{Domain: domain}
	// Nodes are found by their parent and their own key and value, so a
	// domain of n nodes is built in O(n) map lookups, whatever its shape.
	type nodeKey struct {
		parent     *rlsconf.Descriptor // nil at the top
		key, value string
	}
	nodes := map[nodeKey]*rlsconf.Descriptor{}
	order := map[*rlsconf.Descriptor]int{}
	child := func(parent *rlsconf.Descriptor, e tenants.DescriptorEntry) *rlsconf.Descriptor {
		k := nodeKey{parent, e.Key, e.Value}
		if d := nodes[k]; d != nil {
			return d
		}
		d := &rlsconf.Descriptor{Key: e.Key, Value: e.Value}
		nodes[k] = d
		if parent == nil {
			f.Descriptors = append(f.Descriptors, d)
		} else {
			parent.Descriptors = append(parent.Descriptors, d)
		}
		return d
	}
	for _, p := range ps {
		r := p.Descriptor
		if r == nil || r.Domain != domain || len(r.Path) == 0 {
			continue
		}
		var d *rlsconf.Descriptor
		for _, e := range r.Path {
			d = child(d, e)
		}
		if err := fill(d, &p); err != nil {
			return nil, err
		}
		order[d] = r.Order
	}
	// Wildcard siblings in their stored order, whatever order the
	// policies came in (equal places keep it), in the places wildcards
	// hold among their siblings.
	var sortLevel func(ds []*rlsconf.Descriptor)
	sortLevel = func(ds []*rlsconf.Descriptor) {
		var at []int
		var wild []*rlsconf.Descriptor
		for i, d := range ds {
			if isWildcard(d.Key, d.Value) {
				at, wild = append(at, i), append(wild, d)
			}
			sortLevel(d.Descriptors)
		}
		slices.SortStableFunc(wild, func(a, b *rlsconf.Descriptor) int { return order[a] - order[b] })
		for k, i := range at {
			ds[i] = wild[k]
		}
	}
	sortLevel(f.Descriptors)
	return f, nil
}

// fill sets a node's fields from its policy.
func fill(d *rlsconf.Descriptor, p *tenants.Policy) error {
	r := p.Descriptor
	d.ShadowMode, d.QuotaMode, d.DetailedMetric, d.ValueToMetric, d.ShareThreshold = p.Shadow, r.QuotaMode, r.DetailedMetric, r.ValueToMetric, r.ShareThreshold
	if r.Metadata != "" {
		if err := json.Unmarshal([]byte(r.Metadata), &d.Metadata); err != nil {
			return fmt.Errorf("%s: metadata: %w", p.Name, err)
		}
	}
	if !r.Limited {
		return nil
	}
	rl := &rlsconf.RateLimit{Name: r.RuleName, Replaces: slices.Clone(r.Replaces), Unlimited: r.Unlimited}
	ls := p.Tiers[tenants.TierDefault]
	if !r.Extras {
		rl.RequestsPerUnit = r.RequestsPerUnit
		rl.Unit, _ = rlsconf.ParseUnit(r.Unit)
		d.RateLimit = rl
		return nil
	}
	x := &rlsconf.Extras{}
	if r.DeniedUncounted {
		x.Denied = rlsconf.DeniedUncounted
	}
	if p.Consistency == tenants.ConsistencyLocal {
		x.Consistency = rlsconf.ConsistencyLocal
	}
	if r.Unit != "" && len(ls) > 0 { // the rate_limit is the first limit
		rl.RequestsPerUnit = r.RequestsPerUnit
		rl.Unit, _ = rlsconf.ParseUnit(r.Unit)
		if a := rlsconf.Algorithm(ls[0].Algorithm); a != rlsconf.FixedWindow {
			x.Algorithm = a
		}
		x.Burst = uint32(ls[0].Burst)
		ls = ls[1:]
		d.RateLimit = rl
	} else if r.Unlimited || rl.Name != "" || len(rl.Replaces) > 0 {
		d.RateLimit = rl
	}
	for _, l := range ls {
		s := rlsconf.Spec{Name: l.Name, RequestsPerUnit: uint32(l.Limit), Burst: uint32(l.Burst)}
		if a := rlsconf.Algorithm(l.Algorithm); a != rlsconf.FixedWindow {
			s.Algorithm = a
		}
		if l.Calendar != "" {
			s.Calendar = l.Calendar
		} else if secs, err := l.PeriodDuration(); err == nil {
			s.Unit = unitOfSeconds(int64(secs.Seconds()))
		}
		x.Limits = append(x.Limits, s)
	}
	d.Sluice = x
	return nil
}

// unitOfSeconds is the unit of a period, UnitUnknown for none.
func unitOfSeconds(s int64) rlsconf.Unit {
	for u := rlsconf.Second; u <= rlsconf.Week; u++ {
		if u.Seconds() == s {
			return u
		}
	}
	return rlsconf.UnitUnknown
}
