package httpapi

// A JSON scanner over the request body's bytes, for the prediction
// endpoints. A parser that builds a tree (fastjson) costs about 80 bytes per
// number plus a copy of the body: a 64 MB body of numbers became gigabytes
// before any limit was looked at. Here a body is first validated in one pass
// that allocates nothing; values are then byte ranges of the body (jv), read
// on demand, and numbers go straight into the tensor's buffer, sized from a
// count checked against the body (decodeRows, the V2 decoder).
//
// The grammar accepted is fastjson's, which served these endpoints before:
// numbers are read loosely here (any run of digits, signs, dots and
// exponents, and NaN/Inf spelled in any case) and checked when converted.

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/valyala/fastjson"
)

// scanMaxDepth bounds the nesting of a body (fastjson's limit).
const scanMaxDepth = 300

// syntaxError is a JSON syntax error at a byte offset of the scanned value.
type syntaxError struct {
	off   int
	msg   string
	depth bool // the value nests deeper than scanMaxDepth
}

func (e *syntaxError) Error() string { return fmt.Sprintf("%s at byte %d", e.msg, e.off) }

func isWS(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

func skipWS(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

// scanDoc validates b as one JSON value with only whitespace around it and
// returns that value. It allocates nothing unless b is invalid.
func scanDoc(b []byte) (jv, error) {
	i := skipWS(b, 0)
	end, err := scanValue(b, i, 0)
	if err != nil {
		return nil, err
	}
	if j := skipWS(b, end); j != len(b) {
		return nil, &syntaxError{off: j, msg: "unexpected data after the JSON value"}
	}
	return jv(b[i:end]), nil
}

// scanValue validates the value starting at b[i] and returns its end.
func scanValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return i, &syntaxError{off: i, msg: "unexpected end of JSON"}
	}
	switch b[i] {
	case '{':
		if depth >= scanMaxDepth {
			return i, &syntaxError{off: i, msg: fmt.Sprintf("nested deeper than %d levels", scanMaxDepth), depth: true}
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, nil
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return i, &syntaxError{off: i, msg: "expected a string key"}
			}
			end, err := scanString(b, i)
			if err != nil {
				return end, err
			}
			i = skipWS(b, end)
			if i >= len(b) || b[i] != ':' {
				return i, &syntaxError{off: i, msg: "expected ':' after an object key"}
			}
			if i, err = scanValue(b, skipWS(b, i+1), depth+1); err != nil {
				return i, err
			}
			i = skipWS(b, i)
			if i < len(b) && b[i] == ',' {
				i = skipWS(b, i+1)
				continue
			}
			if i < len(b) && b[i] == '}' {
				return i + 1, nil
			}
			return i, &syntaxError{off: i, msg: "expected ',' or '}' in an object"}
		}
	case '[':
		if depth >= scanMaxDepth {
			return i, &syntaxError{off: i, msg: fmt.Sprintf("nested deeper than %d levels", scanMaxDepth), depth: true}
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, nil
		}
		for {
			var err error
			if i, err = scanValue(b, i, depth+1); err != nil {
				return i, err
			}
			i = skipWS(b, i)
			if i < len(b) && b[i] == ',' {
				i = skipWS(b, i+1)
				continue
			}
			if i < len(b) && b[i] == ']' {
				return i + 1, nil
			}
			return i, &syntaxError{off: i, msg: "expected ',' or ']' in an array"}
		}
	case '"':
		return scanString(b, i)
	case 't':
		return scanLiteral(b, i, "true")
	case 'f':
		return scanLiteral(b, i, "false")
	case 'n':
		if len(b)-i >= 4 && string(b[i:i+4]) == "null" {
			return i + 4, nil
		}
	}
	end := numberEnd(b, i)
	if end == i {
		return i, &syntaxError{off: i, msg: fmt.Sprintf("unexpected character %q", b[i])}
	}
	return end, nil
}

func scanLiteral(b []byte, i int, lit string) (int, error) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), nil
	}
	return i, &syntaxError{off: i, msg: fmt.Sprintf("expected %s", lit)}
}

