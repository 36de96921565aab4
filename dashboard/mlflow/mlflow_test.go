package mlflow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fw-serve/fw/dashboard/query"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/testleak"
	"github.com/fw-serve/fw/internal/testpg"
	"github.com/fw-serve/fw/internal/testreq"
	"github.com/valyala/fasthttp"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) { testleak.Main(m) }

// env is the MLflow API over a real SQLite store in a temporary directory.
type env struct {
	t   *testing.T
	st  store.Store
	srv *Server
	art string
}

// backends names the stores the tests run on: SQLite always, PostgreSQL
// when FW_TEST_DATABASE_URL is set (scripts/pg-test.sh, make test-postgres).
func backends(t *testing.T) []string {
	if os.Getenv("FW_TEST_DATABASE_URL") != "" {
		if !testpg.SQLite() {
			return []string{"postgres"}
		}
		return []string{"sqlite", "postgres"}
	}
	testpg.NoCluster(t)
	return []string{"sqlite"}
}

// forEach runs f on every backend.
func forEach(t *testing.T, cfg Config, f func(t *testing.T, e *env)) {
	for _, b := range backends(t) {
		t.Run(b, func(t *testing.T) { f(t, newEnvOn(t, b, cfg)) })
	}
}

func newEnv(t *testing.T, cfg Config) *env { return newEnvOn(t, "sqlite", cfg) }

func newEnvOn(t *testing.T, backend string, cfg Config) *env {
	t.Helper()
	dir := t.TempDir()
	sc := store.Config{Dir: dir}
	if backend == "postgres" {
		sc = store.Config{DatabaseURL: testpg.Schema(t, os.Getenv("FW_TEST_DATABASE_URL")), ArtifactDir: filepath.Join(dir, "artifacts"), CheckpointDir: filepath.Join(dir, "checkpoints")}
	}
	st, err := store.Open(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if cfg.ArtifactDir == "" {
		cfg.ArtifactDir = filepath.Join(dir, "artifacts")
	}
	return &env{t: t, st: st, srv: New(context.Background(), st, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))), art: cfg.ArtifactDir}
}

// call sends one request and decodes the JSON answer.
func (e *env) call(method, uri string, body any) (int, map[string]any) {
	e.t.Helper()
	var b []byte
	switch v := body.(type) {
	case nil:
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		b, _ = json.Marshal(v)
	}
	ctx := testreq.Serve(func(ctx *fasthttpCtx) { e.srv.Handler(ctx, string(ctx.Path())) }, method, uri, "application/json", b, false)
	out := map[string]any{}
	if ct := string(ctx.Response.Header.ContentType()); strings.HasPrefix(ct, "application/json") {
		if err := json.Unmarshal(ctx.Response.Body(), &out); err != nil {
			e.t.Fatalf("%s %s: answer is not JSON: %s", method, uri, ctx.Response.Body())
		}
	} else {
		out["raw"] = string(ctx.Response.Body())
	}
	return ctx.Response.StatusCode(), out
}

// ok sends a request that must succeed.
func (e *env) ok(method, uri string, body any) map[string]any {
	e.t.Helper()
	code, out := e.call(method, uri, body)
	if code != 200 {
		e.t.Fatalf("%s %s: %d %v", method, uri, code, out)
	}
	return out
}

// fails sends a request that must fail with status and MLflow's code.
func (e *env) fails(status int, code, method, uri string, body any) string {
	e.t.Helper()
	got, out := e.call(method, uri, body)
	if got != status || out["error_code"] != code {
		e.t.Fatalf("%s %s: want %d %s, got %d %v", method, uri, status, code, got, out)
	}
	msg, _ := out["message"].(string)
	if msg == "" {
		e.t.Fatalf("%s %s: error without a message: %v", method, uri, out)
	}
	return msg
}

const api = "/api/2.0/mlflow/"

