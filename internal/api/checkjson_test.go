package api

import (
	"bytes"
	"reflect"
	"testing"
)

var checkBodies = []string{
	`{"api_key":"ck_abc","ip":"203.0.113.7","method":"GET","path":"/api/example?mode=heavy","cost":1}`,
	` { "ip" : "2001:db8::1" , "path":"/a", "peek": true }` + "\n",
	`{"ip":"1.2.3.4","path":"/p","cost":-3}`,
	`{"ip":"1.2.3.4","path":"/p","cost":0}`,
	`{"ip":"1.2.3.4","path":"/p","cost":01}`,
	`{"ip":"1.2.3.4","path":"/p","cost":1.5}`,
	`{"ip":"1.2.3.4","path":"/p","cost":1e3}`,
	`{"ip":"1.2.3.4","path":"/p","cost":99999999999999999999}`,
	`{"ip":"1.2.3.4","path":"/p","peek":false,"peek":true}`,
	`{"ip":"1.2.3.4","path":"/\u0070"}`,
	`{"ip":"1.2.3.4","path":"/caf` + "\xc3\xa9" + `"}`,
	`{"ip":"1.2.3.4","path":"/bad` + "\xff" + `"}`,
	`{"ip":"1.2.3.4","path":"/p","extra":1}`,
	`{"ip":"1.2.3.4","path":null}`,
	`{"ip":"1.2.3.4","path":"/p"} {}`,
	`{"ip":"1.2.3.4","path":"/p",}`,
	`{}`, `[]`, ``, `{`, `"x"`, `{"cost":"1"}`, `{"peek":tru}`,
}

// Whenever the hand parser accepts a body, encoding/json must accept it
// too and produce the same check; everything else goes to encoding/json.
func checkFastAgrees(t *testing.T, body []byte) {
	var fast checkBody
	if !parseCheckFast(body, &fast) {
		return
	}
	var slow checkBody
	if err := bindReader(bytes.NewReader(body), &slow); err != nil {
		t.Fatalf("%q: fast path accepted, encoding/json says %v", body, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q: fast %+v, encoding/json %+v", body, fast, slow)
	}
}

func TestParseCheckFastAgreesWithEncodingJSON(t *testing.T) {
	accepted := 0
	for _, b := range checkBodies {
		checkFastAgrees(t, []byte(b))
		var cb checkBody
		if parseCheckFast([]byte(b), &cb) {
			accepted++
		}
	}
	// The common shapes must take the fast path, or it is dead code.
	if accepted < 5 {
		t.Fatalf("fast path accepted only %d of the sample bodies", accepted)
	}
}

func FuzzParseCheckFast(f *testing.F) {
	for _, b := range checkBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastAgrees(t, body)
	})
}