// scanString returns the end of the string starting at b[i] (a '"').
func scanString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			return j + 1, nil
		case '\\':
			j++
		}
	}
	return len(b), &syntaxError{off: i, msg: "unterminated string"}
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// fastFloat reads the number token at b[i] in one pass, for the common
// case: a JSON number of at most 19 significant digits whose value
// float64 arithmetic gets exactly (a mantissa below 2^53 times or over a
// power of ten up to 1e22: Clinger's fast path, as strconv takes it, so
// the result is strconv.ParseFloat's bit for bit). It returns the token's
// end (numberEnd's) and ok; anything else (more digits, a larger
// exponent, inf, nan, the loose grammar's oddities) is not ok, for the
// caller's general path.
func fastFloat(b []byte, i int) (f float64, end int, ok bool) {
	j := i
	neg := j < len(b) && b[j] == '-'
	if neg {
		j++
	}
	var m uint64
	digits, exp := 0, 0
	start := j
	for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
		if m == 0 && b[j] == '0' {
			continue // leading zeros are not significant
		}
		if digits == 19 {
			return 0, i, false
		}
		m = m*10 + uint64(b[j]-'0')
		digits++
	}
	if j == start {
		return 0, i, false // no integer digits
	}
	if j < len(b) && b[j] == '.' {
		j++
		fstart := j
		for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
			if m == 0 && b[j] == '0' {
				exp--
				continue
			}
			if digits == 19 {
				return 0, i, false
			}
			m = m*10 + uint64(b[j]-'0')
			digits++
			exp--
		}
		if j == fstart {
			return 0, i, false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		eneg := false
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			eneg = b[j] == '-'
			j++
		}
		estart, e := j, 0
		for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
			if e > 1000 {
				return 0, i, false
			}
			e = e*10 + int(b[j]-'0')
		}
		if j == estart {
			return 0, i, false
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	if j < len(b) {
		switch c := b[j]; {
		case c >= '0' && c <= '9', c == '.', c == '-', c == '+', c == 'e', c == 'E':
			return 0, i, false // the loose token goes on ("1-2"): the general path judges it
		}
	}
	switch {
	case m == 0:
		f = 0
	case m > 1<<53 || exp < -22 || exp > 22:
		return 0, i, false
	case exp < 0:
		f = float64(m) / pow10[-exp]
	default:
		f = float64(m) * pow10[exp]
	}
	if neg {
		f = -f
	}
	return f, j, true
}

// numberEnd returns the end of the number token at b[i], i itself if there
// is none: fastjson's loose grammar (the value is checked when converted).
func numberEnd(b []byte, i int) int {
	j := i
	for j < len(b) {
		c := b[j]
		if (c >= '0' && c <= '9') || c == '.' || c == '-' || c == 'e' || c == 'E' || c == '+' {
			j++
			continue
		}
		break
	}
	if j == i || (j == i+1 && (b[i] == '-' || b[i] == '+')) {
		if len(b)-j >= 3 {
			if w := string(b[j : j+3]); equalFold3(w, "inf") || equalFold3(w, "nan") {
				return j + 3
			}
		}
		return i
	}
	return j
}

func equalFold3(s, lower string) bool {
	for k := 0; k < 3; k++ {
		c := s[k]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[k] {
			return false
		}
	}
	return true
}

// skipValid returns the end of the value at b[i], which scanDoc validated:
// it only matches brackets and skips strings, several times faster than
// scanValue. On invalid input it stops at the end of b.
func skipValid(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		end, _ := scanString(b, i)
		return end
	case '[', '{':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _ := scanString(b, j)
				j = end - 1
			case '[', '{':
				depth++
			case ']', '}':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', ']', '}', ':', ' ', '\n', '\t', '\r':
			return j
		}
		j++
	}
	return j
}

// jv is one JSON value: its bytes within a body scanDoc validated. nil is
// an absent value.
type jv []byte

