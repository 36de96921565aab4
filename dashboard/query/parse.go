package query

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Target is the kind of row a filter selects: it picks the field allow-list.
type Target int

const (
	// Runs filters runs (table alias r, joined with its experiment as e).
	Runs Target = iota
	// Experiments filters experiments (table alias x).
	Experiments
)

// Type is the value type of a field.
type Type int

const (
	// String fields compare with string literals (and ~).
	String Type = iota
	// Number fields compare with number literals.
	Number
	// Time fields compare with RFC 3339 strings or numbers (Unix seconds).
	Time
	// Bool fields compare with true or false, = and != only.
	Bool
	// Param fields (params.KEY) compare with strings or numbers.
	Param
)

// Kind says where a field's value lives.
type Kind int

const (
	// Column is a column of the run, its experiment, or the experiment.
	Column Kind = iota
	// Tag is tags.KEY.
	Tag
	// ParamKey is params.KEY.
	ParamKey
	// Metric is metrics.KEY[.AGG].
	Metric
	// System is system.KEY[.AGG] (system metrics of the training process).
	System
)

// Field is a resolved field reference.
type Field struct {
	// Kind says where the value lives.
	Kind Kind
	// Name is the column name for Column fields.
	Name string
	// Key is the tag, param or metric key.
	Key string
	// Agg is last, min, max or count for metric fields.
	Agg string
	// Type is the field's value type.
	Type Type
	// Pos is the 1-based column of the field in the filter text.
	Pos int

	sql string // column expression for Column fields
}

// String renders the field as it would be written in a filter.
func (f Field) String() string {
	quote := quoteString
	switch f.Kind {
	case Tag:
		return "tags." + quote(f.Key)
	case ParamKey:
		return "params." + quote(f.Key)
	case Metric:
		return "metrics." + quote(f.Key) + "." + f.Agg
	case System:
		return "system." + quote(f.Key) + "." + f.Agg
	}
	return f.Name
}

type column struct {
	sql string
	typ Type
}

// runColumns is the allow-list of run columns. SQL aliases: r = runs,
// e = the run's experiment.
func runColumns() map[string]column {
	return map[string]column{
		"id":            {"r.id", String},
		"name":          {"r.name", String},
		"status":        {"r.status", String},
		"experiment":    {"e.name", String},
		"experiment_id": {"e.id", String},
		"created":       {"r.created", Time},
		"updated":       {"r.updated", Time},
		"started":       {"r.started", Time},
		"ended":         {"r.ended", Time},
		"step":          {"r.step", Number},
		"total_steps":   {"r.total_steps", Number},
		"epoch":         {"r.epoch", Number},
		"total_epochs":  {"r.total_epochs", Number},
		"exit_code":     {"r.exit_code", Number},
		"error":         {"r.error", String},
		"parent":        {"r.parent_run_id", String},
		"git_commit":    {"r.git_commit", String},
		"recipe":        {"r.source_recipe", String},
		"command":       {"r.source_command", String},
	}
}

// experimentColumns is the allow-list of experiment columns (alias x).
func experimentColumns() map[string]column {
	return map[string]column{
		"id":          {"x.id", String},
		"name":        {"x.name", String},
		"description": {"x.description", String},
		"created":     {"x.created", Time},
		"updated":     {"x.updated", Time},
		"archived":    {"x.archived", Bool},
	}
}

func isStatus(s string) bool {
	switch s {
	case "queued", "running", "finished", "failed", "stopped":
		return true
	}
	return false
}

func isAgg(s string) bool {
	switch s {
	case "last", "min", "max", "count":
		return true
	}
	return false
}

