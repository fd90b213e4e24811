package limitsfile

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/tenants"
)

// State is what a tenant has now, as the API lists it.
type State struct {
	Policies []tenants.Policy
	// Keys are the tenant's consumer keys; revoked ones are ignored.
	Keys []tenants.ConsumerKey
	// Blocks are the tenant's blocks; expired ones are ignored. Read only
	// when the file has a blocks section.
	Blocks []tenants.Block
}

// Action is what a plan does to one object.
type Action int

// Actions, in the order a plan lists them.
const (
	Create Action = iota
	Update
	Replace // create again, then delete the old one: blocks have no update
	Delete
	NotInFile // left alone: the file does not name it and pruning is off
)

var actionMarks = map[Action]string{Create: "+", Update: "~", Replace: "-/+", Delete: "-", NotInFile: "?"}

// FieldChange is one field of one object: Old is empty for a created
// object, New for a deleted one.
type FieldChange struct {
	Field, Old, New string
}

// Change is one object the plan creates, changes, deletes or leaves.
type Change struct {
	Kind   string // "policy", "key" or "block"
	Name   string // how the change names the object: policy name, key id, identity
	Action Action
	Fields []FieldChange

	// What applying it takes: the server's id (Update, Replace, Delete)
	// and the desired object.
	ID     string
	Policy tenants.Policy
	Patch  tenants.KeyPatch
	Block  tenants.Block
}

// Plan is the difference between a file and a tenant's state.
type Plan struct {
	Changes []Change
}

// Counts answers how many objects the plan creates, changes (updates or
// replaces), deletes, and leaves alone as not in the file.
func (p Plan) Counts() (create, change, del, notInFile int) {
	for _, c := range p.Changes {
		switch c.Action {
		case Create:
			create++
		case Update, Replace:
			change++
		case Delete:
			del++
		case NotInFile:
			notInFile++
		}
	}
	return
}

// Empty reports whether applying the plan would change nothing.
func (p Plan) Empty() bool {
	c, u, d, _ := p.Counts()
	return c+u+d == 0
}

// Diff compares f with the tenant's state. With prune, objects the file
// does not name are deleted (keys lose their overrides: keys themselves
// are never revoked by a file); without it they are listed as NotInFile.
// A key the file names that the tenant does not have is a problem of the
// file, reported with its line. Blocks expired at now count as gone.
func Diff(f *File, s State, prune bool, now time.Time) (Plan, error) {
	var plan Plan
	policies, live := diffPolicies(f, s, prune)
	plan.Changes = append(plan.Changes, policies...)
	if f.HasKeys {
		keys, probs := diffKeys(f, s, prune, live)
		if len(probs) > 0 {
			return Plan{}, probs
		}
		plan.Changes = append(plan.Changes, keys...)
	}
	if f.HasBlocks {
		plan.Changes = append(plan.Changes, diffBlocks(f, s, prune, now)...)
	}
	slices.SortStableFunc(plan.Changes, func(a, b Change) int {
		return cmp.Or(cmp.Compare(kindOrder[a.Kind], kindOrder[b.Kind]), cmp.Compare(a.Action, b.Action), cmp.Compare(a.Name, b.Name))
	})
	return plan, nil
}

// diffPolicies compares the file's policies with the tenant's. live keeps
// of a key's overrides those naming a policy the tenant has or the file
// names: an override naming a policy that is gone is inert on the server
// (it applies again if a policy of that name comes back); it is not what
// the file manages, so it takes no part in the comparison.
func diffPolicies(f *File, s State, prune bool) (changes []Change, live func(map[string]tenants.Limits) map[string]tenants.Limits) {
	current := map[string]tenants.Policy{}
	for _, p := range s.Policies {
		current[p.Name] = p
	}
	named := map[string]bool{}
	for _, want := range f.Policies {
		named[want.Name] = true
		have, ok := current[want.Name]
		if !ok {
			changes = append(changes, Change{Kind: "policy", Name: want.Name, Action: Create, Fields: diffFields(nil, policyFields(want)), Policy: want})
			continue
		}
		if fs := diffFields(policyFields(have), policyFields(want)); len(fs) > 0 {
			changes = append(changes, Change{Kind: "policy", Name: want.Name, Action: Update, Fields: fs, ID: have.ID, Policy: want})
		}
	}
	for _, have := range s.Policies {
		if named[have.Name] {
			continue
		}
		c := Change{Kind: "policy", Name: have.Name, Action: NotInFile, ID: have.ID}
		if prune {
			c.Action, c.Fields = Delete, diffFields(policyFields(have), nil)
		}
		changes = append(changes, c)
	}
	live = func(ov map[string]tenants.Limits) map[string]tenants.Limits {
		out := map[string]tenants.Limits{}
		for name, ls := range ov {
			if _, ok := current[name]; ok || named[name] {
				out[name] = ls
			}
		}
		return out
	}
	return changes, live
}

