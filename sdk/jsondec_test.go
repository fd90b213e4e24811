package sdk

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func decodeForTest(c *Client, data []byte, req *CheckRequest) (Decision, error) {
	var d Decision
	s := scanner{b: data}
	err := c.decodeDecision(&s, &d, req)
	if err == nil {
		err = s.end()
	}
	return d, err
}

func TestDecodeDecision(t *testing.T) {
	c := New("http://sluice.invalid", "sk")
	req := &CheckRequest{IP: "203.0.113.7"}
	in := `{"allowed": false, "reason": "rate_limited", "policy": "heavy-example", "tier": "anonymous",
 "identity": {"kind": "ip", "id": "203.0.113.7", "extra": [1, {"a": null}]},
 "limit": 10, "remaining": 0, "reset_ms": 6000, "retry_after_ms": 6000, "future": {"x": [true, false, -1.5e3, "\u00e9"]}}`
	d, err := decodeForTest(c, []byte(in), req)
	if err != nil {
		t.Fatal(err)
	}
	want := Decision{Reason: "rate_limited", Policy: "heavy-example", Tier: "anonymous",
		Identity: Identity{Kind: "ip", ID: "203.0.113.7"}, Limit: 10, Reset: 6 * time.Second, RetryAfter: 6 * time.Second}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("got  %+v\nwant %+v", d, want)
	}
	d, err = decodeForTest(c, []byte(`{"allowed":true,"reason":"ok","policy":null,"shadow_denied":true,"tier":"p\u00e9\ud83d\ude00\ud800x"}`), req)
	if err != nil || d.Policy != "" || !d.ShadowDenied || d.Tier != "pé😀\ufffdx" {
		t.Errorf("got %+v, %v", d, err)
	}
	for _, bad := range []string{
		``, `null`, `[]`, `{}`, `{"reason":"ok"}`, `{"allowed":null}`, `{"allowed":1}`, `{"limit":"1"}`, `{"limit":1.}`, `{"limit":01}`, `{"limit":9223372036854775808}`,
		"{\"allowed\":true,\"reason\":\"a\x01\"}", `{"allowed":true,"reason":"\q"}`, `{"allowed":true,"x":[1,]}`, `{"allowed":true,"x":1,}`,
		`{"allowed":true} {}`, `{"allowed":tru}`, `{"allowed":true,"identity":[]}`,
		`{"allowed":true,"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	} {
		if d, err := decodeForTest(c, []byte(bad), req); err == nil {
			t.Errorf("decoded %q as %+v", bad, d)
		}
	}
}

// referenceDecision decodes data with encoding/json and the same rules as
// the hand decoder; ok is false where the hand decoder must refuse.
func referenceDecision(data []byte) (d Decision, ok bool) {
	if !json.Valid(data) {
		return d, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return d, false
	}
	str := func(v any, dst *string) bool {
		switch v := v.(type) {
		case nil:
			*dst = ""
		case string:
			*dst = v
		default:
			return false
		}
		return true
	}
	num := func(v any) (int64, bool) {
		switch v := v.(type) {
		case nil:
			return 0, true
		case json.Number:
			if !strings.ContainsAny(string(v), ".eE") {
				n, err := strconv.ParseInt(string(v), 10, 64)
				return n, err == nil
			}
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil || f >= math.MaxInt64 || f < math.MinInt64 {
				return 0, false
			}
			return int64(f), true
		}
		return 0, false
	}
	boolean := func(v any) (bool, bool) {
		switch v := v.(type) {
		case nil:
			return false, true
		case bool:
			return v, true
		}
		return false, false
	}
	_, ok = m["allowed"]
	for k, v := range m {
		var good bool
		var n int64
		switch k {
		case "allowed":
			d.Allowed, good = v.(bool)
		case "shadow_denied":
			d.ShadowDenied, good = boolean(v)
		case "reason":
			good = str(v, &d.Reason)
		case "policy":
			good = str(v, &d.Policy)
		case "tier":
			good = str(v, &d.Tier)
		case "limit":
			d.Limit, good = num(v)
		case "remaining":
			d.Remaining, good = num(v)
		case "reset_ms":
			n, good = num(v)
			d.Reset = millis(n)
		case "retry_after_ms":
			n, good = num(v)
			d.RetryAfter = millis(n)
		case "identity":
			switch id := v.(type) {
			case nil:
				good = true
			case map[string]any:
				good = str(id["kind"], &d.Identity.Kind) && str(id["id"], &d.Identity.ID)
			}
		default:
			good = true
		}
		ok = ok && good
	}
	return d, ok
}

func depth(data []byte) int {
	deepest, n := 0, 0
	for _, c := range data {
		switch c {
		case '[', '{':
			n++
			deepest = max(deepest, n)
		case ']', '}':
			n--
		}
	}
	return deepest
}

func FuzzDecodeDecision(f *testing.F) {
	for _, s := range []string{
		`{"allowed":false,"reason":"rate_limited","policy":"heavy-example","tier":"anonymous","identity":{"kind":"ip","id":"203.0.113.7"},"limit":10,"remaining":0,"reset_ms":6000,"retry_after_ms":6000}`,
		`{"allowed":true,"reason":"ok","policy":null,"shadow_denied":true}`,
		`{"allowed":true,"tier":"\ud83d\ude00\ud800\u0041\\\"","limit":1.9e3,"remaining":-0.5,"x":[{},[],null,"s"]}`,
		`{"allowed":false,"limit":12345678901234567890}`,
		"{\"allowed\":true,\"reason\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	c := New("http://sluice.invalid", "sk")
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeForTest(c, data, &CheckRequest{IP: "1.2.3.4", APIKey: "ck_x"})
		want, ok := referenceDecision(data)
		if err != nil {
			if ok && depth(data) <= maxDepth {
				t.Fatalf("refused %q, which encoding/json reads as %+v: %v", data, want, err)
			}
			return
		}
		if !ok {
			t.Fatalf("accepted %q as %+v, which encoding/json refuses", data, got)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoding %q\n got %+v\nwant %+v", data, got, want)
		}
	})
}

func FuzzAppendCheck(f *testing.F) {
	f.Add("ck_x", "1.2.3.4", "GET", "/a?b=c", 3, true)
	f.Add("", "", "", "\"\\\x00\u2028\xff", -1, false)
	f.Fuzz(func(t *testing.T, key, ip, method, path string, cost int, peek bool) {
		req := CheckRequest{APIKey: key, IP: ip, Method: method, Path: path, Cost: cost, Peek: peek}
		b := appendCheck(nil, &req)
		var got wireCheck
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		// encoding/json is the reference for invalid UTF-8 handling.
		norm := func(s string) string {
			b, _ := json.Marshal(s)
			var out string
			json.Unmarshal(b, &out)
			return out
		}
		var gotCost int
		if got.Cost != nil {
			gotCost = int(*got.Cost)
		}
		if got.APIKey != norm(key) || got.IP != norm(ip) || got.Method != norm(method) || got.Path != norm(path) || gotCost != cost || got.Peek != peek {
			t.Fatalf("%+v encoded as %s", req, b)
		}
	})
}
