package rlsconf

import (
	"reflect"
	"strings"
	"testing"
)

func TestNodesAndBuild(t *testing.T) {
	f := mustParse(t, shareConfig)
	nodes := Nodes(f)
	if len(nodes) != 23 {
		t.Fatalf("%d nodes", len(nodes))
	}
	// Depth first, parents first, siblings in file order.
	var got []string
	for _, n := range nodes[:6] {
		got = append(got, FullKey("shop", n.Path))
	}
	want := []string{"shop.files_files/*", "shop.nested_parent", "shop.nested_parent.files_nested/*", "shop.files_top/*", "shop.files_top/*.files_nested/*", "shop.route_api/*"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order %v", got)
	}
	if n := nodes[1]; n.RateLimit != nil || n.Key() != (Entry{"nested", "parent"}) || n.Line != 4 {
		t.Errorf("a node without a limit: %+v", n)
	}
	// Paths do not share memory.
	nodes[2].Path[0].Key = "changed"
	if nodes[1].Path[0].Key != "nested" {
		t.Error("paths share memory")
	}
	nodes[2].Path[0].Key = "nested"

	g, err := Build("shop", nodes)
	if err != nil {
		t.Fatal(err)
	}
	f.Name = ""
	if !reflect.DeepEqual(f, g) {
		t.Error("Build(Nodes(f)) is not f")
	}
	// Any order will do, so long as siblings keep theirs.
	rev := make([]Node, len(nodes))
	for i, n := range nodes {
		rev[len(nodes)-1-i] = n
	}
	g, err = Build("shop", rev)
	if err != nil {
		t.Fatal(err)
	}
	if g.Descriptors[0].Key != "noshare" || g.Descriptors[len(g.Descriptors)-1].Value != "files/*" {
		t.Error("siblings do not keep the order of the nodes")
	}
}

func TestBuildRefuses(t *testing.T) {
	rl := &RateLimit{Unit: Second, RequestsPerUnit: 1}
	cases := []struct {
		name  string
		nodes []Node
		want  string
	}{
		{"a missing parent", []Node{{Path: []Entry{{"a", ""}}}, {Path: []Entry{{"b", "1"}, {"c", ""}}}},
			"nodes[1]: the parent of shop.b_1.c is not among the nodes"},
		{"a path twice", []Node{{Path: []Entry{{"a", "x"}}}, {Path: []Entry{{"a", "x"}}}},
			"nodes[1]: path shop.a_x is also nodes[0]"},
		{"an empty path", []Node{{}}, "nodes[0]: has an empty path"},
		// Distinct paths whose composite keys collide are the reference's
		// duplicate.
		{"colliding composite keys", []Node{{Path: []Entry{{"a_b", ""}}, RateLimit: rl}, {Path: []Entry{{"a", "b"}}, RateLimit: rl}},
			"descriptors[1]: duplicate descriptor composite key 'shop.a_b' (also descriptors[0])"},
	}
	for _, tc := range cases {
		if _, err := Build("shop", tc.nodes); err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestFullKey(t *testing.T) {
	for _, tc := range []struct {
		path []Entry
		want string
	}{
		{nil, "shop"},
		{[]Entry{{"a", ""}}, "shop.a"},
		{[]Entry{{"a", "1"}, {"b", ""}, {"c", "x*"}}, "shop.a_1.b.c_x*"},
	} {
		if got := FullKey("shop", tc.path); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.path, got, tc.want)
		}
	}
	// FullKey is the stats key of a plain match.
	c := compileText(t, basicConfig)
	for _, n := range Nodes(mustParse(t, basicConfig)) {
		if n.RateLimit == nil || n.DetailedMetric || strings.Contains(FullKey("", n.Path), "*") {
			continue
		}
		d := RequestDescriptor{Entries: n.Path}
		if l := c.Lookup("shop", d); l == nil || l.StatsKey != FullKey("shop", n.Path) {
			t.Errorf("%v: %+v", n.Path, l)
		}
	}
}
