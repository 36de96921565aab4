package mlflow

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/fw-serve/fw/dashboard/store"
)

// quote writes s as a string literal of fw's filter language.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}

func (s *Server) searchRuns(r *request) (any, *apiError) {
	expIDs, e := r.strs("experiment_ids")
	if e != nil {
		return nil, e
	}
	filter, e := r.str("filter")
	if e != nil {
		return nil, e
	}
	view, e := r.str("run_view_type")
	if e != nil {
		return nil, e
	}
	maxResults, set, e := r.int64Field("max_results")
	if e != nil {
		return nil, e
	}
	if !set {
		maxResults = 1000
	}
	if maxResults < 1 || maxResults > maxResultsRuns {
		return nil, errf(400, codeInvalidParameter, "Invalid value %d for parameter 'max_results' supplied. It must be at most %d", maxResults, maxResultsRuns)
	}
	orderBy, e := r.strs("order_by")
	if e != nil {
		return nil, e
	}
	token, e := r.str("page_token")
	if e != nil {
		return nil, e
	}
	fwFilter, e := translateFilter(filter, false)
	if e != nil {
		return nil, e
	}
	var ids []string // several experiments: each one's page read from its indexes, merged
	if len(expIDs) > 1 {
		ids = make([]string, 0, len(expIDs))
		for _, id := range expIDs {
			if id == "0" {
				fid, e := s.defaultExperimentID(r.ctx, false)
				if e != nil {
					return nil, e
				}
				id = fid
			}
			ids = append(ids, id)
		}
	}
	if v := viewFilter(view, "tags."+quote(lifecycleTag)+` = "deleted"`, "NOT tags."+quote(lifecycleTag)+` = "deleted"`); v != "" {
		fwFilter = and(fwFilter, v)
	}
	q := store.ListQuery{Filter: fwFilter, Limit: int(min(maxResults, 10000)), Sort: "started", Desc: true, IDAsc: true, Experiments: ids}
	if len(expIDs) == 1 { // the common case, through the store's experiment index
		id := expIDs[0]
		if id == "0" {
			if id, e = s.defaultExperimentID(r.ctx, false); e != nil {
				return nil, e
			}
		}
		q.Experiment = id
	}
	if len(orderBy) > 0 {
		// fw orders by one field (then by run ID); MLflow's further
		// order_by keys are accepted and not used (docs/mlflow.md).
		if q.Sort, q.Desc, e = translateOrder(orderBy[0], false); e != nil {
			return nil, e
		}
	}
	if q.Cursor, e = decodeToken(token); e != nil {
		return nil, e
	}
	page, err := s.st.ListRuns(r.ctx, q)
	if err != nil {
		return nil, s.fromStore(err, "searching runs")
	}
	out := struct {
		Runs          []run  `json:"runs"`
		NextPageToken string `json:"next_page_token,omitempty"`
	}{Runs: make([]run, 0, len(page.Runs)), NextPageToken: encodeToken(page.Next)}
	ctx := r.ctx
	for _, r := range page.Runs {
		out.Runs = append(out.Runs, s.toRun(ctx, r))
	}
	return out, nil
}

// The tokens of MLflow's search grammar (mlflow/utils/search_utils.py).
type mtok struct {
	kind byte // 'i' identifier, 's' string, 'n' number, 'o' operator, '(' ')' ','
	text string
	pos  int
}

func lexMLflow(src string) ([]mtok, *apiError) {
	var out []mtok
	rs := []rune(src)
	for i := 0; i < len(rs); {
		c := rs[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '(' || c == ')' || c == ',':
			out = append(out, mtok{kind: byte(c), text: string(c), pos: i + 1})
			i++
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			var b strings.Builder
			for ; j < len(rs) && rs[j] != c; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && (rs[j+1] == c || rs[j+1] == '\\') {
					j++ // \' and \\ escape; any other backslash is itself
				}
				b.WriteRune(rs[j])
			}
			if j >= len(rs) {
				return nil, errf(400, codeInvalidParameter, "Invalid filter: unterminated %c at column %d", c, i+1)
			}
			k := byte('s')
			if c == '`' {
				k = 'q' // a quoted identifier
			}
			out = append(out, mtok{kind: k, text: b.String(), pos: i + 1})
			i = j + 1
		case c == '=' || c == '!' || c == '<' || c == '>':
			j := i + 1
			if j < len(rs) && rs[j] == '=' {
				j++
			}
			op := string(rs[i:j])
			if op == "!" {
				return nil, errf(400, codeInvalidParameter, "Invalid filter: '!' at column %d (use !=)", i+1)
			}
			out = append(out, mtok{kind: 'o', text: op, pos: i + 1})
			i = j
		case c == '-' || c == '+' || c == '.' || unicode.IsDigit(c):
			j := i + 1
			for j < len(rs) && (unicode.IsDigit(rs[j]) || rs[j] == '.' || rs[j] == 'e' || rs[j] == 'E' ||
				((rs[j] == '-' || rs[j] == '+') && (rs[j-1] == 'e' || rs[j-1] == 'E'))) {
				j++
			}
			out = append(out, mtok{kind: 'n', text: string(rs[i:j]), pos: i + 1})
			i = j
		case unicode.IsLetter(c) || c == '_':
			j := i + 1
			for j < len(rs) && (unicode.IsLetter(rs[j]) || unicode.IsDigit(rs[j]) || rs[j] == '_' || rs[j] == '.' || rs[j] == '-' || rs[j] == '/' || rs[j] == ':') {
				j++
			}
			out = append(out, mtok{kind: 'i', text: string(rs[i:j]), pos: i + 1})
			i = j
		default:
			return nil, errf(400, codeInvalidParameter, "Invalid filter: unexpected character %q at column %d", c, i+1)
		}
	}
	return out, nil
}

