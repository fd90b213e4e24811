package api

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
)

// The description is served without a credential, as JSON, cacheable and
// revalidated by ETag. (internal/app validates the server against it.)
func TestOpenAPIDoc(t *testing.T) {
	e := New(Config{})
	get := func(inm string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", OpenAPIPath, nil)
		if inm != "" {
			r.Header.Set("If-None-Match", inm)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w
	}
	w := get("")
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Cache-Control") != "public, max-age=3600" {
		t.Fatalf("GET: %d %v", w.Code, w.Header())
	}
	var doc struct {
		OpenAPI string                     `json:"openapi"`
		Paths   map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || doc.OpenAPI != "3.1.0" || doc.Paths["/v1/check"] == nil {
		t.Fatalf("body: %v %q, %d paths", err, doc.OpenAPI, len(doc.Paths))
	}
	etag := w.Header().Get("ETag")
	if len(etag) < 10 || etag[0] != '"' {
		t.Fatalf("ETag %q", etag)
	}
	for inm, want := range map[string]int{
		etag:                   304,
		"W/" + etag:            304,
		`"other", ` + etag:     304,
		"*":                    304,
		`"other"`:              200,
		`W/"` + etag[1:] + `x`: 200,
	} {
		if got := get(inm).Code; got != want {
			t.Errorf("If-None-Match %s: %d, want %d", inm, got, want)
		}
	}
}
