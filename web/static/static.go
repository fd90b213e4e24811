// Package static holds the dashboard's CSS, JavaScript and icons, embedded
// in the binary. Each file is served under a URL that carries a hash of its
// content, so browsers may cache it for a year: a changed file gets a new
// URL, and pages always name the current one.
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"path"
)

//go:embed *.css *.js *.svg
var files embed.FS

// Asset is one embedded file.
type Asset struct {
	Name        string
	Hash        string // first 12 hex digits of the content's SHA-256
	ContentType string
	Body        []byte
}

var assets = func() map[string]Asset {
	out := map[string]Asset{}
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		body, err := files.ReadFile(e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(body)
		ct := mime.TypeByExtension(path.Ext(e.Name()))
		if ct == "" {
			ct = "application/octet-stream"
		}
		out[e.Name()] = Asset{Name: e.Name(), Hash: hex.EncodeToString(sum[:6]), ContentType: ct, Body: body}
	}
	return out
}()

// Lookup returns the embedded file with this name.
func Lookup(name string) (Asset, bool) {
	a, ok := assets[name]
	return a, ok
}

// Path returns the cache-busting path of a file below the prefix the
// dashboard serves assets under: "<hash>/<name>". It panics for a file that
// is not embedded, which is a programming error caught by any test that
// renders a page.
func Path(name string) string {
	a, ok := assets[name]
	if !ok {
		panic("static: no embedded file " + name)
	}
	return a.Hash + "/" + a.Name
}