func (e *env) newRun(expID string, tags ...string) string {
	e.t.Helper()
	var kvs []map[string]string
	for i := 0; i+1 < len(tags); i += 2 {
		kvs = append(kvs, map[string]string{"key": tags[i], "value": tags[i+1]})
	}
	out := e.ok("POST", api+"runs/create", map[string]any{"experiment_id": expID, "start_time": "1700000000000", "tags": kvs})
	return out["run"].(map[string]any)["info"].(map[string]any)["run_id"].(string)
}

func TestTranslateFilter(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"metrics.acc > 0.9", `metrics."acc".last > 0.9`},
		{"metrics.`val loss` <= 1e-3 and params.lr = '0.01'", `metrics."val loss".last <= 1e-3 AND (params."lr" = "0.01" OR params."lr" = 0.01)`},
		{"params.opt != 'adam'", `params."opt" != "adam"`},
		{`tags."mlflow.user" = "ann" AND attributes.status = 'FINISHED'`, `tags."mlflow.user" = "ann" AND status = "finished"`},
		{"attributes.status IN ('RUNNING', 'KILLED')", `status IN ("running", "stopped")`},
		{"attribute.run_name LIKE 'bold-%'", `(tags."mlflow.runName" GLOB "bold-*" OR (name GLOB "bold-*" AND NOT tags."mlflow.runName" LIKE "*"))`},
		{"attribute.run_name ILIKE 'bold-%'", `(tags."mlflow.runName" LIKE "bold-*" OR (name LIKE "bold-*" AND NOT tags."mlflow.runName" LIKE "*"))`},
		{"run.run_name ILIKE 'exact'", `(tags."mlflow.runName" = "exact" OR (name = "exact" AND NOT tags."mlflow.runName" LIKE "*"))`},
		{"attributes.start_time >= 1700000000000", `started >= 1700000000`},
		{"attributes.run_id NOT IN ('a', 'b')", `id NOT IN ("a", "b")`},
		{"(metrics.a > 1 OR metrics.b < 2) AND tags.t != 'x'", `(metrics."a".last > 1 OR metrics."b".last < 2) AND tags."t" != "x"`},
		{`params.p = 'quote " and \ back'`, `params."p" = "quote \" and \\ back"`},
	} {
		got, e := translateFilter(c.in, false)
		if e != nil {
			t.Errorf("%q: %s", c.in, e.msg)
			continue
		}
		if got != c.want {
			t.Errorf("%q:\n got %s\nwant %s", c.in, got, c.want)
		}
		if got != "" {
			if _, err := query.Parse(got, query.Runs); err != nil {
				t.Errorf("%q -> %q does not parse in fw: %v", c.in, got, err)
			}
		}
	}
	for _, bad := range []string{"metrics.acc >", "metrics.acc > 'x'", "attributes.status = 'DONE'", "foo.x = 1",
		"metrics.a > 1 AND", "(metrics.a > 1", "metrics.a > 1)", "params.x IN ('a'", "attributes.nope = 1", "tags.x = 'unterminated",
		"datasets.name = 'x'", "metrics.a ! 1"} {
		if got, e := translateFilter(bad, false); e == nil || e.code != codeInvalidParameter {
			t.Errorf("%q: want INVALID_PARAMETER_VALUE, got %q %v", bad, got, e)
		}
	}
	for _, c := range []struct{ in, sort string }{
		{"metrics.acc DESC", `metrics."acc".last`}, {"params.`lr`", `params."lr"`}, {"attributes.start_time ASC", "started"},
		{"start_time", "started"}, {"tags.t", `tags."t"`},
	} {
		sort, _, e := translateOrder(c.in, false)
		if e != nil || sort != c.sort {
			t.Errorf("order %q: got %q %v, want %q", c.in, sort, e, c.sort)
		}
	}
	if _, _, e := translateOrder("metrics.acc SIDEWAYS", false); e == nil {
		t.Error("order with a bad direction was accepted")
	}
}

func TestRunLifecycleAndSearch(t *testing.T) { forEach(t, Config{}, testRunLifecycleAndSearch) }

