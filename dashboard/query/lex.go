// Package query parses the dashboard's filter language and compiles it to
// parameterised SQL for the experiment store (SQLite and PostgreSQL).
//
// Grammar (keywords are case-insensitive):
//
//	expr       = or
//	or         = and { "OR" and }
//	and        = unary { "AND" unary }
//	unary      = "NOT" unary | primary
//	primary    = "(" expr ")" | comparison
//	comparison = field op literal
//	           | field [ "NOT" ] "IN" "(" literal { "," literal } ")"
//	op         = "=" | "!=" | "<" | "<=" | ">" | ">=" | "~" | "LIKE"
//	field      = segment { "." segment }
//	segment    = ident | string
//	literal    = string | number | "true" | "false"
//
// Strings use double or single quotes with backslash escapes (\" \' \\ \n \t).
// Numbers are decimal with an optional sign, fraction and exponent. `~` and
// LIKE are the same operator: a case-insensitive glob (`*` any run of
// characters, `?` one character); a pattern without `*` or `?` matches as
// "contains". Field names go through an allow-list per Target; values are
// always bound as SQL parameters, never spliced into the SQL text.
package query

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLength is the longest filter text Parse accepts, in bytes.
const MaxLength = 4096

// Error is a parse error with the 1-based column (in characters) where it
// was found.
type Error struct {
	// Column is the 1-based character position of the problem.
	Column int
	// Msg says what was expected or found.
	Msg string
}

// Error implements error: "expected ')' at column 23".
func (e *Error) Error() string { return fmt.Sprintf("%s at column %d", e.Msg, e.Column) }

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tString
	tNumber
	tLParen
	tRParen
	tComma
	tDot
	tOp
)

type token struct {
	kind tokKind
	text string // identifier, decoded string, number text or operator
	pos  int    // 1-based column in characters
	num  float64
}

func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "end of input"
	case tString:
		return fmt.Sprintf("string %q", t.text)
	case tNumber:
		return "number " + t.text
	case tIdent:
		return fmt.Sprintf("%q", t.text)
	default:
		return fmt.Sprintf("'%s'", t.text)
	}
}

// lex splits src into tokens; columns count characters (runes), from 1.
func lex(src string) ([]token, error) {
	if len(src) > MaxLength {
		return nil, &Error{Column: 1, Msg: fmt.Sprintf("filter longer than %d bytes", MaxLength)}
	}
	if !utf8.ValidString(src) {
		return nil, &Error{Column: 1, Msg: "filter is not valid UTF-8"}
	}
	rs := []rune(src)
	var toks []token
	i := 0
	for i < len(rs) {
		c := rs[i]
		pos := i + 1
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '(':
			toks = append(toks, token{kind: tLParen, text: "(", pos: pos})
			i++
		case c == ')':
			toks = append(toks, token{kind: tRParen, text: ")", pos: pos})
			i++
		case c == ',':
			toks = append(toks, token{kind: tComma, text: ",", pos: pos})
			i++
		case c == '.' && (len(toks) > 0 && (toks[len(toks)-1].kind == tIdent || toks[len(toks)-1].kind == tString) || !(i+1 < len(rs) && isDigit(rs[i+1]))):
			toks = append(toks, token{kind: tDot, text: ".", pos: pos})
			i++
		case c == '=' || c == '~':
			toks = append(toks, token{kind: tOp, text: string(c), pos: pos})
			i++
		case c == '!' || c == '<' || c == '>':
			if i+1 < len(rs) && rs[i+1] == '=' {
				toks = append(toks, token{kind: tOp, text: string(c) + "=", pos: pos})
				i += 2
			} else if c == '!' {
				return nil, &Error{Column: pos, Msg: "expected '=' after '!'"}
			} else {
				toks = append(toks, token{kind: tOp, text: string(c), pos: pos})
				i++
			}
		case c == '"' || c == '\'':
			var b strings.Builder
			j := i + 1
			closed := false
			for j < len(rs) {
				d := rs[j]
				if d == c {
					closed = true
					j++
					break
				}
				if d == '\\' {
					if j+1 >= len(rs) {
						break
					}
					switch e := rs[j+1]; e {
					case 'n':
						b.WriteRune('\n')
					case 't':
						b.WriteRune('\t')
					case '\\', '"', '\'':
						b.WriteRune(e)
					default:
						return nil, &Error{Column: j + 1, Msg: fmt.Sprintf("unknown escape '\\%c'", e)}
					}
					j += 2
					continue
				}
				b.WriteRune(d)
				j++
			}
			if !closed {
				return nil, &Error{Column: pos, Msg: "unterminated string"}
			}
			toks = append(toks, token{kind: tString, text: b.String(), pos: pos})
			i = j
		case isDigit(c) || c == '-' || c == '+' || c == '.':
			j := i
			if rs[j] == '-' || rs[j] == '+' {
				j++
			}
			digits := 0
			for j < len(rs) && isDigit(rs[j]) {
				j++
				digits++
			}
			if j < len(rs) && rs[j] == '.' {
				j++
				for j < len(rs) && isDigit(rs[j]) {
					j++
					digits++
				}
			}
			if digits == 0 {
				return nil, &Error{Column: pos, Msg: "expected a number"}
			}
			if j < len(rs) && (rs[j] == 'e' || rs[j] == 'E') {
				k := j + 1
				if k < len(rs) && (rs[k] == '-' || rs[k] == '+') {
					k++
				}
				if k < len(rs) && isDigit(rs[k]) {
					for k < len(rs) && isDigit(rs[k]) {
						k++
					}
					j = k
				} else {
					return nil, &Error{Column: j + 1, Msg: "expected exponent digits"}
				}
			}
			text := string(rs[i:j])
			var f float64
			if _, err := fmt.Sscan(text, &f); err != nil {
				return nil, &Error{Column: pos, Msg: fmt.Sprintf("invalid number %q", text)}
			}
			if f != f || f > 1e308 || f < -1e308 {
				return nil, &Error{Column: pos, Msg: fmt.Sprintf("number %s out of range", text)}
			}
			toks = append(toks, token{kind: tNumber, text: text, pos: pos, num: f})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(rs) && isIdentPart(rs[j]) {
				j++
			}
			toks = append(toks, token{kind: tIdent, text: string(rs[i:j]), pos: pos})
			i = j
		default:
			return nil, &Error{Column: pos, Msg: fmt.Sprintf("unexpected character %q", c)}
		}
	}
	toks = append(toks, token{kind: tEOF, pos: len(rs) + 1})
	return toks, nil
}

func isDigit(c rune) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c rune) bool { return c == '_' || unicode.IsLetter(c) }
func isIdentPart(c rune) bool {
	return c == '_' || c == '-' || c == '/' || unicode.IsLetter(c) || unicode.IsDigit(c)
}