// diffKeys compares the file's keys with the tenant's active ones: a key
// the file names that the tenant does not have is a problem of the file.
// A key the file does not name loses its live overrides with prune.
func diffKeys(f *File, s State, prune bool, live func(map[string]tenants.Limits) map[string]tenants.Limits) (changes []Change, probs Problems) {
	active := map[string]tenants.ConsumerKey{}
	for _, k := range s.Keys {
		if k.RevokedAt == nil {
			active[k.ID] = k
		}
	}
	inFile := map[string]bool{}
	for i, want := range f.Keys {
		inFile[want.ID] = true
		have, ok := active[want.ID]
		if !ok {
			field := fmt.Sprintf("keys[%d].id", i)
			probs = append(probs, Problem{File: f.Name, Line: f.line(field), Field: field, Message: fmt.Sprintf("the tenant has no active consumer key %q (keys are made with sluice keys create)", want.ID)})
			continue
		}
		if c, ok := diffKey(have, want, live); ok {
			changes = append(changes, c)
		}
	}
	for _, have := range s.Keys {
		ov := live(have.Overrides)
		if have.RevokedAt != nil || inFile[have.ID] || len(ov) == 0 {
			continue // a key without overrides holds no limits to prune
		}
		c := Change{Kind: "key", Name: keyName(have), Action: NotInFile, ID: have.ID}
		if prune {
			empty := map[string]tenants.Limits{}
			c.Action, c.Patch.Overrides = Update, &empty
			c.Fields = diffFields(overrideFields(ov), nil)
		}
		changes = append(changes, c)
	}
	return changes, probs
}

// diffKey is the update that makes the tenant's key have what the file's
// want says, if it needs one.
func diffKey(have tenants.ConsumerKey, want Key, live func(map[string]tenants.Limits) map[string]tenants.Limits) (Change, bool) {
	var patch tenants.KeyPatch
	var fs []FieldChange
	if want.Name != "" && want.Name != have.Name {
		patch.Name = &want.Name
		fs = append(fs, FieldChange{"name", have.Name, want.Name})
	}
	if want.Tier != "" && want.Tier != have.Tier {
		patch.Tier = &want.Tier
		fs = append(fs, FieldChange{"tier", have.Tier, want.Tier})
	}
	if want.Customer != "" && want.Customer != have.CustomerID {
		patch.CustomerID = &want.Customer
		fs = append(fs, FieldChange{"customer", have.CustomerID, want.Customer})
	}
	if ofs := diffFields(overrideFields(live(have.Overrides)), overrideFields(want.Overrides)); len(ofs) > 0 {
		ov := maps.Clone(want.Overrides)
		if ov == nil {
			ov = map[string]tenants.Limits{}
		}
		patch.Overrides = &ov
		fs = append(fs, ofs...)
	}
	if len(fs) == 0 {
		return Change{}, false
	}
	return Change{Kind: "key", Name: keyName(have), Action: Update, Fields: fs, ID: have.ID, Patch: patch}, true
}

// diffBlocks compares the file's blocks with the tenant's active ones. An
// identity may hold several blocks (the API allows it, and an apply
// stopped between a replace's create and its delete leaves two). The file
// names one block per identity: one that matches is kept, or the newest
// is replaced, and the others are deleted.
func diffBlocks(f *File, s State, prune bool, now time.Time) (changes []Change) {
	have := map[tenants.Identity][]tenants.Block{}
	for _, b := range s.Blocks {
		if b.Active(now) {
			id := tenants.NormalizeIdentity(b.Identity)
			have[id] = append(have[id], b)
		}
	}
	inFile := map[tenants.Identity]bool{}
	for _, want := range f.Blocks {
		id := tenants.NormalizeIdentity(want.Identity)
		inFile[id] = true
		nb := tenants.Block{Identity: id, Reason: want.Reason, ExpiresAt: want.ExpiresAt}
		blocks := have[id]
		if len(blocks) == 0 {
			changes = append(changes, Change{Kind: "block", Name: identityName(id), Action: Create, Fields: diffFields(nil, blockFields(nb)), Block: nb})
			continue
		}
		keep := slices.IndexFunc(blocks, func(b tenants.Block) bool {
			return len(diffFields(blockFields(b), blockFields(nb))) == 0
		})
		if keep < 0 {
			keep = 0
			changes = append(changes, Change{Kind: "block", Name: identityName(id), Action: Replace,
				Fields: diffFields(blockFields(blocks[0]), blockFields(nb)), ID: blocks[0].ID, Block: nb})
		}
		for i, b := range blocks {
			if i != keep {
				changes = append(changes, Change{Kind: "block", Name: identityName(id) + " (another block, " + b.ID + ")",
					Action: Delete, Fields: diffFields(blockFields(b), nil), ID: b.ID})
			}
		}
	}
	for _, b := range s.Blocks {
		id := tenants.NormalizeIdentity(b.Identity)
		if !b.Active(now) || inFile[id] {
			continue
		}
		c := Change{Kind: "block", Name: identityName(id), Action: NotInFile, ID: b.ID}
		if prune {
			c.Action, c.Fields = Delete, diffFields(blockFields(b), nil)
		}
		changes = append(changes, c)
	}
	return changes
}

