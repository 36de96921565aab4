package query

import (
	"strings"
	"testing"
)

func TestPrecedence(t *testing.T) {
	f := func(src, want string) {
		t.Helper()
		e, err := Parse(src, Runs)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got := e.String(); got != want {
			t.Errorf("%s:\n got %s\nwant %s", src, got, want)
		}
	}
	f(`step = 1`, `step = 1`)
	f(`status = "failed" OR status = "stopped" AND step > 3`, `(status = "failed" OR (status = "stopped" AND step > 3))`)
	f(`(status = "failed" OR status = "stopped") AND step > 3`, `((status = "failed" OR status = "stopped") AND step > 3)`)
	f(`NOT step = 1 AND step = 2`, `(NOT step = 1 AND step = 2)`)
	f(`NOT (step = 1 AND step = 2)`, `NOT (step = 1 AND step = 2)`)
	f(`not step=1 or step=2 and step=3`, `(NOT step = 1 OR (step = 2 AND step = 3))`)
	f(`params.optimizer.lr < 1e-3`, `params."optimizer.lr" < 0.001`)
	f(`metrics.val_acc.max >= .9`, `metrics."val_acc".max >= 0.9`)
	f(`metrics."a.b" = -2`, `metrics."a.b".last = -2`)
	f(`metrics.val/acc.count = 3`, `metrics."val/acc".count = 3`)
	f(`tags.team NOT IN ("a", 'b')`, `tags."team" NOT IN ("a", "b")`)
	f(`name LIKE "x*"`, `name ~ "x*"`)
	f(`name glob "X*"`, `name GLOB "X*"`)
	f(`name ~ "say \"hi\""`, `name ~ "say \"hi\""`)
}

func TestErrors(t *testing.T) {
	f := func(src, want string) {
		t.Helper()
		_, err := Parse(src, Runs)
		if err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", src, err, want)
		}
	}
	f(`(status = "failed" OR step > 1`, `expected ')', found end of input at column 31`)
	f(`status = "failed" OR (step > 1 AND step < 3 step = 2)`, `expected ')', found "step" at column 45`)
	f(`status = "nope"`, `unknown status "nope" (queued, running, finished, failed, stopped) at column 10`)
	f(`name = 3`, `name is a string field: expected a string, found number 3 at column 8`)
	f(`step = "x"`, `step is a number field: expected a number at column 8`)
	f(`step ~ "x"`, `step is a number field: expected a number at column 8`)
	f(`bogus = 1`, `unknown field "bogus" (known: command, created, ended, epoch, error, exit_code, experiment, experiment_id, git_commit, id, name, parent, recipe, started, status, step, total_epochs, total_steps, updated, tags.KEY, params.KEY, metrics.KEY[.last|min|max|count], system.KEY[.AGG]) at column 1`)
	f(`name = "x`, `unterminated string at column 8`)
	f(`step = 1 AND`, `expected a field name, found end of input at column 13`)
	f(`step 1`, `expected an operator (=, !=, <, <=, >, >=, ~, LIKE, GLOB, IN) after step, found number 1 at column 6`)
	f(`step ! 1`, `expected '=' after '!' at column 6`)
	f(`step IN (1, 2`, `expected ',' or ')', found end of input at column 14`)
	f(`created > "yesterday"`, `"yesterday" is not an RFC 3339 time or a date (2006-01-02) at column 11`)
	f(`step = 1 step = 2`, `expected AND, OR or end of input, found "step" at column 10`)
	f(`name = "é" AND x = 1`, `unknown field "x" (known: command, created, ended, epoch, error, exit_code, experiment, experiment_id, git_commit, id, name, parent, recipe, started, status, step, total_epochs, total_steps, updated, tags.KEY, params.KEY, metrics.KEY[.last|min|max|count], system.KEY[.AGG]) at column 16`)
	if _, err := Parse(`params.lr = 1`, Experiments); err == nil {
		t.Error("params are not experiment fields")
	}
	if _, err := Parse(strings.Repeat("(", 200)+"step = 1"+strings.Repeat(")", 200), Runs); err == nil {
		t.Error("deep nesting must be refused")
	}
}

