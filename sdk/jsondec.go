package sdk

// Check answers are decoded by hand rather than with encoding/json so that
// a check allocates nothing of its own: strings that repeat (reasons, policy
// and tier names, identity kinds) come from an interner, and an identity id
// equal to the request's key or IP reuses the request's string. The decoder
// accepts exactly the JSON grammar (FuzzDecodeDecision compares it with
// encoding/json); unknown fields are skipped.

import (
	"errors"
	"math"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

var errMalformed = errors.New("malformed JSON answer")

// maxDepth bounds the nesting of skipped values.
const maxDepth = 64

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return errMalformed
	}
	s.i++
	return nil
}

// end checks that only white space follows.
func (s *scanner) end() error {
	if s.peek() != 0 || s.i != len(s.b) {
		return errMalformed
	}
	return nil
}

// more advances past the '{' or '[' (first) or the ',' between members, and
// reports whether a member follows; it consumes the closing delimiter.
func (s *scanner) more(first *bool, closer byte) (bool, error) {
	c := s.peek()
	if c == closer {
		s.i++
		return false, nil
	}
	if *first {
		*first = false
		return true, nil
	}
	if c != ',' {
		return false, errMalformed
	}
	s.i++
	return true, nil
}

// key reads an object member's name and the colon after it.
func (s *scanner) key() ([]byte, error) {
	k, err := s.str()
	if err != nil {
		return nil, err
	}
	return k, s.expect(':')
}

// literal consumes word (true, false, null).
func (s *scanner) literal(word string) bool {
	if s.peek() == word[0] && len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

func (s *scanner) null() bool { return s.literal("null") }

func (s *scanner) boolean() (bool, error) {
	switch {
	case s.literal("true"):
		return true, nil
	case s.literal("false"), s.null():
		return false, nil
	}
	return false, errMalformed
}

// str reads a string. The result aliases the input unless the string holds
// escapes or invalid UTF-8; then it is a new, decoded slice.
func (s *scanner) str() ([]byte, error) {
	if s.peek() != '"' {
		return nil, errMalformed
	}
	s.i++
	start := s.i
	clean := true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			out := s.b[start:s.i]
			s.i++
			if clean {
				return out, nil
			}
			return unquote(out)
		case c == '\\':
			clean = false
			s.i++
			if s.i >= len(s.b) {
				return nil, errMalformed
			}
			if s.b[s.i] == 'u' {
				s.i += 4
			}
			s.i++
		case c < 0x20:
			return nil, errMalformed
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				clean = false
			}
			s.i += size
		default:
			s.i++
		}
	}
	return nil, errMalformed
}

// unquote decodes the body of a JSON string that holds escapes or invalid
// UTF-8, with encoding/json's treatment of both: bad surrogates and invalid
// bytes become U+FFFD.
func unquote(b []byte) ([]byte, error) {
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '\\':
			if i+1 >= len(b) {
				return nil, errMalformed
			}
			i++
			switch b[i] {
			case '"', '\\', '/':
				out = append(out, b[i])
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := hex4(b[i+1:])
				if r < 0 {
					return nil, errMalformed
				}
				i += 4
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
						r2 = hex4(b[i+3:])
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						out = utf8.AppendRune(out, dec)
						i += 6 + 1
						continue
					}
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, errMalformed
			}
			i++
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			out = utf8.AppendRune(out, r) // RuneError for an invalid byte
			i += size
		}
	}
	return out, nil
}