var kindOrder = map[string]int{"policy": 0, "key": 1, "block": 2}

func keyName(k tenants.ConsumerKey) string {
	if k.Name == "" {
		return k.ID
	}
	return fmt.Sprintf("%s (%s)", k.ID, k.Name)
}

func identityName(id tenants.Identity) string { return id.Kind + " " + id.ID }

// field is one flattened field of an object: show is how it prints, key
// what it is compared by (a period by its duration, so "60s" equals "1m").
type field struct {
	name, show, key string
}

func plain(name, v string) field { return field{name, v, v} }

func policyFields(p tenants.Policy) []field {
	p.Normalize()
	out := []field{plain("method", p.Method), plain("path", p.Path)}
	for _, k := range sortedKeys(p.Query) {
		out = append(out, plain("query."+k, p.Query[k]))
	}
	out = append(out, plain("consistency", p.Consistency), plain("shadow", strconv.FormatBool(p.Shadow)), plain("unlisted_tiers", p.UnlistedTiers))
	for _, t := range sortedKeys(p.Tiers) {
		out = append(out, limitsFields("tiers."+t, p.Tiers[t])...)
	}
	if d := p.Descriptor; d != nil {
		out = append(out, descriptorFields(d)...)
	}
	return out
}

// descriptorFields flattens a descriptor node's rule (its limits are the
// tiers); a field a node does not set is left out.
func descriptorFields(d *tenants.DescriptorRule) []field {
	out := []field{plain("descriptor.domain", d.Domain), plain("descriptor.limited", strconv.FormatBool(d.Limited))}
	add := func(name, v string) {
		if v != "" && v != "false" && v != "0" {
			out = append(out, plain("descriptor."+name, v))
		}
	}
	for i, e := range d.Path {
		add("path["+strconv.Itoa(i)+"]", e.Key+"="+e.Value)
	}
	add("unit", d.Unit)
	add("requests_per_unit", strconv.FormatUint(uint64(d.RequestsPerUnit), 10))
	add("unlimited", strconv.FormatBool(d.Unlimited))
	add("rule_name", d.RuleName)
	add("replaces", strings.Join(d.Replaces, ", "))
	add("quota_mode", strconv.FormatBool(d.QuotaMode))
	add("detailed_metric", strconv.FormatBool(d.DetailedMetric))
	add("value_to_metric", strconv.FormatBool(d.ValueToMetric))
	add("share_threshold", strconv.FormatBool(d.ShareThreshold))
	add("metadata", d.Metadata)
	add("extras", strconv.FormatBool(d.Extras))
	add("denied_uncounted", strconv.FormatBool(d.DeniedUncounted))
	add("order", strconv.Itoa(d.Order))
	return out
}

func overrideFields(ov map[string]tenants.Limits) []field {
	var out []field
	for _, name := range sortedKeys(ov) {
		out = append(out, limitsFields("overrides."+name, ov[name])...)
	}
	return out
}

// limitsFields flattens a tier's limits: a lone unnamed limit's fields
// under the tier ("tiers.pro.limit"), several limits by name
// ("tiers.pro[daily].limit"), so reordering a list changes nothing.
func limitsFields(prefix string, ls tenants.Limits) []field {
	if len(ls) == 1 && ls[0].Name == "" {
		return limitFields(prefix, ls[0])
	}
	var out []field
	for _, l := range ls {
		out = append(out, limitFields(prefix+"["+l.Name+"]", l)...)
	}
	return out
}

func limitFields(prefix string, l tenants.LimitSpec) []field {
	period := field{prefix + ".period", l.Period, l.Period}
	if d, err := l.PeriodDuration(); err == nil {
		period.key = d.String()
	}
	out := []field{plain(prefix+".algorithm", l.Algorithm), plain(prefix+".limit", strconv.FormatInt(l.Limit, 10)), period}
	if l.Burst != 0 {
		out = append(out, plain(prefix+".burst", strconv.FormatInt(l.Burst, 10)))
	}
	if l.Calendar != "" {
		out = append(out, plain(prefix+".calendar", l.Calendar))
	}
	return out
}

func blockFields(b tenants.Block) []field {
	out := []field{plain("reason", b.Reason)}
	if b.ExpiresAt != nil {
		out = append(out, plain("expires_at", b.ExpiresAt.UTC().Format(time.RFC3339)))
	} else {
		out = append(out, plain("expires_at", "never"))
	}
	return out
}