// Type is the value's JSON type (fastjson's names are used in messages).
func (v jv) Type() fastjson.Type {
	if len(v) == 0 {
		return fastjson.TypeNull
	}
	switch v[0] {
	case '{':
		return fastjson.TypeObject
	case '[':
		return fastjson.TypeArray
	case '"':
		return fastjson.TypeString
	case 't':
		return fastjson.TypeTrue
	case 'f':
		return fastjson.TypeFalse
	case 'n':
		if len(v) == 4 && string(v) == "null" {
			return fastjson.TypeNull
		}
	}
	return fastjson.TypeNumber
}

// String is the value's JSON text, for messages.
func (v jv) String() string { return string(v) }

// member is one key and value of an object. key is the raw string token.
type member struct {
	key jv
	val jv
}

// members lists an object's members (nil when v is not an object).
func (v jv) members() []member {
	if len(v) == 0 || v[0] != '{' {
		return nil
	}
	var out []member
	i := skipWS(v, 1)
	for i < len(v) && v[i] == '"' {
		kend, err := scanString(v, i)
		if err != nil {
			return out
		}
		j := skipWS(v, kend)
		if j >= len(v) || v[j] != ':' {
			return out
		}
		j = skipWS(v, j+1)
		vend := skipValid(v, j)
		out = append(out, member{v[i:kend], v[j:vend]})
		i = skipWS(v, vend)
		if i >= len(v) || v[i] != ',' {
			return out
		}
		i = skipWS(v, i+1)
	}
	return out
}

// keyIs reports whether the raw key token k spells name.
func keyIs(k jv, name string) bool {
	if len(k) == len(name)+2 && string(k[1:len(k)-1]) == name {
		return true
	}
	if len(k) < 2 || !containsByte(k, '\\') {
		return false
	}
	s, ok := k.str()
	return ok && s == name
}

func containsByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

// get returns the first member named key (nil when absent), as fastjson's
// Get did.
func get(ms []member, key string) jv {
	for _, m := range ms {
		if keyIs(m.key, key) {
			return m.val
		}
	}
	return nil
}

// str unescapes a string value.
func (v jv) str() (string, bool) {
	if v.Type() != fastjson.TypeString {
		return "", false
	}
	if !containsByte(v, '\\') {
		return string(v[1 : len(v)-1]), true
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false
	}
	return s, true
}

// forEach calls fn with each element of an array until fn returns false.
func (v jv) forEach(fn func(k int, e jv) bool) {
	if len(v) == 0 || v[0] != '[' {
		return
	}
	i := skipWS(v, 1)
	if i < len(v) && v[i] == ']' {
		return
	}
	for k := 0; i < len(v); k++ {
		end := skipValid(v, i)
		if !fn(k, v[i:end]) {
			return
		}
		i = skipWS(v, end)
		if i >= len(v) || v[i] != ',' {
			return
		}
		i = skipWS(v, i+1)
	}
}

// count is the number of elements of an array, counting at most max+1 when
// max >= 0 (so a limit is reported without reading the rest).
func (v jv) count(max int) int {
	n := 0
	v.forEach(func(int, jv) bool {
		n++
		return max < 0 || n <= max
	})
	return n
}

// float parses a number value (NaN and Inf included; out-of-range
// magnitudes become ±Inf or 0, as fastjson read them).
func (v jv) float() (float64, bool) {
	f, err := strconv.ParseFloat(unsafeString(v), 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); !ok || ne.Err != strconv.ErrRange {
			return 0, false
		}
	}
	return f, true
}

// int parses an integer value; an integral float up to 2^53 counts.
func (v jv) int() (int64, bool) {
	if n, err := strconv.ParseInt(unsafeString(v), 10, 64); err == nil {
		return n, true
	}
	f, ok := v.float()
	if !ok || f > 1<<53 || f < -(1<<53) || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

// rawID returns a string or number value as JSON to echo back ("id"), or
// nil when it is neither or does not re-encode cleanly.
func rawID(v jv) []byte {
	switch v.Type() {
	case fastjson.TypeString:
		s, ok := v.str()
		if !ok {
			return nil
		}
		return appendJSONString(nil, s)
	case fastjson.TypeNumber:
		if json.Valid(v) {
			return append([]byte(nil), v...)
		}
	}
	return nil
}

// unsafeString views b as a string without copying, for the strconv
// parsers, which do not keep it on success.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