// translateFilter turns an MLflow search filter into fw's filter language
// (dashboard/query): entity.key op value clauses joined by AND / OR with
// parentheses. Keys go through fw's quoting, values are literals, so the
// result is parsed (and bound as SQL parameters) by fw's query package.
func translateFilter(src string, experiments bool) (string, *apiError) {
	if strings.TrimSpace(src) == "" {
		return "", nil
	}
	if len(src) > 4000 {
		return "", errf(400, codeInvalidParameter, "the filter is %d bytes long; at most 4000", len(src))
	}
	toks, e := lexMLflow(src)
	if e != nil {
		return "", e
	}
	var b strings.Builder
	expectClause := true
	depth := 0
	for i := 0; i < len(toks); {
		t := toks[i]
		if !expectClause {
			switch {
			case t.kind == ')' && depth > 0:
				b.WriteString(")")
				depth--
				i++
				continue
			case t.kind == 'i' && (strings.EqualFold(t.text, "and") || strings.EqualFold(t.text, "or")):
				b.WriteString(" " + strings.ToUpper(t.text) + " ")
				expectClause = true
				i++
				continue
			}
			return "", errf(400, codeInvalidParameter, "Invalid filter %q: expected AND, OR or ')' at column %d", src, t.pos)
		}
		if t.kind == '(' {
			b.WriteString("(")
			depth++
			i++
			continue
		}
		clause, n, e := translateClause(src, toks[i:], experiments)
		if e != nil {
			return "", e
		}
		b.WriteString(clause)
		i += n
		expectClause = false
	}
	if expectClause || depth != 0 {
		return "", errf(400, codeInvalidParameter, "Invalid filter %q: it ends before a comparison or a ')'", src)
	}
	return b.String(), nil
}

// splitEntity splits "metrics.acc" (or an identifier followed by a quoted
// key: metrics.`my key`) into entity and key.
func splitEntity(toks []mtok) (entity, key string, n int, ok bool) {
	if len(toks) == 0 || toks[0].kind != 'i' {
		return "", "", 0, false
	}
	t := toks[0].text
	if strings.HasSuffix(t, ".") && len(toks) > 1 && (toks[1].kind == 'q' || toks[1].kind == 's') {
		return strings.TrimSuffix(t, "."), toks[1].text, 2, true
	}
	entity, key, found := strings.Cut(t, ".")
	if !found || key == "" {
		return "", "", 0, false
	}
	return entity, key, 1, true
}

// attribute columns of runs (MLflow name -> fw field, and whether MLflow
// times in milliseconds are compared).
func runAttribute(name string) (field string, ms bool, ok bool) {
	switch strings.ToLower(name) {
	case "run_id", "run_uuid":
		return "id", false, true
	case "run_name":
		return "name", false, true
	case "status":
		return "status", false, true
	case "start_time":
		return "started", true, true
	case "end_time":
		return "ended", true, true
	case "created":
		return "created", true, true
	case "user_id":
		return "tags." + quote(tagUser), false, true
	}
	return "", false, false
}

// attribute is runAttribute or experimentAttribute.
func attribute(name string, experiments bool) (field string, ms bool, ok bool) {
	if experiments {
		return experimentAttribute(name)
	}
	return runAttribute(name)
}

func experimentAttribute(name string) (field string, ms bool, ok bool) {
	switch strings.ToLower(name) {
	case "name":
		return "name", false, true
	case "creation_time":
		return "created", true, true
	case "last_update_time":
		return "updated", true, true
	case "experiment_id":
		return "id", false, true
	}
	return "", false, false
}

