package httpapi

import (
	"encoding/binary"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/fw-serve/fw/engine"
)

// BYTES elements in JSON. A request's JSON string becomes the element's
// bytes: escapes decoded, every other byte taken as sent (bytes that are
// not UTF-8 included, as Triton takes them). A response writes an element
// as a JSON string. Under /v2 an output whose bytes are not UTF-8 is
// refused as JSON (firstNonUTF8; as Triton fails it), so that the client
// asks for it with binary_data and receives its exact bytes; fw's own
// routes, which have no binary form, write such bytes as U+FFFD.

// appendStringElement appends the JSON string v (quotes included, as
// scanDoc validated its extent) to dst as one element of engine's
// serialized form: a 4-byte length, then the unescaped bytes. It never
// writes more than 4+len(v) bytes. ok is false for an invalid escape or a
// raw control character, which JSON does not allow.
func appendStringElement(dst []byte, v jv) ([]byte, error) {
	head := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	s := v[1 : len(v)-1]
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20:
			return dst[:head], fmt.Errorf("a string holds the control character %#x; escape it (\\u%04x)", c, c)
		case c != '\\':
			dst = append(dst, c)
			continue
		}
		i++
		if i >= len(s) {
			return dst[:head], fmt.Errorf("a string ends with a lone backslash")
		}
		switch s[i] {
		case '"', '\\', '/':
			dst = append(dst, s[i])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s[i+1:])
			if !ok {
				return dst[:head], fmt.Errorf("a string holds an invalid \\u escape")
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+2 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					if x, ok := hex4(s[i+3:]); ok {
						r2 = x
					}
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError // a lone surrogate, as encoding/json reads it
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst[:head], fmt.Errorf("a string holds the invalid escape \\%c", s[i])
		}
	}
	binary.LittleEndian.PutUint32(dst[head:], uint32(len(dst)-head-engine.StringHeader))
	return dst, nil
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// appendJSONString appends s as a JSON string literal: '"', '\\' and
// control characters escaped, bytes that are not UTF-8 written as U+FFFD,
// so the answer is always valid JSON.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+n]...)
			}
			i += n
			continue
		}
		i++
	}
	return append(b, '"')
}

// appendJSONBytes is appendJSONString for a BYTES element.
func appendJSONBytes(b, s []byte) []byte { return appendJSONString(b, unsafeString(s)) }

// firstNonUTF8 returns the index of the first element of a BYTES tensor
// that is not valid UTF-8, or -1.
func firstNonUTF8(t engine.Tensor) int {
	elems, err := t.Strings()
	if err != nil {
		return -1 // the batcher checked every output: unreachable
	}
	for i, e := range elems {
		if !utf8.Valid(e) {
			return i
		}
	}
	return -1
}