// diffFields lists the fields that differ between old and new, in new's
// order and then old's; a field only one side has shows "(none)" on the
// other.
func diffFields(old, new []field) []FieldChange {
	olds := map[string]field{}
	for _, f := range old {
		olds[f.name] = f
	}
	news := map[string]bool{}
	var out []FieldChange
	for _, n := range new {
		news[n.name] = true
		o, ok := olds[n.name]
		switch {
		case !ok:
			out = append(out, FieldChange{n.name, "", n.show})
		case o.key != n.key:
			out = append(out, FieldChange{n.name, o.show, n.show})
		}
	}
	for _, o := range old {
		if !news[o.name] {
			out = append(out, FieldChange{o.name, o.show, ""})
		}
	}
	return out
}

// Write prints the plan for a person reading a terminal or a CI log: one
// line per object, marked "+" create, "~" change, "-/+" replace, "-"
// delete, "?" not in the file, with the fields that change under it.
func (p Plan) Write(w io.Writer) {
	for _, c := range p.Changes {
		switch c.Action {
		case NotInFile:
			what := "deletes it"
			if c.Kind == "key" {
				what = "removes its overrides"
			}
			fmt.Fprintf(w, "%s %s %s: not in file, left alone (--prune %s)\n", actionMarks[c.Action], c.Kind, c.Name, what)
			continue
		case Create:
			fmt.Fprintf(w, "%s %s %s: create\n", actionMarks[c.Action], c.Kind, c.Name)
		case Update:
			fmt.Fprintf(w, "%s %s %s: change\n", actionMarks[c.Action], c.Kind, c.Name)
		case Replace:
			fmt.Fprintf(w, "%s %s %s: replace\n", actionMarks[c.Action], c.Kind, c.Name)
		case Delete:
			fmt.Fprintf(w, "%s %s %s: delete\n", actionMarks[c.Action], c.Kind, c.Name)
		}
		width := 0
		for _, f := range c.Fields {
			width = max(width, len(f.Field))
		}
		for _, f := range c.Fields {
			pad := strings.Repeat(" ", width-len(f.Field))
			switch {
			case c.Action == Create:
				fmt.Fprintf(w, "    %s:%s %s\n", f.Field, pad, f.New)
			case c.Action == Delete:
				fmt.Fprintf(w, "    %s:%s %s\n", f.Field, pad, f.Old)
			default:
				fmt.Fprintf(w, "    %s:%s %s -> %s\n", f.Field, pad, orNone(f.Old), orNone(f.New))
			}
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Summary is the plan's closing line.
func (p Plan) Summary() string {
	c, u, d, n := p.Counts()
	s := fmt.Sprintf("%d to create, %d to change, %d to delete", c, u, d)
	if n > 0 {
		s += fmt.Sprintf(", %d not in file", n)
	}
	return s
}

// FromState is the file that describes state: what export writes. Keys
// and blocks are included when withKeys and withBlocks say so; revoked
// keys, expired blocks and overrides naming no policy are left out.
func FromState(s State, withKeys, withBlocks bool, now time.Time) *File {
	f := &File{Name: "export", Version: Version, Policies: slices.Clone(s.Policies), HasKeys: withKeys, HasBlocks: withBlocks}
	pols, tiers := map[string]bool{}, map[string]bool{}
	for i, p := range f.Policies {
		pols[p.Name] = true
		for t := range p.Tiers {
			tiers[t] = true
		}
		f.Policies[i] = tenants.Policy{Name: p.Name, Method: p.Method, Path: p.Path, Query: p.Query, Consistency: p.Consistency, Shadow: p.Shadow, Tiers: p.Tiers, UnlistedTiers: p.UnlistedTiers}
	}
	if withKeys {
		for _, k := range s.Keys {
			if k.RevokedAt != nil {
				continue
			}
			key := Key{ID: k.ID, Name: k.Name, Customer: k.CustomerID}
			if tiers[k.Tier] {
				// A tier no policy lists is left out (and so left as it
				// is by apply): the file refuses tiers it does not define.
				key.Tier = k.Tier
			}
			for name, ls := range k.Overrides {
				if pols[name] {
					if key.Overrides == nil {
						key.Overrides = map[string]tenants.Limits{}
					}
					key.Overrides[name] = ls
				}
			}
			f.Keys = append(f.Keys, key)
		}
	}
	if withBlocks {
		for _, b := range s.Blocks {
			if b.Active(now) {
				f.Blocks = append(f.Blocks, Block{Identity: b.Identity, Reason: b.Reason, ExpiresAt: b.ExpiresAt})
			}
		}
	}
	f.Normalize()
	return f
}
