package api

import (
	"bytes"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// The check body is decoded on every check, so its common shape (a flat
// object of the seven known fields, strings without escapes) is parsed by
// hand. Anything else — an escape, a null, an unknown field, a syntax or
// type error — falls back to encoding/json on the same bytes, so every
// answer to an unusual or bad body is exactly the general decoder's.

// bindCheck reads the body and decodes it into b.
func bindCheck(c echo.Context, b *checkBody, buf *[]byte) error {
	raw, err := readAll((*buf)[:0], c.Request().Body)
	if cap(raw) <= 64<<10 { // a rare huge body is not kept in the pool
		*buf = raw
	}
	if err != nil {
		return decodeError(err)
	}
	if parseCheckFast(raw, b) {
		return nil
	}
	*b = checkBody{}
	return bindReader(bytes.NewReader(raw), b)
}

// readAll appends r's bytes to dst.
func readAll(dst []byte, r io.Reader) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// parseCheckFast decodes the common shape of a check body into b and
// reports whether it could; when it reports false, b is to be discarded.
func parseCheckFast(s []byte, b *checkBody) bool {
	i := skipSpace(s, 0)
	if i >= len(s) || s[i] != '{' {
		return false
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return skipSpace(s, i+1) == len(s)
	}
	for {
		key, j, ok := fastString(s, i)
		if !ok {
			return false
		}
		j = skipSpace(s, j)
		if j >= len(s) || s[j] != ':' {
			return false
		}
		j = skipSpace(s, j+1)
		switch string(key) {
		case "api_key", "jwt", "ip", "method", "path":
			v, k, ok := fastString(s, j)
			if !ok {
				return false
			}
			str := string(v)
			switch string(key) {
			case "api_key":
				b.APIKey = str
			case "jwt":
				b.JWT = str
			case "ip":
				b.IP = str
			case "method":
				b.Method = str
			default:
				b.Path = str
			}
			j = k
		case "cost":
			k := j
			if k < len(s) && s[k] == '-' {
				k++
			}
			start := k
			for k < len(s) && s[k] >= '0' && s[k] <= '9' {
				k++
			}
			// JSON forbids leading zeros; fractions and exponents are the
			// general decoder's to reject.
			if k == start || (s[start] == '0' && k-start > 1) || (k < len(s) && (s[k] == '.' || s[k] == 'e' || s[k] == 'E')) {
				return false
			}
			n, err := strconv.ParseInt(string(s[j:k]), 10, 64)
			if err != nil {
				return false
			}
			b.Cost = &n
			j = k
		case "peek":
			switch {
			case bytes.HasPrefix(s[j:], []byte("true")):
				b.Peek, j = true, j+4
			case bytes.HasPrefix(s[j:], []byte("false")):
				b.Peek, j = false, j+5
			default:
				return false
			}
		default:
			return false
		}
		j = skipSpace(s, j)
		if j >= len(s) {
			return false
		}
		switch s[j] {
		case ',':
			i = skipSpace(s, j+1)
		case '}':
			return skipSpace(s, j+1) == len(s)
		default:
			return false
		}
	}
}

func skipSpace(s []byte, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// fastString returns the contents of the JSON string at s[i] when it needs
// no unescaping: no backslash, no control character, valid UTF-8.
func fastString(s []byte, i int) (v []byte, next int, ok bool) {
	if i >= len(s) || s[i] != '"' {
		return nil, 0, false
	}
	ascii := true
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			v = s[i+1 : j]
			if !ascii && !utf8.Valid(v) {
				return nil, 0, false
			}
			return v, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, 0, false
}
