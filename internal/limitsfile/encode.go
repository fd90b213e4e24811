package limitsfile

import (
	"bytes"
	"cmp"
	"slices"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/tenants"
)

// Header opens every file Marshal writes.
const Header = "# Sluice limits file: sluice apply -f FILE makes a tenant match it (docs/LIMITS.md).\n"

// Normalize puts a file in the form Marshal writes and export produces:
// policies sorted by name with their defaults filled in, keys sorted by id,
// blocks by identity. Two files that configure the same thing normalize to
// the same bytes, apart from periods, which keep their spelling.
func (f *File) Normalize() {
	for i := range f.Policies {
		f.Policies[i].Normalize()
	}
	slices.SortFunc(f.Policies, func(a, b tenants.Policy) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(f.Keys, func(a, b Key) int { return cmp.Compare(a.ID, b.ID) })
	for i := range f.Keys {
		if len(f.Keys[i].Overrides) == 0 {
			f.Keys[i].Overrides = nil
		}
	}
	for i := range f.Blocks {
		f.Blocks[i].Identity = tenants.NormalizeIdentity(f.Blocks[i].Identity)
	}
	slices.SortFunc(f.Blocks, func(a, b Block) int {
		return cmp.Or(cmp.Compare(a.Identity.Kind, b.Identity.Kind), cmp.Compare(a.Identity.ID, b.Identity.ID))
	})
}

// Marshal writes f, normalized, as YAML.
func Marshal(f *File) ([]byte, error) {
	g := *f
	g.Policies = slices.Clone(f.Policies)
	g.Keys = slices.Clone(f.Keys)
	g.Blocks = slices.Clone(f.Blocks)
	g.Normalize()

	root := mapNode()
	add(root, "version", intNode(Version))
	pols := seqNode()
	for _, p := range g.Policies {
		pols.Content = append(pols.Content, policyNode(p))
	}
	add(root, "policies", pols)
	if g.HasKeys {
		keys := seqNode()
		for _, k := range g.Keys {
			n := mapNode()
			add(n, "id", strNode(k.ID))
			if k.Name != "" {
				add(n, "name", strNode(k.Name))
			}
			if k.Tier != "" {
				add(n, "tier", strNode(k.Tier))
			}
			if k.Customer != "" {
				add(n, "customer", strNode(k.Customer))
			}
			if len(k.Overrides) > 0 {
				ov := mapNode()
				for _, name := range sortedKeys(k.Overrides) {
					add(ov, name, limitsNode(k.Overrides[name]))
				}
				add(n, "overrides", ov)
			}
			keys.Content = append(keys.Content, n)
		}
		add(root, "keys", keys)
	}
	if g.HasBlocks {
		blocks := seqNode()
		for _, b := range g.Blocks {
			n := mapNode()
			id := mapNode()
			id.Style = yaml.FlowStyle
			add(id, "kind", strNode(b.Identity.Kind))
			add(id, "id", strNode(b.Identity.ID))
			add(n, "identity", id)
			if b.Reason != "" {
				add(n, "reason", strNode(b.Reason))
			}
			if b.ExpiresAt != nil {
				add(n, "expires_at", strNode(b.ExpiresAt.UTC().Format(time.RFC3339)))
			}
			blocks.Content = append(blocks.Content, n)
		}
		add(root, "blocks", blocks)
	}

	var buf bytes.Buffer
	buf.WriteString(Header)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func policyNode(p tenants.Policy) *yaml.Node {
	n := mapNode()
	add(n, "name", strNode(p.Name))
	add(n, "method", strNode(p.Method))
	add(n, "path", strNode(p.Path))
	if len(p.Query) > 0 {
		q := mapNode()
		q.Style = yaml.FlowStyle
		for _, k := range sortedKeys(p.Query) {
			add(q, k, strNode(p.Query[k]))
		}
		add(n, "query", q)
	}
	add(n, "consistency", strNode(p.Consistency))
	add(n, "shadow", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(p.Shadow)})
	add(n, "unlisted_tiers", strNode(p.UnlistedTiers))
	tiers := mapNode()
	for _, name := range sortedKeys(p.Tiers) {
		add(tiers, name, limitsNode(p.Tiers[name]))
	}
	add(n, "tiers", tiers)
	return n
}

// limitsNode writes one unnamed limit as a mapping, as the API does, and
// several as a list; each limit on one line.
func limitsNode(ls tenants.Limits) *yaml.Node {
	if len(ls) == 1 && ls[0].Name == "" {
		return limitNode(ls[0])
	}
	s := seqNode()
	for _, l := range ls {
		s.Content = append(s.Content, limitNode(l))
	}
	return s
}

func limitNode(l tenants.LimitSpec) *yaml.Node {
	n := mapNode()
	n.Style = yaml.FlowStyle
	if l.Name != "" {
		add(n, "name", strNode(l.Name))
	}
	add(n, "algorithm", strNode(l.Algorithm))
	add(n, "limit", intNode(l.Limit))
	if l.Calendar != "" {
		add(n, "calendar", strNode(l.Calendar))
	} else {
		add(n, "period", strNode(l.Period))
	}
	if l.Burst != 0 {
		add(n, "burst", intNode(l.Burst))
	}
	if l.Per != "" {
		add(n, "per", strNode(l.Per))
	}
	return n
}

func mapNode() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }
func seqNode() *yaml.Node { return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"} }

func strNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func intNode(n int64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(n, 10)}
}

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, strNode(key), v)
}