func testRunLifecycleAndSearch(t *testing.T, e *env) {
	exp := e.ok("POST", api+"experiments/create", map[string]any{"name": "exp", "tags": []map[string]string{{"key": "team", "value": "vision"}}})["experiment_id"].(string)
	e.fails(400, codeAlreadyExists, "POST", api+"experiments/create", map[string]any{"name": "exp"})
	got := e.ok("GET", api+"experiments/get-by-name?experiment_name=exp", nil)["experiment"].(map[string]any)
	if got["experiment_id"] != exp || got["lifecycle_stage"] != "active" {
		t.Fatalf("get-by-name: %v", got)
	}
	e.fails(404, codeNotFound, "GET", api+"experiments/get-by-name?experiment_name=nope", nil)

	id := e.newRun(exp, "mlflow.runName", "my run #1", "mlflow.user", "ann")
	// int64 fields as strings (protobuf JSON) and as numbers; NaN as a string.
	e.ok("POST", api+"runs/log-batch", map[string]any{"run_id": id,
		"metrics": []map[string]any{
			{"key": "loss", "value": 0.5, "timestamp": "1700000001000", "step": "0"},
			{"key": "loss", "value": 0.25, "timestamp": 1700000002000, "step": 1},
			{"key": "acc", "value": 0.95, "timestamp": 1700000002000, "step": 1},
			{"key": "odd", "value": "NaN", "timestamp": 1700000002000, "step": 1},
		},
		"params": []map[string]string{{"key": "lr", "value": "0.01"}},
		"tags":   []map[string]string{{"key": "t", "value": "v"}},
	})
	e.ok("POST", api+"runs/log-metric", map[string]any{"run_id": id, "key": "loss", "value": 0.125, "timestamp": 1700000003000, "step": 2})
	msg := e.fails(400, codeInvalidParameter, "POST", api+"runs/log-parameter", map[string]any{"run_id": id, "key": "lr", "value": "0.02"})
	if !strings.Contains(msg, "lr") {
		t.Errorf("param conflict message does not name the param: %s", msg)
	}
	run := e.ok("GET", api+"runs/get?run_id="+id, nil)["run"].(map[string]any)
	info := run["info"].(map[string]any)
	if info["run_name"] != "my run #1" || info["user_id"] != "ann" || info["status"] != "RUNNING" || info["experiment_id"] != exp ||
		info["start_time"] != float64(1700000000000) || info["artifact_uri"] != "mlflow-artifacts:/"+exp+"/"+id+"/artifacts" {
		t.Fatalf("run info: %v", info)
	}
	metrics := map[string]any{}
	for _, m := range run["data"].(map[string]any)["metrics"].([]any) {
		mm := m.(map[string]any)
		metrics[mm["key"].(string)] = mm["value"]
		if mm["key"] == "loss" && (mm["step"] != float64(2) || mm["timestamp"] != float64(1700000003000)) {
			t.Errorf("latest loss: %v", mm)
		}
	}
	if metrics["loss"] != 0.125 || metrics["acc"] != 0.95 || metrics["odd"] != "NaN" {
		t.Errorf("metrics: %v", metrics)
	}
	// fw's own view of the same run: its name made valid for fw.
	r, err := e.st.GetRun(context.Background(), id)
	if err != nil || r.Name != "my run -1" || r.Params["lr"] != "0.01" || r.Metrics["loss"].Count != 3 {
		t.Fatalf("fw's run: %v %+v", err, r)
	}

	// History, paged by step.
	h := e.ok("GET", api+"metrics/get-history?run_id="+id+"&metric_key=loss&max_results=2", nil)
	if len(h["metrics"].([]any)) != 2 || h["next_page_token"] == nil {
		t.Fatalf("history page 1: %v", h)
	}
	h2 := e.ok("GET", api+"metrics/get-history?run_id="+id+"&metric_key=loss&max_results=2&page_token="+h["next_page_token"].(string), nil)
	if ms := h2["metrics"].([]any); len(ms) != 1 || ms[0].(map[string]any)["value"] != 0.125 || ms[0].(map[string]any)["timestamp"] != float64(1700000003000) {
		t.Fatalf("history page 2: %v", h2)
	}
	// A second value at step 0 (MLflow keeps every value): the history
	// answers both, and a page is whole steps (2 steps, 3 points).
	e.ok("POST", api+"runs/log-metric", map[string]any{"run_id": id, "key": "loss", "value": 0.75, "timestamp": 1700000004000, "step": 0})
	h = e.ok("GET", api+"metrics/get-history?run_id="+id+"&metric_key=loss&max_results=2", nil)
	ms := h["metrics"].([]any)
	if len(ms) != 3 || ms[0].(map[string]any)["value"] != 0.5 || ms[1].(map[string]any)["value"] != 0.75 || ms[2].(map[string]any)["step"] != float64(1) || h["next_page_token"] != "1" {
		t.Fatalf("history with a replaced value: %v", h)
	}
	if r, _ := e.st.GetRun(context.Background(), id); r.Metrics["loss"].Last != 0.125 {
		t.Fatalf("fw's latest loss changed: %+v", r.Metrics["loss"])
	}

	// Status: FINISHED ends the run, RUNNING resumes it, KILLED stops it,
	// FAILED after KILLED is a resume and an end (MLflow allows any move).
	for _, c := range []struct{ ml, fw string }{{"FINISHED", "finished"}, {"RUNNING", "running"}, {"KILLED", "stopped"}, {"FAILED", "failed"}} {
		ri := e.ok("POST", api+"runs/update", map[string]any{"run_id": id, "status": c.ml, "end_time": 1700000009000})["run_info"].(map[string]any)
		r, _ := e.st.GetRun(context.Background(), id)
		if ri["status"] != c.ml || string(r.Status) != c.fw {
			t.Fatalf("update to %s: answer %v, fw %s", c.ml, ri["status"], r.Status)
		}
	}
	e.fails(400, codeInvalidParameter, "POST", api+"runs/update", map[string]any{"run_id": id, "status": "DONE"})

	// A second run, then search: filter, order, paging, delete and restore.
	id2 := e.newRun(exp)
	e.ok("POST", api+"runs/log-batch", map[string]any{"run_id": id2, "metrics": []map[string]any{{"key": "acc", "value": 0.5, "timestamp": 1, "step": 0}},
		"params": []map[string]string{{"key": "lr", "value": "0.1"}}})
	search := func(body map[string]any) []string {
		body["experiment_ids"] = []string{exp}
		out := e.ok("POST", api+"runs/search", body)
		var ids []string
		for _, r := range out["runs"].([]any) {
			ids = append(ids, r.(map[string]any)["info"].(map[string]any)["run_id"].(string))
		}
		return ids
	}
	if got := search(map[string]any{"filter": "metrics.acc > 0.9 and params.lr = '0.01' and attributes.status = 'FAILED'"}); len(got) != 1 || got[0] != id {
		t.Fatalf("filtered search: %v", got)
	}
	if got := search(map[string]any{"order_by": []string{"metrics.acc ASC"}}); len(got) != 2 || got[0] != id2 {
		t.Fatalf("ordered search: %v", got)
	}
	page := e.ok("POST", api+"runs/search", map[string]any{"experiment_ids": []string{exp}, "max_results": 1})
	tok, _ := page["next_page_token"].(string)
	page2 := e.ok("POST", api+"runs/search", map[string]any{"experiment_ids": []string{exp}, "max_results": 1, "page_token": tok})
	if tok == "" || len(page["runs"].([]any)) != 1 || len(page2["runs"].([]any)) != 1 || page2["next_page_token"] != nil {
		t.Fatalf("paging: %v / %v", page, page2)
	}
	e.ok("POST", api+"runs/delete", map[string]any{"run_id": id2})
	if got := search(map[string]any{}); len(got) != 1 || got[0] != id {
		t.Fatalf("a deleted run is still in the default search: %v", got)
	}
	if got := search(map[string]any{"run_view_type": "DELETED_ONLY"}); len(got) != 1 || got[0] != id2 {
		t.Fatalf("DELETED_ONLY: %v", got)
	}
	ri := e.ok("GET", api+"runs/get?run_id="+id2, nil)["run"].(map[string]any)
	if ri["info"].(map[string]any)["lifecycle_stage"] != "deleted" {
		t.Fatalf("deleted run: %v", ri["info"])
	}
	for _, tg := range ri["data"].(map[string]any)["tags"].([]any) {
		if tg.(map[string]any)["key"] == lifecycleTag {
			t.Fatal("the reserved lifecycle tag is shown to MLflow")
		}
	}
	e.ok("POST", api+"runs/restore", map[string]any{"run_id": id2})
	if got := search(map[string]any{"run_view_type": "ALL"}); len(got) != 2 {
		t.Fatalf("after restore: %v", got)
	}
	e.fails(400, codeInvalidParameter, "POST", api+"runs/set-tag", map[string]any{"run_id": id2, "key": lifecycleTag, "value": "x"})
	e.fails(400, codeInvalidParameter, "POST", api+"runs/search", map[string]any{"filter": "metrics.acc >"})

	// Tags: set, delete, delete again is a 404.
	e.ok("POST", api+"runs/set-tag", map[string]any{"run_id": id, "key": "k", "value": "v"})
	e.ok("POST", api+"runs/delete-tag", map[string]any{"run_id": id, "key": "k"})
	e.fails(404, codeNotFound, "POST", api+"runs/delete-tag", map[string]any{"run_id": id, "key": "k"})

	// Experiments: delete archives, restore, search by view type, rename.
	e.ok("POST", api+"experiments/delete", map[string]any{"experiment_id": exp})
	if x := e.ok("GET", api+"experiments/get?experiment_id="+exp, nil)["experiment"].(map[string]any); x["lifecycle_stage"] != "deleted" {
		t.Fatalf("deleted experiment: %v", x)
	}
	e.fails(400, codeInvalidParameter, "POST", api+"runs/create", map[string]any{"experiment_id": exp})
	exps := e.ok("POST", api+"experiments/search", map[string]any{"view_type": "DELETED_ONLY"})["experiments"].([]any)
	if len(exps) != 1 || exps[0].(map[string]any)["name"] != "exp" {
		t.Fatalf("DELETED_ONLY experiments: %v", exps)
	}
	e.ok("POST", api+"experiments/restore", map[string]any{"experiment_id": exp})
	e.ok("POST", api+"experiments/update", map[string]any{"experiment_id": exp, "new_name": "exp2"})
	e.ok("POST", api+"experiments/set-experiment-tag", map[string]any{"experiment_id": exp, "key": "mlflow.note.content", "value": "notes"})
	if x, _ := e.st.GetExperiment(context.Background(), exp); x.Name != "exp2" || x.Description != "notes" || x.Tags["team"] != "vision" {
		t.Fatalf("fw's experiment: %+v", x)
	}
	exps = e.ok("GET", api+"experiments/search?filter=name+LIKE+'exp%25'&max_results=10", nil)["experiments"].([]any)
	if len(exps) != 1 {
		t.Fatalf("experiments search over GET: %v", exps)
	}
}

