package sdk

// The RateLimit-Policy and RateLimit fields of the IETF httpapi draft
// (draft-ietf-httpapi-ratelimit-headers-10) are Structured Field Lists
// (RFC 8941) whose members are a policy name with parameters:
//
//	RateLimit-Policy: "burst";q=100;w=60, "daily";q=1000;w=86400
//	RateLimit: "burst";r=0;t=6
//
// The parser takes any list of string or token items with any parameters;
// it refuses inner lists and other item types, which the draft never uses.

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Canonical header names the client reads and writes.
const (
	hdrPolicy     = "Ratelimit-Policy"
	hdrRateLimit  = "Ratelimit"
	hdrXLimit     = "X-Ratelimit-Limit"
	hdrXRemaining = "X-Ratelimit-Remaining"
	hdrXReset     = "X-Ratelimit-Reset"
	hdrRetryAfter = "Retry-After"
)

// RateLimitItem is one member of a RateLimit-Policy or RateLimit field: a
// policy name and its parameters in field order. RateLimit-Policy uses q
// (quota), w (window, seconds), qu (quota unit) and pk (partition key);
// RateLimit uses r (remaining), t (seconds until reset) and pk.
type RateLimitItem struct {
	Name   string
	Params []RateLimitParam
}

// RateLimitParam is one parameter. Value is an int64 (Integer), float64
// (Decimal), string (String), Token, []byte (Byte Sequence) or bool
// (Boolean; a parameter without a value is true).
type RateLimitParam struct {
	Key   string
	Value any
}

// Token is a Structured Field token, as opposed to a string.
type Token string

// Param returns the value of the parameter key.
func (it RateLimitItem) Param(key string) (any, bool) {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Value, true
		}
	}
	return nil, false
}

// Int returns the value of the parameter key if it is an Integer.
func (it RateLimitItem) Int(key string) (int64, bool) {
	v, ok := it.Param(key)
	n, isInt := v.(int64)
	return n, ok && isInt
}

// setParam sets key to v, in place if present, else at the end.
func (it *RateLimitItem) setParam(key string, v any) {
	for i := range it.Params {
		if it.Params[i].Key == key {
			it.Params[i].Value = v
			return
		}
	}
	it.Params = append(it.Params, RateLimitParam{Key: key, Value: v})
}

var errHeader = errors.New("sluice: malformed rate-limit field")

// ParseRateLimitHeader parses a RateLimit-Policy or RateLimit field value.
// An empty value is an empty list. Several field lines should be joined
// with ", " first.
func ParseRateLimitHeader(field string) ([]RateLimitItem, error) {
	p := sfParser{s: field}
	p.ows()
	var items []RateLimitItem
	for p.i < len(p.s) {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.ows()
		if p.i == len(p.s) {
			break
		}
		if p.s[p.i] != ',' {
			return nil, p.errorf("expected ',' after a member")
		}
		p.i++
		p.ows()
		if p.i == len(p.s) {
			return nil, p.errorf("trailing comma")
		}
	}
	return items, nil
}

func parseHeaderValues(vs []string) ([]RateLimitItem, error) {
	return ParseRateLimitHeader(strings.Join(vs, ", "))
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: %s", errHeader, p.i, fmt.Sprintf(format, args...))
}

// ows skips optional white space (SP and HTAB).
func (p *sfParser) ows() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (RateLimitItem, error) {
	var it RateLimitItem
	v, err := p.bareItem()
	if err != nil {
		return it, err
	}
	switch name := v.(type) {
	case string:
		it.Name = name
	case Token:
		it.Name = string(name)
	default:
		return it, p.errorf("a member must be a string or a token")
	}
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		for p.i < len(p.s) && p.s[p.i] == ' ' {
			p.i++
		}
		key, err := p.key()
		if err != nil {
			return it, err
		}
		var val any = true
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if val, err = p.bareItem(); err != nil {
				return it, err
			}
		}
		it.setParam(key, val) // a repeated key keeps its place and takes the last value
	}
	return it, nil
}

func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool   { return '0' <= c && c <= '9' }