// hex4 decodes four hex digits, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// numberText consumes a number in JSON's grammar and returns its text.
func (s *scanner) numberText() (text []byte, integer bool, err error) {
	s.ws()
	start := s.i
	digit := func() bool { return s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' }
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case digit():
		for digit() {
			s.i++
		}
	default:
		return nil, false, errMalformed
	}
	integer = true
	if s.i < len(s.b) && s.b[s.i] == '.' {
		integer = false
		s.i++
		if !digit() {
			return nil, false, errMalformed
		}
		for digit() {
			s.i++
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		integer = false
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !digit() {
			return nil, false, errMalformed
		}
		for digit() {
			s.i++
		}
	}
	return s.b[start:s.i], integer, nil
}

// number reads a JSON number (or null, as 0) as an int64. A number with a
// fraction or exponent is truncated toward zero; a value outside int64 is
// an error.
func (s *scanner) number() (int64, error) {
	if s.null() {
		return 0, nil
	}
	text, integer, err := s.numberText()
	if err != nil {
		return 0, err
	}
	if integer {
		if len(text) > 18 { // 18 characters cannot overflow
			n, err := strconv.ParseInt(string(text), 10, 64)
			if err != nil {
				return 0, errMalformed
			}
			return n, nil
		}
		var n int64
		digits := text
		if digits[0] == '-' {
			digits = digits[1:]
		}
		for _, c := range digits {
			n = n*10 + int64(c-'0')
		}
		if text[0] == '-' {
			n = -n
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil || f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, errMalformed
	}
	return int64(f), nil
}

// skip consumes one value of any kind.
func (s *scanner) skip(depth int) error {
	if depth > maxDepth {
		return errMalformed
	}
	switch s.peek() {
	case '"':
		_, err := s.str()
		return err
	case '{':
		s.i++
		for first := true; ; {
			ok, err := s.more(&first, '}')
			if err != nil || !ok {
				return err
			}
			if _, err := s.key(); err != nil {
				return err
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
		}
	case '[':
		s.i++
		for first := true; ; {
			ok, err := s.more(&first, ']')
			if err != nil || !ok {
				return err
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
		}
	case 't':
		if s.literal("true") {
			return nil
		}
	case 'f':
		if s.literal("false") {
			return nil
		}
	case 'n':
		if s.null() {
			return nil
		}
	default:
		_, _, err := s.numberText()
		return err
	}
	return errMalformed
}

// nullableStr reads a string or null ("") and interns it.
func (s *scanner) nullableStr(in *interner) (string, error) {
	if s.null() {
		return "", nil
	}
	b, err := s.str()
	if err != nil {
		return "", err
	}
	return in.get(b), nil
}

// plainStr is nullableStr for a value that is different in every answer
// (a lease id), which interning would only keep alive.
func (s *scanner) plainStr() (string, error) {
	if s.null() {
		return "", nil
	}
	b, err := s.str()
	return string(b), err
}

// decodeDecision reads one check answer into d. req is the check it
// answers: its key and IP serve as ready-made identity ids. An answer
// without a boolean "allowed" is malformed, not a denial.
func (c *Client) decodeDecision(s *scanner, d *Decision, req *CheckRequest) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	decided := false
	for first := true; ; {
		ok, err := s.more(&first, '}')
		if err != nil {
			return err
		}
		if !ok {
			if !decided {
				return errMalformed
			}
			return nil
		}
		k, err := s.key()
		if err != nil {
			return err
		}
		var ms int64
		switch string(k) {
		case "allowed":
			if s.null() {
				return errMalformed
			}
			d.Allowed, err = s.boolean()
			decided = true
		case "reason":
			d.Reason, err = s.nullableStr(&c.strs)
		case "policy":
			d.Policy, err = s.nullableStr(&c.strs)
		case "tier":
			d.Tier, err = s.nullableStr(&c.strs)
		case "identity":
			err = c.decodeIdentity(s, &d.Identity, req)
		case "customer":
			err = c.decodeCustomer(s, &d.Customer)
		case "limit":
			d.Limit, err = s.number()
		case "remaining":
			d.Remaining, err = s.number()
		case "reset_ms":
			ms, err = s.number()
			d.Reset = millis(ms)
		case "retry_after_ms":
			ms, err = s.number()
			d.RetryAfter = millis(ms)
		case "shadow_denied":
			d.ShadowDenied, err = s.boolean()
		case "lease":
			d.Lease, err = s.plainStr()
		case "lease_expires_at":
			var t string
			if t, err = s.plainStr(); err == nil && t != "" {
				d.LeaseExpiresAt, err = time.Parse(time.RFC3339Nano, t)
			}
		case "waited_ms":
			ms, err = s.number()
			d.Waited = millis(ms)
		case "wait_refused":
			d.WaitRefused, err = s.nullableStr(&c.strs)
		default:
			err = s.skip(0)
		}
		if err != nil {
			return err
		}
	}
}

func (c *Client) decodeCustomer(s *scanner, cu *CustomerRef) error {
	*cu = CustomerRef{}
	if s.null() {
		return nil
	}
	if err := s.expect('{'); err != nil {
		return err
	}
	for first := true; ; {
		ok, err := s.more(&first, '}')
		if err != nil || !ok {
			return err
		}
		k, err := s.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "id":
			cu.ID, err = s.nullableStr(&c.strs)
		case "external_id":
			cu.ExternalID, err = s.nullableStr(&c.strs)
		default:
			err = s.skip(0)
		}
		if err != nil {
			return err
		}
	}
}

func (c *Client) decodeIdentity(s *scanner, id *Identity, req *CheckRequest) error {
	*id = Identity{}
	if s.null() {
		return nil
	}
	if err := s.expect('{'); err != nil {
		return err
	}
	for first := true; ; {
		ok, err := s.more(&first, '}')
		if err != nil || !ok {
			return err
		}
		k, err := s.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "kind":
			id.Kind, err = s.nullableStr(&c.strs)
		case "id":
			var b []byte
			if s.null() {
				id.ID = ""
				break
			}
			if b, err = s.str(); err != nil {
				break
			}
			switch string(b) {
			case req.IP:
				id.ID = req.IP
			case req.APIKey:
				id.ID = req.APIKey
			default:
				id.ID = c.ids.get(b)
			}
		default:
			err = s.skip(1)
		}
		if err != nil {
			return err
		}
	}
}

// decodeBatch reads {"results": [answer, …]}, which must hold one answer per
// request.
func (c *Client) decodeBatch(body []byte, reqs []CheckRequest) ([]Decision, error) {
	s := scanner{b: body}
	var out []Decision
	seen := false
	if err := s.expect('{'); err != nil {
		return nil, err
	}
	for first := true; ; {
		ok, err := s.more(&first, '}')
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		k, err := s.key()
		if err != nil {
			return nil, err
		}
		if string(k) != "results" {
			if err := s.skip(0); err != nil {
				return nil, err
			}
			continue
		}
		seen = true
		out = make([]Decision, 0, len(reqs))
		if err := s.expect('['); err != nil {
			return nil, err
		}
		for first := true; ; {
			ok, err := s.more(&first, ']')
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			if len(out) == len(reqs) {
				return nil, errBatchLength
			}
			out = append(out, Decision{})
			if err := c.decodeDecision(&s, &out[len(out)-1], &reqs[len(out)-1]); err != nil {
				return nil, err
			}
		}
	}
	if err := s.end(); err != nil {
		return nil, err
	}
	if !seen || len(out) != len(reqs) {
		return nil, errBatchLength
	}
	return out, nil
}

var errBatchLength = errors.New("batch answer does not hold one result per check")

// millis converts milliseconds to a Duration, saturating instead of
// overflowing.
func millis(ms int64) time.Duration {
	const limit = math.MaxInt64 / int64(time.Millisecond)
	switch {
	case ms > limit:
		return math.MaxInt64
	case ms < -limit:
		return math.MinInt64
	}
	return time.Duration(ms) * time.Millisecond
}
