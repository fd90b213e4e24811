package rlsconf

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzParse: Parse never panics; what it refuses it refuses with problems
// that have a line; what it accepts marshals back to itself, flattens and
// rebuilds to itself, compiles, and looks up without panicking.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		basicConfig, shareConfig, "", "'''\n", "domain: shop\ndescriptors: [x]\n",
		"domain: shop\ndescriptors: &d [{key: a, descriptors: *d}]\n",
		"domain: shop\ndescriptors: [{<<: {key: a}, rate_limit: {unit: day, requests_per_unit: 010}}]\n",
		"domain: shop\ndescriptors: [{key: a, sluice: {algorithm: token_bucket, burst: 2}, rate_limit: {unit: second, requests_per_unit: 1}}]\n",
		"domain: shop\ndescriptors: [{key: a, metadata: {b: {1.5: [~, yes, !!binary aGk=]}}}]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.yaml", data)
		if err != nil {
			var ps Problems
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			for _, p := range ps {
				if p.Line < 1 || p.File != "fuzz.yaml" {
					t.Fatalf("problem without a line: %v", p)
				}
			}
			return
		}
		out, err := MarshalWithExtras(file)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := Parse("fuzz.yaml", out)
		if err != nil {
			t.Fatalf("read back:\n%v\n---\n%s", err, out)
		}
		if !equalFiles(stripLines(clone(file)), stripLines(again)) {
			t.Fatalf("read back differs:\n%q\n---\n%s", data, out)
		}
		built, err := Build(file.Domain, Nodes(file))
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		if !reflect.DeepEqual(nanFree(built), nanFree(stripName(clone(file)))) {
			t.Fatal("Build(Nodes(f)) is not f")
		}
		c, err := Compile(file)
		if err != nil {
			t.Fatalf("compile: %v", err)
		}
		for _, n := range Nodes(file) {
			c.Lookup(file.Domain, RequestDescriptor{Entries: n.Path})
			Plan(c, file.Domain, []RequestDescriptor{{Entries: n.Path}, {Entries: n.Path[:len(n.Path)-1]}})
		}
	})
}

func stripName(f *File) *File {
	f.Name = ""
	return f
}

// FuzzMarshal: any valid File of arbitrary strings marshals to a file that
// reads back as the same File.
func FuzzMarshal(f *testing.F) {
	f.Add("shop", "key", "value", "name", "meta", "text", 1.5)
	f.Add("yes", "<<", "~", "", "1.5", "010", -0.0)
	f.Add("a: b", "- x", "*y", "&z", "#c", "'\"", 1e300)
	f.Fuzz(func(t *testing.T, domain, key, value, name, metaKey, metaText string, num float64) {
		file := &File{Domain: domain, Descriptors: []*Descriptor{{
			Key: key, Value: value,
			RateLimit:   &RateLimit{Unit: Minute, RequestsPerUnit: 7, Name: name, Replaces: []string{metaText}},
			Metadata:    map[string]any{metaKey: metaText, "n": num, "nested": map[string]any{metaText: []any{metaKey, num}}},
			Descriptors: []*Descriptor{{Key: value + key, Value: metaText, RateLimit: &RateLimit{Unlimited: true}}},
		}}}
		if Validate(file) != nil {
			return
		}
		roundTrip(t, file, Marshal)
	})
}