func isTchar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if p.i >= len(p.s) || !(isLCAlpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", p.errorf("expected a parameter key")
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !(isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	if p.i >= len(p.s) {
		return nil, p.errorf("expected an item")
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token(), nil
	case c == ':':
		return p.bytes()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, p.errorf("malformed boolean")
	case c == '(':
		return nil, p.errorf("inner lists are not supported")
	}
	return nil, p.errorf("unexpected %q", p.s[p.i])
}

func (p *sfParser) number() (any, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	intStart := p.i
	for p.i < len(p.s) && isDigit(p.s[p.i]) {
		p.i++
	}
	intDigits := p.i - intStart
	if intDigits == 0 {
		return nil, p.errorf("expected a digit")
	}
	if p.i < len(p.s) && p.s[p.i] == '.' {
		if intDigits > 12 {
			return nil, p.errorf("decimal with more than 12 integer digits")
		}
		p.i++
		fracStart := p.i
		for p.i < len(p.s) && isDigit(p.s[p.i]) {
			p.i++
		}
		if n := p.i - fracStart; n == 0 || n > 3 {
			return nil, p.errorf("decimal needs 1 to 3 fractional digits")
		}
		f, err := strconv.ParseFloat(p.s[start:p.i], 64)
		if err != nil {
			return nil, p.errorf("malformed decimal")
		}
		return f, nil
	}
	if intDigits > 15 {
		return nil, p.errorf("integer with more than 15 digits")
	}
	n, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
	if err != nil {
		return nil, p.errorf("malformed integer")
	}
	return n, nil
}

func (p *sfParser) str() (any, error) {
	p.i++ // opening quote
	var b strings.Builder
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '\\':
			if p.i+1 >= len(p.s) || (p.s[p.i+1] != '"' && p.s[p.i+1] != '\\') {
				return nil, p.errorf("bad escape in string")
			}
			b.WriteString(p.s[start:p.i])
			b.WriteByte(p.s[p.i+1])
			p.i += 2
			start = p.i
		case c == '"':
			p.i++
			if b.Len() == 0 {
				return p.s[start : p.i-1], nil
			}
			b.WriteString(p.s[start : p.i-1])
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return nil, p.errorf("string holds a non-printable or non-ASCII byte")
		default:
			p.i++
		}
	}
	return nil, p.errorf("unterminated string")
}

func (p *sfParser) token() Token {
	start := p.i
	p.i++
	for p.i < len(p.s) && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
		p.i++
	}
	return Token(p.s[start:p.i])
}

func (p *sfParser) bytes() (any, error) {
	p.i++ // opening colon
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return nil, p.errorf("unterminated byte sequence")
	}
	enc := p.s[p.i : p.i+end]
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if !(isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '=') {
			return nil, p.errorf("byte sequence holds %q", c)
		}
	}
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, p.errorf("malformed base64")
	}
	p.i += end + 1
	return b, nil
}

// FormatRateLimitHeader serializes items as a field value, names as
// strings. It fails on a name or string that is not printable ASCII, a
// malformed key or token, an out-of-range number, or a value of another type.
func FormatRateLimitHeader(items []RateLimitItem) (string, error) {
	var b []byte
	for i, it := range items {
		if i > 0 {
			b = append(b, ", "...)
		}
		var err error
		if b, err = appendSFString(b, it.Name); err != nil {
			return "", err
		}
		for _, prm := range it.Params {
			if err := checkKey(prm.Key); err != nil {
				return "", err
			}
			b = append(b, ';')
			b = append(b, prm.Key...)
			if v, ok := prm.Value.(bool); ok && v {
				continue // a true boolean parameter is written bare
			}
			b = append(b, '=')
			if b, err = appendBareItem(b, prm.Value); err != nil {
				return "", fmt.Errorf("parameter %q: %w", prm.Key, err)
			}
		}
	}
	return string(b), nil
}

func checkKey(k string) error {
	if k == "" || !(isLCAlpha(k[0]) || k[0] == '*') {
		return fmt.Errorf("%w: parameter key %q", errHeader, k)
	}
	for i := 1; i < len(k); i++ {
		c := k[i]
		if !(isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			return fmt.Errorf("%w: parameter key %q", errHeader, k)
		}
	}
	return nil
}

func appendSFString(b []byte, s string) ([]byte, error) {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return nil, fmt.Errorf("%w: string %q is not printable ASCII", errHeader, s)
		}
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return append(b, '"'), nil
}

const maxSFInteger = 999_999_999_999_999

func appendBareItem(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case int:
		return appendBareItem(b, int64(v))
	case int64:
		if v > maxSFInteger || v < -maxSFInteger {
			return nil, fmt.Errorf("%w: integer %d out of range", errHeader, v)
		}
		return strconv.AppendInt(b, v, 10), nil
	case float64:
		s := strconv.FormatFloat(v, 'f', 3, 64) // NaN and ±Inf have no '.'
		dot := strings.IndexByte(s, '.')
		if dot < 0 || dot-strings.Count(s[:1], "-") > 12 {
			return nil, fmt.Errorf("%w: decimal %v out of range", errHeader, v)
		}
		s = strings.TrimRight(s, "0")
		if strings.HasSuffix(s, ".") {
			s += "0"
		}
		return append(b, s...), nil
	case string:
		return appendSFString(b, v)
	case Token:
		if v == "" || !(isAlpha(v[0]) || v[0] == '*') {
			return nil, fmt.Errorf("%w: token %q", errHeader, v)
		}
		for i := 1; i < len(v); i++ {
			if c := v[i]; !(isTchar(c) || c == ':' || c == '/') {
				return nil, fmt.Errorf("%w: token %q", errHeader, v)
			}
		}
		return append(b, v...), nil
	case []byte:
		b = append(b, ':')
		b = base64.StdEncoding.AppendEncode(b, v)
		return append(b, ':'), nil
	case bool:
		if v {
			return append(b, "?1"...), nil
		}
		return append(b, "?0"...), nil
	}
	return nil, fmt.Errorf("%w: unsupported value type %T", errHeader, v)
}