func translateClause(src string, toks []mtok, experiments bool) (string, int, *apiError) {
	bad := func(pos int, format string, args ...any) *apiError {
		return errf(400, codeInvalidParameter, "Invalid filter %q at column %d: %s", src, pos, fmt.Sprintf(format, args...))
	}
	entity, key, n, ok := splitEntity(toks)
	if !ok && toks[0].kind == 'i' && !strings.Contains(toks[0].text, ".") {
		entity, key, n, ok = "attributes", toks[0].text, 1, true // a bare attribute (MLflow's experiment search: name LIKE 'x%')
	}
	if !ok {
		return "", 0, bad(toks[0].pos, "expected entity.key (metrics.x, params.x, tags.x, attributes.x)")
	}
	var field string
	numeric, ms, status := false, false, false
	switch strings.ToLower(entity) {
	case "metric", "metrics":
		if experiments {
			return "", 0, bad(toks[0].pos, "experiments have no metrics")
		}
		field, numeric = "metrics."+quote(key)+".last", true
	case "param", "params", "parameter", "parameters":
		if experiments {
			return "", 0, bad(toks[0].pos, "experiments have no params")
		}
		field = "params." + quote(key)
	case "tag", "tags":
		field = "tags." + quote(key)
	case "attribute", "attributes", "attr", "run":
		var ok bool
		if field, ms, ok = attribute(key, experiments); !ok {
			return "", 0, bad(toks[0].pos, "fw cannot filter on attribute %q", key)
		}
		status = field == "status"
		numeric = ms
	case "dataset", "datasets":
		return "", 0, bad(toks[0].pos, "filtering on datasets is not supported by fw")
	default:
		return "", 0, bad(toks[0].pos, "unknown entity %q (use metrics, params, tags or attributes)", entity)
	}
	rest := toks[n:]
	if len(rest) == 0 {
		return "", 0, bad(len(src), "expected a comparison after %s.%s", entity, key)
	}
	op := rest[0]
	negate := false
	opText := ""
	switch {
	case op.kind == 'o':
		opText = op.text
		if opText == "==" {
			opText = "="
		}
	case op.kind == 'i' && strings.EqualFold(op.text, "like"):
		opText = "GLOB" // MLflow's LIKE keeps case: fw's GLOB
	case op.kind == 'i' && strings.EqualFold(op.text, "ilike"):
		opText = "LIKE" // fw's LIKE ignores case
	case op.kind == 'i' && strings.EqualFold(op.text, "in"):
		opText = "IN"
	case op.kind == 'i' && strings.EqualFold(op.text, "not") && len(rest) > 1 && rest[1].kind == 'i' && strings.EqualFold(rest[1].text, "in"):
		opText, negate = "IN", true
		rest = rest[1:]
		n++
	default:
		return "", 0, bad(op.pos, "expected a comparison operator, got %q", op.text)
	}
	n++
	rest = rest[1:]
	lit := func(t mtok) (string, *apiError) {
		switch {
		case t.kind == 'n':
			f, err := strconv.ParseFloat(t.text, 64)
			if err != nil {
				return "", bad(t.pos, "%q is not a number", t.text)
			}
			if ms {
				return strconv.FormatFloat(f/1000, 'f', -1, 64), nil // fw compares times in seconds
			}
			if !numeric && !strings.HasPrefix(field, "params.") {
				return quote(t.text), nil
			}
			return t.text, nil
		case t.kind == 's':
			if status {
				st, ok := fwStatus(t.text)
				if !ok {
					return "", bad(t.pos, "status %q is not one of RUNNING, SCHEDULED, FINISHED, FAILED, KILLED", t.text)
				}
				return quote(string(st)), nil
			}
			if numeric {
				if _, err := strconv.ParseFloat(t.text, 64); err != nil {
					return "", bad(t.pos, "%s compares with numbers, not %q", field, t.text)
				}
				if ms {
					f, _ := strconv.ParseFloat(t.text, 64)
					return strconv.FormatFloat(f/1000, 'f', -1, 64), nil
				}
				return t.text, nil
			}
			if opText == "LIKE" || opText == "GLOB" {
				return quote(likeToGlob(t.text)), nil
			}
			return quote(t.text), nil
		}
		return "", bad(t.pos, "expected a value, got %q", t.text)
	}
	if opText == "IN" {
		if len(rest) == 0 || rest[0].kind != '(' {
			return "", 0, bad(op.pos, "IN takes a parenthesised list of values")
		}
		var vals []string
		i := 1
		for ; i < len(rest); i++ {
			v, e := lit(rest[i])
			if e != nil {
				return "", 0, e
			}
			vals = append(vals, v)
			i++
			if i >= len(rest) {
				return "", 0, bad(len(src), "unterminated IN list")
			}
			if rest[i].kind == ')' {
				break
			}
			if rest[i].kind != ',' {
				return "", 0, bad(rest[i].pos, "expected ',' or ')' in the IN list")
			}
		}
		if i >= len(rest) {
			return "", 0, bad(len(src), "unterminated IN list")
		}
		kw := "IN ("
		if negate {
			kw = "NOT IN ("
		}
		return emit(field, kw+strings.Join(vals, ", ")+")"), n + i + 1, nil
	}
	if len(rest) == 0 {
		return "", 0, bad(len(src), "expected a value after %s", opText)
	}
	if (opText == "GLOB" || opText == "LIKE") && rest[0].kind == 's' && !strings.ContainsAny(rest[0].text, "%_") {
		opText = "=" // no wildcard: MLflow's LIKE is an exact match (fw's would be "contains")
	}
	v, e := lit(rest[0])
	if e != nil {
		return "", 0, e
	}
	if strings.HasPrefix(field, "params.") && rest[0].kind == 's' && (opText == "=" || opText == "!=") {
		// MLflow's params are strings; fw keeps a number logged by fw.track
		// as a number: '0.2' matches either form.
		if f, err := strconv.ParseFloat(rest[0].text, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			num := strconv.FormatFloat(f, 'g', -1, 64)
			if opText == "=" {
				return "(" + field + " = " + v + " OR " + field + " = " + num + ")", n + 1, nil
			}
			return "(" + field + " != " + v + " OR " + field + " != " + num + ")", n + 1, nil
		}
	}
	return emit(field, opText+" "+v), n + 1, nil
}

