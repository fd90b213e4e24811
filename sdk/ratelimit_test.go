package sdk

import (
	"reflect"
	"testing"
)

func item(name string, kv ...any) RateLimitItem {
	it := RateLimitItem{Name: name}
	for i := 0; i < len(kv); i += 2 {
		it.Params = append(it.Params, RateLimitParam{Key: kv[i].(string), Value: kv[i+1]})
	}
	return it
}

func TestParseRateLimitHeader(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []RateLimitItem
	}{
		{``, nil},
		{`  `, nil},
		{`"heavy-example";q=10;w=60`, []RateLimitItem{item("heavy-example", "q", int64(10), "w", int64(60))}},
		{`"heavy-example";r=0;t=6`, []RateLimitItem{item("heavy-example", "r", int64(0), "t", int64(6))}},
		{`"burst";q=100;w=60,"daily";q=1000;w=86400`, []RateLimitItem{
			item("burst", "q", int64(100), "w", int64(60)),
			item("daily", "q", int64(1000), "w", int64(86400)),
		}},
		{" \"a\";q=1 ,\t\"b\";q=2 ", []RateLimitItem{item("a", "q", int64(1)), item("b", "q", int64(2))}},
		{`default;r=50;t=30`, []RateLimitItem{item("default", "r", int64(50), "t", int64(30))}},
		{`"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:`, []RateLimitItem{item("default", "r", int64(300000000), "t", int64(60), "pk", []byte("App-999"))}},
		{`"a";qu="bytes";x-y.z*=?0;flag;d=-1.5;tok=foo/bar:baz`, []RateLimitItem{item("a", "qu", "bytes", "x-y.z*", false, "flag", true, "d", -1.5, "tok", Token("foo/bar:baz"))}},
		{`"esc\"aped\\";q=1`, []RateLimitItem{item(`esc"aped\`, "q", int64(1))}},
		{`"a";q=1;q=2;w=3`, []RateLimitItem{item("a", "q", int64(2), "w", int64(3))}},
		{`"a"; q=1`, []RateLimitItem{item("a", "q", int64(1))}},
	} {
		got, err := ParseRateLimitHeader(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q)\n got %#v\nwant %#v", tc.in, got, tc.want)
		}
	}
}

func TestParseRateLimitHeaderRejects(t *testing.T) {
	for _, in := range []string{
		`"a";q=1,`, `"a" "b"`, `1;q=2`, `("a" "b");q=1`, `"a";Q=1`, `"a";q=`, `"a`, `"a\x"`,
		`"a";q=1234567890123456`, `"a";q=1.2345`, `"a";q=1.`, `"a";q=-`, `"é"`, `"a";pk=:@@:`, `"a";b=?2`,
		`"a";q=1;`, `,"a"`, `"a",,"b"`,
	} {
		if got, err := ParseRateLimitHeader(in); err == nil {
			t.Errorf("Parse(%q) = %#v, want an error", in, got)
		}
	}
}

func TestFormatRateLimitHeader(t *testing.T) {
	got, err := FormatRateLimitHeader([]RateLimitItem{
		item("burst", "q", int64(100), "w", int64(60)),
		item(`we"ird`, "r", 0, "flag", true, "off", false, "d", 2.0, "e", 0.125, "tok", Token("*t"), "pk", []byte("App-999"), "s", "x"),
	})
	want := `"burst";q=100;w=60, "we\"ird";r=0;flag;off=?0;d=2.0;e=0.125;tok=*t;pk=:QXBwLTk5OQ==:;s="x"`
	if err != nil || got != want {
		t.Errorf("Format = %q, %v\nwant %q", got, err, want)
	}
	for _, bad := range [][]RateLimitItem{
		{item("é")},
		{item("a", "Q", int64(1))},
		{item("a", "q", int64(1e15))},
		{item("a", "q", 1e12)},
		{item("a", "t", Token("9x"))},
		{item("a", "u", uint8(1))},
	} {
		if s, err := FormatRateLimitHeader(bad); err == nil {
			t.Errorf("Format(%#v) = %q, want an error", bad, s)
		}
	}
}

func FuzzRateLimitHeader(f *testing.F) {
	for _, s := range []string{
		`"heavy-example";q=10;w=60`,
		`"heavy-example";r=0;t=6`,
		`"burst";q=100;w=60, "daily";q=1000;w=86400`,
		`"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:`,
		`tok;a;b=?0;c=-1.250;d="x\"y"`,
		`"a";q=1;q=2`,
		``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		items, err := ParseRateLimitHeader(in)
		if err != nil {
			return
		}
		out, err := FormatRateLimitHeader(items)
		if err != nil {
			t.Fatalf("Format(Parse(%q)) failed: %v", in, err)
		}
		again, err := ParseRateLimitHeader(out)
		if err != nil {
			t.Fatalf("Parse(Format(Parse(%q))) = Parse(%q) failed: %v", in, out, err)
		}
		if !reflect.DeepEqual(items, again) {
			t.Fatalf("round trip of %q via %q:\n%#v\n%#v", in, out, items, again)
		}
	})
}
