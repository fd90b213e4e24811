package api

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"
	"go.yaml.in/yaml/v3"
)

// OpenAPIPath serves the API's OpenAPI 3.1 description.
const OpenAPIPath = "/v1/openapi.json"

// openAPIYAML is the description as maintained: YAML, so that the
// forward-auth operation can be shared between its methods with anchors.
//
//go:embed openapi.yaml
var openAPIYAML []byte

var openAPI = sync.OnceValues(func() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
})

// OpenAPIJSON is the OpenAPI 3.1 description of every /v1 route as served
// at OpenAPIPath.
func OpenAPIJSON() ([]byte, error) { return openAPI() }

var openAPIETag = sync.OnceValue(func() string {
	b, _ := openAPI()
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:12]) + `"`
})

// openAPIDoc serves the description without authentication: it names
// routes and fields, nothing of any tenant. It changes only with the
// binary, so clients may cache it and revalidate by ETag.
func (h *handler) openAPIDoc(c echo.Context) error {
	b, err := openAPI()
	if err != nil {
		return err
	}
	etag := openAPIETag()
	hd := c.Response().Header()
	hd.Set("Cache-Control", "public, max-age=3600")
	hd.Set("ETag", etag)
	for _, v := range strings.Split(c.Request().Header.Get("If-None-Match"), ",") {
		if v = strings.TrimSpace(v); v == etag || v == "W/"+etag || v == "*" {
			return c.NoContent(http.StatusNotModified)
		}
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
}
