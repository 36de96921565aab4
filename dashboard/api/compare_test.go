package api

import (
	"fmt"
	"strings"
	"testing"
)

func TestDiffParams(t *testing.T) {
	runs := []string{"a", "b", "c"}
	got := diffParams(runs, map[string]map[string]any{
		"a": {"lr": 0.1, "bs": 32.0, "opt": "adam", "only_a": true},
		"b": {"lr": 0.01, "bs": 32.0, "opt": "adam"},
		"c": {"lr": 0.1, "bs": 32.0, "opt": "adam", "nested": map[string]any{"x": 1.0}},
	})
	f := func(key string, differs bool, values int) {
		t.Helper()
		d, ok := got[key]
		if !ok || d.Differs != differs || len(d.Values) != values {
			t.Errorf("%s: %+v, want differs=%v with %d values", key, d, differs, values)
		}
	}
	f("lr", true, 3)
	f("bs", false, 3)
	f("opt", false, 3)
	f("only_a", true, 1) // b and c lack it
	f("nested", true, 1) // the first runs lack it
	if got["lr"].Values["b"] != 0.01 {
		t.Errorf("lr of b: %v", got["lr"].Values)
	}
}

func TestAlignSeries(t *testing.T) {
	vals := func(a alignedSeries, run string) string {
		var b strings.Builder
		for i, v := range a.Values[run] {
			if i > 0 {
				b.WriteString(" ")
			}
			if v == nil {
				b.WriteString("-")
			} else {
				fmt.Fprintf(&b, "%g", *v)
			}
		}
		return b.String()
	}
	pts := map[string][]point{
		"a": {{1, 10}, {2, 20}, {3, 30}, {4, 40}},
		"b": {{2, 200}, {4, 400}, {6, 600}},
	}
	// The union of steps fits: exact values, b held between its points,
	// nothing outside a run's range.
	a := alignSeries([]string{"a", "b"}, pts, 100)
	if fmt.Sprint(a.X) != "[1 2 3 4 6]" {
		t.Fatalf("x = %v", a.X)
	}
	if got := vals(a, "a"); got != "10 20 30 40 -" {
		t.Errorf("a: %s", got)
	}
	if got := vals(a, "b"); got != "- 200 200 400 600" {
		t.Errorf("b: %s", got)
	}
	// Too many points: an even grid over the whole range.
	a = alignSeries([]string{"a", "b"}, pts, 3)
	if fmt.Sprint(a.X) != "[1 3.5 6]" {
		t.Fatalf("grid x = %v", a.X)
	}
	if got := vals(a, "a"); got != "10 30 -" {
		t.Errorf("a on the grid: %s", got)
	}
	if got := vals(a, "b"); got != "- 200 600" {
		t.Errorf("b on the grid: %s", got)
	}
	// A run without points is all null; no runs with points: empty grid.
	a = alignSeries([]string{"a", "c"}, pts, 100)
	if got := vals(a, "c"); got != "- - - -" {
		t.Errorf("c: %s", got)
	}
	if a = alignSeries([]string{"x", "y"}, nil, 10); len(a.X) != 0 || a.X == nil {
		t.Errorf("empty: %+v", a)
	}
}

func metricsEvents(run string, seq0 int, steps []int, f func(int) float64) string {
	var parts []string
	for i, s := range steps {
		parts = append(parts, fmt.Sprintf(`{"type":"metrics","run_id":%q,"seq":%d,"step":%d,"values":{"loss":%g,"acc":%g}}`, run, seq0+i, s, f(s), f(s)/2))
	}
	return strings.Join(parts, ",")
}