// emit writes one comparison (cmp is the operator and value). MLflow's
// run_name is the mlflow.runName tag (fw's run name is that name made
// valid for fw), else fw's name for runs logged without MLflow.
func emit(field, cmp string) string {
	if field != "name" {
		return field + " " + cmp
	}
	tag := "tags." + quote(tagRunName)
	return "(" + tag + " " + cmp + " OR (name " + cmp + " AND NOT " + tag + ` LIKE "*"))`
}

// likeToGlob turns SQL LIKE wildcards (% and _) into fw's glob (* and ?).
// fw's LIKE is case-insensitive (MLflow's ILIKE), its GLOB keeps case
// (MLflow's LIKE).
func likeToGlob(p string) string {
	var b strings.Builder
	for _, r := range p {
		switch r {
		case '%':
			b.WriteRune('*')
		case '_':
			b.WriteRune('?')
		case '*', '?':
			b.WriteRune('?') // fw's glob has no escape: a literal * or ? matches any one character
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// translateOrder turns one MLflow order_by clause ("metrics.acc DESC",
// "attributes.start_time", "params.`lr` ASC") into fw's sort field.
func translateOrder(clause string, experiments bool) (string, bool, *apiError) {
	toks, e := lexMLflow(clause)
	if e != nil {
		return "", false, e
	}
	entity, key, n, ok := splitEntity(toks)
	if !ok {
		// MLflow also accepts a bare attribute name.
		if len(toks) > 0 && toks[0].kind == 'i' {
			entity, key, n, ok = "attributes", toks[0].text, 1, true
		}
	}
	if !ok {
		return "", false, errf(400, codeInvalidParameter, "Invalid order_by clause %q: expected entity.key [ASC|DESC]", clause)
	}
	desc := false
	if len(toks) > n {
		switch strings.ToUpper(toks[n].text) {
		case "DESC":
			desc = true
		case "ASC":
		default:
			return "", false, errf(400, codeInvalidParameter, "Invalid order_by clause %q: expected ASC or DESC after the key", clause)
		}
		if len(toks) > n+1 {
			return "", false, errf(400, codeInvalidParameter, "Invalid order_by clause %q: one key and ASC or DESC", clause)
		}
	}
	switch strings.ToLower(entity) {
	case "metric", "metrics":
		if !experiments {
			return "metrics." + quote(key) + ".last", desc, nil
		}
	case "param", "params", "parameter", "parameters":
		if !experiments {
			return "params." + quote(key), desc, nil
		}
	case "tag", "tags":
		return "tags." + quote(key), desc, nil
	case "attribute", "attributes", "attr", "run":
		if f, _, ok := attribute(key, experiments); ok {
			return f, desc, nil
		}
	}
	return "", false, errf(400, codeInvalidParameter, "Invalid order_by clause %q: fw orders by metrics.KEY, params.KEY, tags.KEY or an attribute", clause)
}