// Fields lists the plain column fields of a target, for documentation and
// error messages.
func Fields(t Target) []string {
	m := runColumns()
	if t == Experiments {
		m = experimentColumns()
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sortStrings(out)
	return out
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// Op is a comparison operator.
type Op string

// Comparison operators.
const (
	Eq   Op = "="
	Ne   Op = "!="
	Lt   Op = "<"
	Le   Op = "<="
	Gt   Op = ">"
	Ge   Op = ">="
	Like Op = "~"
	// Glob is LIKE with case: `*` and `?` as in LIKE, letters compared
	// exactly (MLflow's LIKE; its ILIKE is fw's LIKE).
	Glob Op = "GLOB"
)

// Literal is a string, number or boolean constant.
type Literal struct {
	// Str is the decoded string (for strings) or the source text (numbers).
	Str string
	// Num is the number's value.
	Num float64
	// IsNum is true for numbers.
	IsNum bool
	// IsBool is true for true and false (Num is 1 or 0).
	IsBool bool
	// Pos is the literal's 1-based column.
	Pos int
}

// Expr is a node of a parsed filter.
type Expr interface {
	// String renders the node back as filter text (fully parenthesised).
	String() string
	node()
}

// And is L AND R.
type And struct{ L, R Expr }

// Or is L OR R.
type Or struct{ L, R Expr }

// Not is NOT X.
type Not struct{ X Expr }

// Compare is Field Op Value.
type Compare struct {
	Field Field
	Op    Op
	Value Literal
	// timeNanos is the literal converted for Time fields.
	timeNanos int64
}

// NameSearch returns the text of a `name ~ 'text'` condition that every
// row expr matches must meet (expr is the condition, or an AND with it on
// one side): the runs table's name search, which an index of names can
// narrow before the filter is checked on each run.
func NameSearch(expr Expr) (string, bool) {
	switch e := expr.(type) {
	case *Compare:
		if e.Field.Kind == Column && e.Field.Name == "name" && e.Op == Like {
			return e.Value.Str, true
		}
	case *And:
		if t, ok := NameSearch(e.L); ok {
			return t, true
		}
		return NameSearch(e.R)
	}
	return "", false
}

// In is Field [NOT] IN (Values...).
type In struct {
	Field  Field
	Values []Literal
	Negate bool
	times  []int64
}

func (*And) node()     {}
func (*Or) node()      {}
func (*Not) node()     {}
func (*Compare) node() {}
func (*In) node()      {}

func (e *And) String() string { return "(" + e.L.String() + " AND " + e.R.String() + ")" }
func (e *Or) String() string  { return "(" + e.L.String() + " OR " + e.R.String() + ")" }
func (e *Not) String() string { return "NOT " + e.X.String() }
func (e *Compare) String() string {
	return e.Field.String() + " " + string(e.Op) + " " + e.Value.String()
}
func (e *In) String() string {
	parts := make([]string, len(e.Values))
	for i, v := range e.Values {
		parts[i] = v.String()
	}
	not := ""
	if e.Negate {
		not = "NOT "
	}
	return e.Field.String() + " " + not + "IN (" + strings.Join(parts, ", ") + ")"
}

// String renders the literal as filter text.
func (l Literal) String() string {
	if l.IsBool {
		if l.Num != 0 {
			return "true"
		}
		return "false"
	}
	if l.IsNum {
		return strconv.FormatFloat(l.Num, 'g', -1, 64)
	}
	return quoteString(l.Str)
}

// quoteString writes s as a filter string literal: double quotes, with
// backslash escapes for \, ", newline and tab only (what the lexer reads).
func quoteString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

type parser struct {
	toks   []token
	i      int
	target Target
	depth  int
}

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 100

// Parse parses a filter for the given target. The empty (or all-space)
// filter parses to nil, which matches everything. Every field is checked
// against the target's allow-list and every literal against the field's
// type here, so whatever Parse accepts, Compile compiles.
func Parse(src string, t Target) (Expr, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	if toks[0].kind == tEOF {
		return nil, nil
	}
	p := &parser{toks: toks, target: t}
	e, err := p.or()
	if err != nil {
		return nil, err
	}
	if tok := p.peek(); tok.kind != tEOF {
		return nil, &Error{Column: tok.pos, Msg: "expected AND, OR or end of input, found " + tok.describe()}
	}
	return e, nil
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) keyword(word string) bool {
	t := p.peek()
	return t.kind == tIdent && strings.EqualFold(t.text, word)
}

func (p *parser) or() (Expr, error) {
	l, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.keyword("OR") {
		p.next()
		r, err := p.and()
		if err != nil {
			return nil, err
		}
		l = &Or{L: l, R: r}
	}
	return l, nil
}

func (p *parser) and() (Expr, error) {
	l, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.keyword("AND") {
		p.next()
		r, err := p.unary()
		if err != nil {
			return nil, err
		}
		l = &And{L: l, R: r}
	}
	return l, nil
}

func (p *parser) unary() (Expr, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxDepth {
		return nil, &Error{Column: p.peek().pos, Msg: fmt.Sprintf("filter nested deeper than %d", maxDepth)}
	}
	if p.keyword("NOT") {
		p.next()
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &Not{X: x}, nil
	}
	if p.peek().kind == tLParen {
		p.next()
		e, err := p.or()
		if err != nil {
			return nil, err
		}
		if t := p.peek(); t.kind != tRParen {
			return nil, &Error{Column: t.pos, Msg: "expected ')', found " + t.describe()}
		}
		p.next()
		return e, nil
	}
	return p.comparison()
}

func isKeyword(s string) bool {
	switch strings.ToUpper(s) {
	case "AND", "OR", "NOT", "IN", "LIKE", "GLOB":
		return true
	}
	return false
}

func (p *parser) comparison() (Expr, error) {
	t := p.peek()
	if t.kind != tIdent || isKeyword(t.text) {
		return nil, &Error{Column: t.pos, Msg: "expected a field name, found " + t.describe()}
	}
	var segs []string
	for {
		s := p.next()
		segs = append(segs, s.text)
		if p.peek().kind != tDot {
			break
		}
		p.next()
		if n := p.peek(); n.kind != tIdent && n.kind != tString {
			return nil, &Error{Column: n.pos, Msg: "expected a name after '.', found " + n.describe()}
		}
	}
	f, err := resolve(segs, p.target, t.pos)
	if err != nil {
		return nil, err
	}
	opTok := p.peek()
	switch {
	case p.keyword("NOT") || p.keyword("IN"):
		neg := false
		if p.keyword("NOT") {
			p.next()
			neg = true
			if !p.keyword("IN") {
				t := p.peek()
				return nil, &Error{Column: t.pos, Msg: "expected IN after NOT, found " + t.describe()}
			}
		}
		p.next()
		if t := p.peek(); t.kind != tLParen {
			return nil, &Error{Column: t.pos, Msg: "expected '(' after IN, found " + t.describe()}
		}
		p.next()
		in := &In{Field: f, Negate: neg}
		for {
			lit, err := p.literal()
			if err != nil {
				return nil, err
			}
			ns, err := check(f, Eq, lit)
			if err != nil {
				return nil, err
			}
			in.Values = append(in.Values, lit)
			in.times = append(in.times, ns)
			t := p.next()
			if t.kind == tRParen {
				break
			}
			if t.kind != tComma {
				return nil, &Error{Column: t.pos, Msg: "expected ',' or ')', found " + t.describe()}
			}
			if len(in.Values) >= 1000 {
				return nil, &Error{Column: t.pos, Msg: "more than 1000 values in IN"}
			}
		}
		return in, nil
	case opTok.kind == tOp || p.keyword("LIKE") || p.keyword("GLOB"):
		p.next()
		op := Op(opTok.text)
		if opTok.kind == tIdent {
			op = Like
			if strings.EqualFold(opTok.text, "GLOB") {
				op = Glob
			}
		}
		lit, err := p.literal()
		if err != nil {
			return nil, err
		}
		ns, err := check(f, op, lit)
		if err != nil {
			return nil, err
		}
		return &Compare{Field: f, Op: op, Value: lit, timeNanos: ns}, nil
	}
	return nil, &Error{Column: opTok.pos, Msg: "expected an operator (=, !=, <, <=, >, >=, ~, LIKE, GLOB, IN) after " + f.String() + ", found " + opTok.describe()}
}

func (p *parser) literal() (Literal, error) {
	t := p.next()
	switch {
	case t.kind == tString:
		return Literal{Str: t.text, Pos: t.pos}, nil
	case t.kind == tNumber:
		return Literal{Str: t.text, Num: t.num, IsNum: true, Pos: t.pos}, nil
	case t.kind == tIdent && strings.EqualFold(t.text, "true"):
		return Literal{Str: "true", Num: 1, IsBool: true, Pos: t.pos}, nil
	case t.kind == tIdent && strings.EqualFold(t.text, "false"):
		return Literal{Str: "false", IsBool: true, Pos: t.pos}, nil
	}
	return Literal{}, &Error{Column: t.pos, Msg: "expected a string or number, found " + t.describe()}
}

// resolve maps a dotted path onto the target's allow-list.
func resolve(segs []string, t Target, pos int) (Field, error) {
	head := strings.ToLower(segs[0])
	rest := segs[1:]
	cols := runColumns()
	if t == Experiments {
		cols = experimentColumns()
	}
	if len(rest) == 0 {
		c, ok := cols[head]
		if !ok {
			return Field{}, &Error{Column: pos, Msg: fmt.Sprintf("unknown field %q (known: %s, tags.KEY%s)", segs[0], strings.Join(Fields(t), ", "), map[bool]string{true: ", params.KEY, metrics.KEY[.last|min|max|count], system.KEY[.AGG]"}[t == Runs])}
		}
		return Field{Kind: Column, Name: head, Type: c.typ, Pos: pos, sql: c.sql}, nil
	}
	key := strings.Join(rest, ".")
	if key == "" || len(key) > 250 {
		return Field{}, &Error{Column: pos, Msg: "key must be 1 to 250 bytes"}
	}
	switch {
	case head == "tags":
		owner := "run"
		if t == Experiments {
			owner = "experiment"
		}
		return Field{Kind: Tag, Key: key, Type: String, Pos: pos, sql: owner}, nil
	case head == "params" && t == Runs:
		return Field{Kind: ParamKey, Key: key, Type: Param, Pos: pos}, nil
	case (head == "metrics" || head == "system") && t == Runs:
		agg := "last"
		if len(rest) > 1 && isAgg(strings.ToLower(rest[len(rest)-1])) {
			agg = strings.ToLower(rest[len(rest)-1])
			key = strings.Join(rest[:len(rest)-1], ".")
		}
		k := Metric
		if head == "system" {
			k = System
		}
		return Field{Kind: k, Key: key, Agg: agg, Type: Number, Pos: pos}, nil
	}
	return Field{}, &Error{Column: pos, Msg: fmt.Sprintf("unknown field %q", strings.Join(segs, "."))}
}

// ParseField parses a single field reference (for sorting), e.g. "created",
// "params.lr" or "metrics.val_acc.max".
func ParseField(src string, t Target) (Field, error) {
	toks, err := lex(src)
	if err != nil {
		return Field{}, err
	}
	var segs []string
	i := 0
	for {
		tok := toks[i]
		if tok.kind != tIdent && (tok.kind != tString || i == 0) {
			return Field{}, &Error{Column: tok.pos, Msg: "expected a field name, found " + tok.describe()}
		}
		segs = append(segs, tok.text)
		i++
		if toks[i].kind == tEOF {
			break
		}
		if toks[i].kind != tDot {
			return Field{}, &Error{Column: toks[i].pos, Msg: "expected '.' or end of input, found " + toks[i].describe()}
		}
		i++
	}
	return resolve(segs, t, 1)
}

// check validates a literal against a field and operator; for Time fields it
// returns the literal as Unix nanoseconds.
func check(f Field, op Op, lit Literal) (int64, error) {
	bad := func(msg string) (int64, error) { return 0, &Error{Column: lit.Pos, Msg: msg} }
	if (op == Like || op == Glob) && (lit.IsNum || lit.IsBool) {
		return bad("~, LIKE and GLOB need a string pattern")
	}
	switch f.Type {
	case String:
		if lit.IsBool {
			return bad(f.String() + " is a string field: expected a string")
		}
		if lit.IsNum && f.Kind != Tag {
			return bad(f.String() + " is a string field: expected a string, found number " + lit.Str)
		}
		if f.Kind == Column && f.Name == "status" && op != Like && op != Glob && !isStatus(lit.Str) {
			return bad(fmt.Sprintf("unknown status %q (queued, running, finished, failed, stopped)", lit.Str))
		}
	case Number:
		if !lit.IsNum {
			return bad(f.String() + " is a number field: expected a number")
		}
	case Bool:
		if !lit.IsBool || (op != Eq && op != Ne) {
			return bad(f.String() + " is true or false: use = true or = false")
		}
	case Time:
		if op == Like || op == Glob {
			return bad(f.String() + " is a time: ~ does not apply")
		}
		if lit.IsBool {
			return bad(f.String() + " is a time: expected an RFC 3339 string or Unix seconds")
		}
		if lit.IsNum {
			if math.Abs(lit.Num) > 9e9 {
				return bad("time out of range")
			}
			return int64(lit.Num * 1e9), nil
		}
		ts, err := time.Parse(time.RFC3339Nano, lit.Str)
		if err != nil {
			d, err2 := time.Parse("2006-01-02", lit.Str)
			if err2 != nil {
				return bad(fmt.Sprintf("%q is not an RFC 3339 time or a date (2006-01-02)", lit.Str))
			}
			ts = d
		}
		if ts.Year() < 1678 || ts.Year() > 2261 {
			return bad("time out of range")
		}
		return ts.UnixNano(), nil
	case Param:
		// strings, numbers and booleans all apply
	}
	return 0, nil
}
