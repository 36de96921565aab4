package query

import (
	"strconv"
	"strings"
)

// Dialect is the SQL flavour to compile for.
type Dialect int

const (
	// SQLite uses ? placeholders.
	SQLite Dialect = iota
	// Postgres uses $1, $2, ... placeholders.
	Postgres
)

// Args collects bound parameters and hands out placeholders in the order
// they appear in the SQL text.
type Args struct {
	d    Dialect
	vals []any
}

// NewArgs returns an empty argument list for dialect d.
func NewArgs(d Dialect) *Args { return &Args{d: d} }

// Add binds v and returns its placeholder.
func (a *Args) Add(v any) string {
	a.vals = append(a.vals, v)
	if a.d == Postgres {
		return "$" + strconv.Itoa(len(a.vals))
	}
	return "?"
}

// Values returns the bound values in placeholder order.
func (a *Args) Values() []any { return a.vals }

// Compile renders e as a SQL boolean expression, binding every value through
// a. A nil expression compiles to a condition that is always true. Field
// names come only from the allow-list; a comparison on a missing value
// (absent tag, param or metric, NULL column) is false, and NOT inverts it.
func Compile(e Expr, a *Args) string {
	if e == nil {
		return "1=1"
	}
	var b strings.Builder
	compile(&b, e, a)
	return b.String()
}

func compile(b *strings.Builder, e Expr, a *Args) {
	switch e := e.(type) {
	case *And:
		b.WriteString("(")
		compile(b, e.L, a)
		b.WriteString(" AND ")
		compile(b, e.R, a)
		b.WriteString(")")
	case *Or:
		b.WriteString("(")
		compile(b, e.L, a)
		b.WriteString(" OR ")
		compile(b, e.R, a)
		b.WriteString(")")
	case *Not:
		b.WriteString("(NOT ")
		compile(b, e.X, a)
		b.WriteString(")")
	case *Compare:
		compileField(b, e.Field, a, func(col string, numCol, strCol string) {
			cond(b, e.Field, col, numCol, strCol, e.Op, e.Value, e.timeNanos, a)
		})
	case *In:
		if e.Negate {
			b.WriteString("(NOT ")
		}
		compileField(b, e.Field, a, func(col string, numCol, strCol string) {
			b.WriteString("(")
			for i, v := range e.Values {
				if i > 0 {
					b.WriteString(" OR ")
				}
				cond(b, e.Field, col, numCol, strCol, Eq, v, e.times[i], a)
			}
			b.WriteString(")")
		})
		if e.Negate {
			b.WriteString(")")
		}
	}
}

// compileField writes the frame around a condition on f: an EXISTS over the
// tags, params or metric summary table, or a NULL guard for columns. body
// writes the condition itself given the value expressions.
func compileField(b *strings.Builder, f Field, a *Args, body func(col, numCol, strCol string)) {
	switch f.Kind {
	case Column:
		b.WriteString("(" + f.sql + " IS NOT NULL AND ")
		body(f.sql, f.sql, f.sql)
		b.WriteString(")")
	case Tag:
		b.WriteString("EXISTS (SELECT 1 FROM " + tagFrom(f) + " AND t.key = " + a.Add(f.Key) + " AND ")
		body("t.value", "t.value", "t.value")
		b.WriteString(")")
	case ParamKey:
		b.WriteString("EXISTS (SELECT 1 FROM params p WHERE p.run_rid = r.rid AND p.key = " + a.Add(f.Key) + " AND ")
		body("p.value_str", "p.value_num", "p.value_str")
		b.WriteString(")")
	case Metric, System:
		kind := "0"
		if f.Kind == System {
			kind = "1"
		}
		col := "s." + aggColumn(f.Agg)
		b.WriteString("EXISTS (SELECT 1 FROM metric_summary s JOIN metric_keys k ON k.id = s.key_id WHERE s.run_rid = r.rid AND k.kind = " + kind + " AND k.name = " + a.Add(f.Key) + " AND ")
		body(col, col, col)
		b.WriteString(")")
	}
}

// tagFrom is the FROM and owner condition of the tag table for f's target.
func tagFrom(f Field) string {
	if f.sql == "experiment" {
		return "experiment_tags t WHERE t.experiment_id = x.id"
	}
	return "run_tags t WHERE t.run_rid = r.rid"
}

func aggColumn(agg string) string {
	switch agg {
	case "min":
		return "min_value"
	case "max":
		return "max_value"
	case "count":
		return "n"
	}
	return "last_value"
}