func TestErrorsAndLimits(t *testing.T) { forEach(t, Config{}, testErrorsAndLimits) }

func testErrorsAndLimits(t *testing.T, e *env) {
	e.fails(404, codeNotFound, "GET", api+"runs/get?run_id=nope", nil)
	e.fails(404, codeNotFound, "GET", api+"runs/get?run_id=../../etc", nil)
	e.fails(400, codeInvalidParameter, "GET", api+"runs/get", nil)
	e.fails(404, codeNotFound, "POST", api+"runs/log-metric", map[string]any{"run_id": "nope", "key": "k", "value": 1, "timestamp": 1})
	e.fails(404, codeNotFound, "GET", api+"experiments/get?experiment_id=12345", nil)
	e.fails(404, codeEndpointNotFound, "POST", api+"webhooks/create", map[string]any{"name": "m"})
	e.fails(503, codeUnavailable, "POST", api+"registered-models/create", map[string]any{"name": "m"}) // no registry given
	e.fails(405, codeBadRequest, "GET", api+"runs/create", nil)
	e.fails(400, codeMalformedRequest, "POST", api+"runs/create", "{not json")
	e.fails(400, codeInvalidParameter, "POST", api+"runs/create", map[string]any{"experiment_id": 7})
	id := e.newRun("0")
	many := make([]map[string]any, 1001)
	for i := range many {
		many[i] = map[string]any{"key": "k", "value": 1, "timestamp": 1, "step": i}
	}
	e.fails(400, codeInvalidParameter, "POST", api+"runs/log-batch", map[string]any{"run_id": id, "metrics": many})
	e.fails(400, codeInvalidParameter, "POST", api+"runs/log-batch", map[string]any{"run_id": id, "metrics": []map[string]any{{"key": "k", "value": 1, "timestamp": "x"}}})
	// Negative steps are kept, as in MLflow.
	e.ok("POST", api+"runs/log-batch", map[string]any{"run_id": id, "metrics": []map[string]any{{"key": "k", "value": 1, "timestamp": 1, "step": -1}}})
	if h := e.ok("GET", api+"metrics/get-history?run_id="+id+"&metric_key=k", nil)["metrics"].([]any); len(h) != 1 || h[0].(map[string]any)["step"] != float64(-1) {
		t.Fatalf("negative step: %v", h)
	}
	e.fails(400, codeInvalidParameter, "POST", api+"runs/log-parameter", map[string]any{"run_id": id, "key": "p", "value": strings.Repeat("x", 6001)})
	e.fails(400, codeInvalidParameter, "POST", api+"runs/search", map[string]any{"max_results": 50001})
	e.fails(400, codeInvalidParameter, "POST", api+"runs/search", map[string]any{"page_token": "%%%"})
	// MLflow's experiment "0" is fw's Default experiment.
	if x := e.ok("GET", api+"experiments/get?experiment_id=0", nil)["experiment"].(map[string]any); x["name"] != DefaultExperiment || x["experiment_id"] != "0" {
		t.Fatalf("experiment 0: %v", x)
	}
	if r := e.ok("GET", api+"runs/get?run_id="+id, nil)["run"].(map[string]any)["info"].(map[string]any); r["experiment_id"] != "0" {
		t.Fatalf("a run of experiment 0: %v", r)
	}
}

