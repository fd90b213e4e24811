package sdk

import (
	"strconv"
	"unicode/utf8"
)

// appendCheck appends req as the JSON object POST /v1/check takes. Empty
// fields are left out so that Sluice applies its defaults.
func appendCheck(dst []byte, req *CheckRequest) []byte {
	dst = append(dst, `{"path":`...)
	dst = appendJSONString(dst, req.Path)
	if req.Method != "" {
		dst = append(dst, `,"method":`...)
		dst = appendJSONString(dst, req.Method)
	}
	if req.APIKey != "" {
		dst = append(dst, `,"api_key":`...)
		dst = appendJSONString(dst, req.APIKey)
	}
	if req.JWT != "" {
		dst = append(dst, `,"jwt":`...)
		dst = appendJSONString(dst, req.JWT)
	}
	if req.IP != "" {
		dst = append(dst, `,"ip":`...)
		dst = appendJSONString(dst, req.IP)
	}
	if req.Cost != 0 {
		dst = append(dst, `,"cost":`...)
		dst = strconv.AppendInt(dst, int64(req.Cost), 10)
	}
	if req.Peek {
		dst = append(dst, `,"peek":true`...)
	}
	if req.LeaseTTL > 0 {
		dst = append(dst, `,"lease_ttl":`...)
		dst = appendJSONString(dst, req.LeaseTTL.String())
	}
	if req.Wait > 0 {
		dst = append(dst, `,"wait":"`...)
		dst = append(dst, req.Wait.String()...)
		dst = append(dst, '"')
	}
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json does.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendJSONEscaped(dst, s)
	return append(dst, '"')
}

// appendJSONEscaped appends s escaped for use inside a JSON string.
func appendJSONEscaped(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}