func TestCompareRoute(t *testing.T) {
	url := startCRUDServer(t, nil)
	ingest(t, url, "["+runStart("a", "e", `{"lr":0.1,"bs":32}`)+","+runStart("b", "e", `{"lr":0.01,"bs":32}`)+","+
		metricsEvents("a", 2, []int{1, 2, 3, 4}, func(s int) float64 { return float64(10 * s) })+","+
		metricsEvents("b", 2, []int{2, 4, 6}, func(s int) float64 { return float64(100 * s) })+"]")

	code, out := doJSON(t, "GET", url+"/api/compare?runs=a,b&keys=loss", "")
	if code != 200 {
		t.Fatalf("compare: %d %v", code, out)
	}
	loss := out["metrics"].(map[string]any)["loss"].(map[string]any)
	if fmt.Sprint(loss["x"]) != "[1 2 3 4 6]" {
		t.Errorf("x: %v", loss["x"])
	}
	values := loss["values"].(map[string]any)
	if fmt.Sprint(values["a"]) != "[10 20 30 40 <nil>]" || fmt.Sprint(values["b"]) != "[<nil> 200 200 400 600]" {
		t.Errorf("values: %v", values)
	}
	if _, ok := out["metrics"].(map[string]any)["acc"]; ok {
		t.Errorf("keys=loss must leave acc out")
	}
	params := out["params"].(map[string]any)
	if lr := params["lr"].(map[string]any); lr["differs"] != true || fmt.Sprint(lr["values"]) != "map[a:0.1 b:0.01]" {
		t.Errorf("lr: %v", lr)
	}
	if bs := params["bs"].(map[string]any); bs["differs"] != false {
		t.Errorf("bs: %v", bs)
	}
	sum := out["summaries"].(map[string]any)["b"].(map[string]any)["loss"].(map[string]any)
	if sum["last"] != 600.0 || sum["min"] != 200.0 {
		t.Errorf("summary of b: %v", sum)
	}

	// Every key by default; time alignment answers too.
	code, out = doJSON(t, "GET", url+"/api/compare?runs=a,b&align=time&max_points=2", "")
	if code != 200 || len(out["metrics"].(map[string]any)) != 2 || out["align"] != "time" {
		t.Errorf("all keys by time: %d %v", code, out)
	}

	if fmt.Sprint(out["metric_keys"]) != "[acc loss]" || fmt.Sprint(out["keys"]) != "[acc loss]" {
		t.Errorf("keys of all: %v %v", out["metric_keys"], out["keys"])
	}
	// A page of keys: the first key_limit of metric_keys, which lists all.
	code, out = doJSON(t, "GET", url+"/api/compare?runs=a,b&key_limit=1", "")
	if code != 200 || fmt.Sprint(out["keys"]) != "[acc]" || fmt.Sprint(out["metric_keys"]) != "[acc loss]" ||
		len(out["metrics"].(map[string]any)) != 1 || out["metrics"].(map[string]any)["acc"] == nil {
		t.Errorf("key_limit=1: %d %v", code, out)
	}
	if sums := out["summaries"].(map[string]any)["a"].(map[string]any); len(sums) != 1 || sums["acc"] == nil {
		t.Errorf("key_limit=1 summaries: %v", sums)
	}
	// keys= wins over key_limit; metric_keys still lists every key.
	code, out = doJSON(t, "GET", url+"/api/compare?runs=a,b&key_limit=1&keys=loss", "")
	if code != 200 || fmt.Sprint(out["keys"]) != "[loss]" || fmt.Sprint(out["metric_keys"]) != "[acc loss]" {
		t.Errorf("keys and key_limit: %d %v", code, out)
	}

	f := func(query string, wantCode int, wantErr string) {
		t.Helper()
		code, out := doJSON(t, "GET", url+"/api/compare?"+query, "")
		if code != wantCode || errCode(t, out) == "" || !strings.Contains(fmt.Sprint(out), wantErr) {
			t.Errorf("%s: %d %v, want %d naming %q", query, code, out, wantCode, wantErr)
		}
	}
	f("runs=a", 422, "compare 2 to 20")
	f("runs=a,a", 422, "compare 2 to 20")
	many := make([]string, 21)
	for i := range many {
		many[i] = fmt.Sprintf("r%d", i)
	}
	f("runs="+strings.Join(many, ","), 422, "21 distinct runs")
	f("runs=a,ghost", 404, `no run "ghost"`)
	f("runs=a,b&align=wall", 400, "step or time")
	f("runs=a,b&max_points=0", 400, "max_points")
	f("runs=a,b&key_limit=0", 400, "key_limit")
	f("runs=a,b&key_limit=2001", 400, "key_limit")
}