// TestConcurrentLoggingKeepsEverything: MLflow's asynchronous logging sends
// a run's batches concurrently; none may be lost or taken for a duplicate.
func TestConcurrentLoggingKeepsEverything(t *testing.T) {
	forEach(t, Config{}, testConcurrentLoggingKeepsEverything)
}

func testConcurrentLoggingKeepsEverything(t *testing.T, e *env) {
	id := e.newRun("0")
	const workers, per = 8, 50
	var wg sync.WaitGroup
	errs := make(chan string, workers*per)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				step := w*per + i
				body, _ := json.Marshal(map[string]any{"run_id": id, "metrics": []map[string]any{{"key": "x", "value": step, "timestamp": 1, "step": step}}})
				ctx := testreq.Serve(func(ctx *fasthttpCtx) { e.srv.Handler(ctx, string(ctx.Path())) }, "POST", api+"runs/log-batch", "application/json", body, false)
				if ctx.Response.StatusCode() != 200 {
					errs <- fmt.Sprintf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Fatal(msg)
	}
	pts, err := e.st.History(context.Background(), id, store.HistoryQuery{Key: "x", Limit: 10000})
	if err != nil || len(pts) != workers*per {
		t.Fatalf("stored %d of %d points (%v)", len(pts), workers*per, err)
	}
	for i, p := range pts {
		if p.Step != int64(i) || p.Value != float64(i) || math.IsNaN(p.Value) {
			t.Fatalf("point %d: %+v", i, p)
		}
	}
}