// cond writes one comparison of a value expression with a literal.
func cond(b *strings.Builder, f Field, col, numCol, strCol string, op Op, v Literal, ns int64, a *Args) {
	switch {
	case op == Like && a.d == Postgres:
		b.WriteString("LOWER(" + strCol + ") LIKE " + a.Add(GlobToLike(v.Str)) + ` ESCAPE '\'`)
	case op == Like: // SQLite's LIKE ignores ASCII case as its LOWER folds it: no LOWER per row (2-3x the scan)
		b.WriteString(strCol + " LIKE " + a.Add(GlobToLike(v.Str)) + ` ESCAPE '\'`)
	case op == Glob && a.d == Postgres: // PostgreSQL's LIKE keeps case
		b.WriteString(strCol + " LIKE " + a.Add(globToLike(v.Str, false)) + ` ESCAPE '\'`)
	case op == Glob: // SQLite's LIKE ignores ASCII case, its GLOB does not
		b.WriteString(strCol + " GLOB " + a.Add(sqliteGlob(v.Str)))
	case f.Type == Time:
		b.WriteString(col + " " + sqlOp(op) + " " + a.Add(ns))
	case f.Type == Bool:
		b.WriteString(col + " " + sqlOp(op) + " " + a.Add(int64(v.Num)))
	case f.Type == Param && v.IsNum:
		b.WriteString(numCol + " " + sqlOp(op) + " " + a.Add(v.Num))
	case f.Type == Param:
		b.WriteString(strCol + " " + sqlOp(op) + " " + a.Add(v.Str))
	case f.Type == Number:
		b.WriteString(numCol + " " + sqlOp(op) + " " + a.Add(v.Num))
	default:
		b.WriteString(strCol + " " + sqlOp(op) + " " + a.Add(v.Str))
	}
}

func sqlOp(op Op) string {
	if op == Ne {
		return "<>"
	}
	return string(op)
}

// GlobToLike turns a glob (* and ?) into a lower-case LIKE pattern with
// backslash escapes; a pattern without wildcards becomes "contains".
func GlobToLike(glob string) string { return globToLike(glob, true) }

// sqliteGlob is fw's glob as SQLite's GLOB pattern: '[' (a character class
// there) is matched literally; a pattern without wildcards is "contains".
func sqliteGlob(glob string) string {
	out := strings.ReplaceAll(glob, "[", "[[]")
	if !strings.ContainsAny(glob, "*?") {
		out = "*" + out + "*"
	}
	return out
}

func globToLike(glob string, lower bool) string {
	var b strings.Builder
	wild := strings.ContainsAny(glob, "*?")
	if !wild {
		b.WriteByte('%')
	}
	for _, r := range glob {
		switch r {
		case '*':
			b.WriteByte('%')
		case '?':
			b.WriteByte('_')
		case '%', '_', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			if lower && r >= 'A' && r <= 'Z' {
				r += 'a' - 'A'
			}
			b.WriteRune(r)
		}
	}
	if !wild {
		b.WriteByte('%')
	}
	return b.String()
}

// SortExprs are the SQL expressions a store orders by for a field: a
// DOUBLE PRECISION value, a BIGINT value and a TEXT value, any of which may
// be NULL. A row where all three are NULL lacks the field.
type SortExprs struct {
	Num, Int, Str string
}

// Sort renders the sort expressions for f, binding keys through a (in the
// order Num, Int, Str).
func Sort(f Field, a *Args) SortExprs {
	const nullNum, nullInt, nullStr = "CAST(NULL AS DOUBLE PRECISION)", "CAST(NULL AS BIGINT)", "CAST(NULL AS TEXT)"
	s := SortExprs{Num: nullNum, Int: nullInt, Str: nullStr}
	switch f.Kind {
	case Column:
		switch f.Type {
		case String:
			s.Str = f.sql
		case Number:
			s.Num = "CAST(" + f.sql + " AS DOUBLE PRECISION)"
		default:
			s.Int = "CAST(" + f.sql + " AS BIGINT)"
		}
	case Tag:
		s.Str = "(SELECT t.value FROM " + tagFrom(f) + " AND t.key = " + a.Add(f.Key) + ")"
	case ParamKey:
		s.Num = "(SELECT p.value_num FROM params p WHERE p.run_rid = r.rid AND p.key = " + a.Add(f.Key) + ")"
		s.Str = "(SELECT p.value_str FROM params p WHERE p.run_rid = r.rid AND p.key = " + a.Add(f.Key) + " AND p.value_num IS NULL)"
	case Metric, System:
		kind := "0"
		if f.Kind == System {
			kind = "1"
		}
		s.Num = "(SELECT CAST(s." + aggColumn(f.Agg) + " AS DOUBLE PRECISION) FROM metric_summary s JOIN metric_keys k ON k.id = s.key_id WHERE s.run_rid = r.rid AND k.kind = " + kind + " AND k.name = " + a.Add(f.Key) + ")"
	}
	return s
}