// TestGlobKeepsCase: GLOB is LIKE with case kept (MLflow's LIKE): on
// PostgreSQL a LIKE without LOWER, on SQLite a GLOB with '[' literal.
func TestGlobKeepsCase(t *testing.T) {
	e, err := Parse(`name GLOB "Res[1]*" AND tags.t GLOB "Ab"`, Runs)
	if err != nil {
		t.Fatal(err)
	}
	a := NewArgs(Postgres)
	if sql := Compile(e, a); strings.Contains(sql, "LOWER") || !strings.Contains(sql, " LIKE ") {
		t.Fatalf("postgres: %s", sql)
	}
	if got := a.Values(); got[0] != "Res[1]%" || got[len(got)-1] != "%Ab%" {
		t.Fatalf("postgres args: %v", got)
	}
	a = NewArgs(SQLite)
	if sql := Compile(e, a); strings.Contains(sql, "LOWER") || !strings.Contains(sql, " GLOB ") {
		t.Fatalf("sqlite: %s", sql)
	}
	if got := a.Values(); got[0] != "Res[[]1]*" || got[len(got)-1] != "*Ab*" {
		t.Fatalf("sqlite args: %v", got)
	}
}

func TestCompileBindsValues(t *testing.T) {
	e, err := Parse(`name ~ "50%_x*" AND params.lr < 0.1 AND tags.team IN ("a'; DROP TABLE runs; --")`, Runs)
	if err != nil {
		t.Fatal(err)
	}
	a := NewArgs(Postgres)
	sql := Compile(e, a)
	if strings.Contains(sql, "DROP") || strings.Contains(sql, "50") || strings.Contains(sql, "0.1") {
		t.Fatalf("values spliced into SQL: %s", sql)
	}
	want := []any{`50\%\_x%`, "lr", 0.1, "team", "a'; DROP TABLE runs; --"}
	got := a.Values()
	if len(got) != len(want) {
		t.Fatalf("args %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("arg %d = %#v, want %#v", i, got[i], want[i])
		}
	}
	for i := 1; i <= len(want); i++ {
		if !strings.Contains(sql, "$"+string(rune('0'+i))) {
			t.Errorf("placeholder $%d missing in %s", i, sql)
		}
	}
	a = NewArgs(SQLite)
	if sql := Compile(e, a); strings.Count(sql, "?") != len(want) {
		t.Errorf("sqlite placeholders: %s", sql)
	}
	if Compile(nil, a) != "1=1" {
		t.Error("nil filter")
	}
}

func TestGlobToLike(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := GlobToLike(in); got != want {
			t.Errorf("GlobToLike(%q) = %q, want %q", in, got, want)
		}
	}
	f("resnet*", "resnet%")
	f("ResNet", "%resnet%")
	f("a?c", "a_c")
	f(`50%_\`, `%50\%\_\\%`)
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`status = "finished" AND (params.lr < 0.01 OR tags.team IN ("a", "b")) AND NOT metrics.val_acc.max < 0.9 AND name ~ "resnet*"`,
		`created > "2024-01-01"`, `step >= -1.5e3`, `metrics."a.b".min != 2`, `tags.x NOT IN ('a')`, `(((step = 1)))`, `name LIKE "x"`, `name GLOB "[X]*"`,
		`system.gpu.max > 1`, `ended > 1700000000`, `archived = true`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > MaxLength {
			return
		}
		for _, target := range []Target{Runs, Experiments} {
			e, err := Parse(src, target)
			if err != nil {
				if _, ok := err.(*Error); !ok {
					t.Fatalf("error of type %T", err)
				}
				continue
			}
			for _, d := range []Dialect{SQLite, Postgres} {
				a := NewArgs(d)
				sql := Compile(e, a)
				if d == SQLite && strings.Count(sql, "?") != len(a.Values()) {
					t.Fatalf("%q: %d placeholders, %d values: %s", src, strings.Count(sql, "?"), len(a.Values()), sql)
				}
			}
			if e == nil {
				continue
			}
			// What String renders parses again to the same tree.
			e2, err := Parse(e.String(), target)
			if err != nil || e2.String() != e.String() {
				t.Fatalf("%q: round trip %q: %v", src, e.String(), err)
			}
		}
	})
}