func TestArtifacts(t *testing.T) {
	e := newEnv(t, Config{MaxArtifactBytes: 1024})
	id := e.newRun("0")
	base := "/api/2.0/mlflow-artifacts/artifacts/0/" + id + "/artifacts/"
	e.ok("PUT", base+"model/weights.bin", "0123456789")
	e.ok("PUT", base+"notes.txt", "hello")
	e.ok("PUT", base+"notes.txt", "hello again") // replaced
	code, out := e.call("GET", base+"notes.txt", nil)
	if code != 200 || out["raw"] != "hello again" {
		t.Fatalf("download: %d %v", code, out)
	}
	list := e.ok("GET", "/api/2.0/mlflow-artifacts/artifacts?path=0/"+id+"/artifacts", nil)["files"].([]any)
	if len(list) != 2 || list[0].(map[string]any)["path"] != "model" || list[0].(map[string]any)["is_dir"] != true ||
		list[1].(map[string]any)["path"] != "notes.txt" || list[1].(map[string]any)["file_size"] != float64(11) {
		t.Fatalf("list: %v", list)
	}
	sub := e.ok("GET", api+"artifacts/list?run_id="+id+"&path=model", nil)
	if files := sub["files"].([]any); len(files) != 1 || files[0].(map[string]any)["path"] != "model/weights.bin" {
		t.Fatalf("tracking list: %v", sub)
	}
	arts, _ := e.st.Artifacts(context.Background(), id)
	if len(arts) != 2 {
		t.Fatalf("fw lists %d artifacts: %+v", len(arts), arts)
	}
	// Limits and paths: too big, traversal, a symbolic link out of the run.
	e.fails(413, codeLimitExceeded, "PUT", base+"big.bin", strings.Repeat("x", 1025))
	// A '..' in the URL path is refused before fasthttp's folding could
	// make it another file (TestCompatArtifactPaths covers the escapes).
	e.fails(400, codeInvalidParameter, "PUT", base+"a/../../x", "x")
	e.fails(400, codeInvalidParameter, "GET", "/api/2.0/mlflow-artifacts/artifacts?path=0/"+id+"/artifacts/../x", nil)
	e.fails(404, codeNotFound, "PUT", "/api/2.0/mlflow-artifacts/artifacts/0/nope/artifacts/x", "x")
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(e.art, id, "link")); err != nil {
		t.Fatal(err)
	}
	e.fails(400, codeInvalidParameter, "PUT", base+"link/x", "x")
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("a file was written through the link: %v", ents)
	}
	e.fails(404, codeNotFound, "GET", base+"never.txt", nil)
	e.fails(405, codeBadRequest, "DELETE", base+"notes.txt", nil)
	if ents, _ := os.ReadDir(filepath.Join(e.art, id)); len(ents) != 3 { // model, notes.txt, link: no upload-* leftovers
		t.Fatalf("run directory: %v", ents)
	}
}

type fasthttpCtx = fasthttp.RequestCtx

func TestRoutePattern(t *testing.T) {
	s := New(context.Background(), nil, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for path, want := range map[string]string{
		"/api/2.0/mlflow/runs/log-batch":                          "/api/2.0/mlflow/runs/log-batch",
		"/ajax-api/2.0/mlflow/runs/search":                        "/api/2.0/mlflow/runs/search",
		"/api/2.0/mlflow/runs/" + strings.Repeat("x", 40):         "other",
		"/api/2.0/mlflow-artifacts/artifacts/0/abc/artifacts/f.t": "/api/2.0/mlflow-artifacts/artifacts",
	} {
		if got := s.RoutePattern(path); got != want {
			t.Errorf("RoutePattern(%q) = %q, want %q", path, got, want)
		}
	}
}
