package tenants

// What an audit entry says changed. Each audited object is flattened into
// an ordered list of (field, text) pairs, tiers and overrides included as
// paths ("pro › limit", "pro › daily › period"); a change is the pairs whose
// text differs between the object before and after it. Flat text keeps the
// entries readable as they are in SQLite and the same on every page that
// shows them, whatever the object looks like later.

import (
	"strconv"
	"strings"
	"time"
)

// field is one flattened field of an object.
type field struct{ name, value string }

// diffFields returns the fields whose value differs between before and
// after, in before's order and then after's new fields. An empty value is
// an absent field.
func diffFields(before, after []field) []FieldChange {
	old := make(map[string]string, len(before))
	for _, f := range before {
		old[f.name] = f.value
	}
	cur := make(map[string]string, len(after))
	for _, f := range after {
		cur[f.name] = f.value
	}
	var out []FieldChange
	for _, f := range before {
		if a := cur[f.name]; a != f.value {
			out = append(out, FieldChange{Field: f.name, Before: f.value, After: a})
		}
	}
	for _, f := range after {
		if _, ok := old[f.name]; !ok && f.value != "" {
			out = append(out, FieldChange{Field: f.name, After: f.value})
		}
	}
	return out
}

// created is every field of a new object, each as an "after".
func created(fs []field) []FieldChange { return diffFields(nil, fs) }

const pathSep = " › "

func policyFields(p Policy) []field {
	fs := []field{
		{"name", p.Name},
		{"method", p.Method},
		{"path", p.Path},
		{"query", queryText(p.Query)},
		{"consistency", p.Consistency},
		{"shadow", strconv.FormatBool(p.Shadow)},
		{"other tiers", p.UnlistedTiers},
	}
	if d := p.Descriptor; d != nil {
		fs = append(fs, descriptorFields(d)...)
	}
	for _, tier := range sortedKeys(p.Tiers) {
		fs = append(fs, limitsFields(tier, p.Tiers[tier])...)
	}
	return fs
}

// limitsFields flattens a tier's limits under prefix: a single unnamed
// limit directly ("pro › limit"), named ones by name ("pro › daily › limit"),
// unnamed ones of several by position.
func limitsFields(prefix string, ls Limits) []field {
	var fs []field
	for i, l := range ls {
		p := prefix
		switch {
		case l.Name != "":
			p += pathSep + l.Name
		case len(ls) > 1:
			p += pathSep + "#" + strconv.Itoa(i+1)
		}
		fs = append(fs,
			field{p + pathSep + "algorithm", l.Algorithm},
			field{p + pathSep + "limit", strconv.FormatInt(l.Limit, 10)},
			field{p + pathSep + "period", l.Period},
		)
		if l.Burst != 0 {
			fs = append(fs, field{p + pathSep + "burst", strconv.FormatInt(l.Burst, 10)})
		}
		if l.Calendar != "" {
			fs = append(fs, field{p + pathSep + "calendar", l.Calendar})
		}
	}
	return fs
}

func queryText(q map[string]string) string {
	parts := make([]string, 0, len(q))
	for _, k := range sortedKeys(q) {
		parts = append(parts, k+"="+q[k])
	}
	return strings.Join(parts, "&")
}

func consumerKeyFields(k ConsumerKey) []field {
	fs := []field{
		{"name", k.Name},
		{"tier", k.Tier},
		{"expires", optTimeText(k.ExpiresAt, "never")},
	}
	if k.BillingAnchor != 0 {
		fs = append(fs, field{"billing anchor", strconv.Itoa(k.BillingAnchor)})
	}
	if k.CustomerID != "" {
		fs = append(fs, field{"customer", k.CustomerID})
	}
	for _, name := range sortedKeys(k.Overrides) {
		fs = append(fs, limitsFields("overrides"+pathSep+name, k.Overrides[name])...)
	}
	return fs
}

func customerFields(c Customer) []field {
	fs := []field{{"external id", c.ExternalID}, {"name", c.Name}, {"tier", c.Tier}}
	if c.BillingAnchor != 0 {
		fs = append(fs, field{"billing anchor", strconv.Itoa(c.BillingAnchor)})
	}
	for _, name := range sortedKeys(c.Overrides) {
		fs = append(fs, limitsFields("overrides"+pathSep+name, c.Overrides[name])...)
	}
	for _, k := range sortedKeys(c.Metadata) {
		fs = append(fs, field{"metadata" + pathSep + k, c.Metadata[k]})
	}
	return fs
}

func blockFields(b Block) []field {
	return []field{
		{"caller", b.Identity.Kind + " " + b.Identity.ID},
		{"reason", b.Reason},
		{"expires", optTimeText(b.ExpiresAt, "never")},
	}
}

func optTimeText(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return t.UTC().Format(time.RFC3339)
}

// keyName is how a key appears in the log: its prefix, never more.
func keyName(prefix string) string { return prefix + "…" }

// consumerKeyName is a consumer key's name and prefix, as lists show it.
func consumerKeyName(k ConsumerKey) string {
	if k.Name == "" {
		return keyName(k.Prefix)
	}
	return k.Name + " (" + keyName(k.Prefix) + ")"
}

func identityText(id Identity) string { return id.Kind + " " + id.ID }

// descriptorFields lists what a descriptor policy's rule says beyond its
// limits, for the audit log.
func descriptorFields(d *DescriptorRule) []field {
	path := make([]string, len(d.Path))
	for i, e := range d.Path {
		path[i] = e.Key + "=" + e.Value
	}
	fs := []field{{"descriptor" + pathSep + "domain", d.Domain}, {"descriptor" + pathSep + "path", strings.Join(path, " / ")}}
	if d.Limited {
		fs = append(fs, field{"descriptor" + pathSep + "unit", d.Unit},
			field{"descriptor" + pathSep + "requests_per_unit", strconv.FormatUint(uint64(d.RequestsPerUnit), 10)},
			field{"descriptor" + pathSep + "unlimited", strconv.FormatBool(d.Unlimited)})
	}
	if d.RuleName != "" || len(d.Replaces) > 0 {
		fs = append(fs, field{"descriptor" + pathSep + "name", d.RuleName},
			field{"descriptor" + pathSep + "replaces", strings.Join(d.Replaces, ", ")})
	}
	flags := []string{}
	for _, f := range []struct {
		on   bool
		name string
	}{{d.QuotaMode, "quota_mode"}, {d.DetailedMetric, "detailed_metric"}, {d.ValueToMetric, "value_to_metric"}, {d.ShareThreshold, "share_threshold"}, {d.DeniedUncounted, "denied_uncounted"}} {
		if f.on {
			flags = append(flags, f.name)
		}
	}
	fs = append(fs, field{"descriptor" + pathSep + "options", strings.Join(flags, ", ")})
	if d.Metadata != "" {
		fs = append(fs, field{"descriptor" + pathSep + "metadata", d.Metadata})
	}
	if d.Order != 0 {
		fs = append(fs, field{"descriptor" + pathSep + "order", strconv.Itoa(d.Order)})
	}
	return fs
}
