package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/drift"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/payloadlog"
)

// TestPayloadsWhileTheDashboardIsAway: fw serve's payload logger sends to
// the dashboard; while it is stopped, records wait in the spool; once it is
// back they are sent, and every record logged is stored exactly once
// (logged = stored, none dropped). Then the drift of the traffic.
func TestPayloadsWhileTheDashboardIsAway(t *testing.T) {
	st, err := store.Open(context.Background(), store.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := New(context.Background(), st, Config{Token: "tok"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) *fasthttp.Server {
		hs := &fasthttp.Server{Handler: srv.Handler, StreamRequestBody: true}
		go hs.Serve(ln)
		return hs
	}
	hs := serve(ln)
	l, err := payloadlog.New(payloadlog.Config{Rate: 1, Dest: "http://" + addr, Token: "tok", Deployment: "dep-1", SpoolDir: t.TempDir(),
		FlushEvery: 20 * time.Millisecond, Redact: []string{"secret"}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	specs := []engine.TensorSpec{{Name: "x"}, {Name: "secret"}}
	outSpecs := []engine.TensorSpec{{Name: "logits"}}
	logN := func(n int, mean float32, class int) {
		for i := range n {
			x := make([]float32, 8)
			for j := range x {
				x[j] = mean + float32((i*7+j)%5)/5
			}
			logits := make([]float32, 10)
			logits[(class+i%2)%10] = 3
			l.Log("digits", "1", specs, []engine.Tensor{engine.FromFloat32([]int64{1, 8}, x), engine.FromFloat32([]int64{1, 2}, []float32{42, 43})},
				outSpecs, []engine.Tensor{engine.FromFloat32([]int64{1, 10}, logits)}, time.Millisecond, nil)
		}
	}
	logN(60, 0, 0)
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The dashboard goes away; records pile up in the spool.
	hs.Shutdown()
	logN(60, 0, 0)
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := l.Counts(); c.Spooled == 0 || c.Dropped != 0 {
		t.Fatalf("while away: %+v", c)
	}
	// It comes back on the same address: the spool drains.
	var ln2 net.Listener
	for range 50 {
		if ln2, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	hs2 := serve(ln2)
	defer hs2.Shutdown()
	logN(120, 3, 6) // drifted traffic
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := l.Counts()
	if c.Logged != 240 || c.Dropped != 0 || c.Sent != 240 {
		t.Fatalf("counts: %+v", c)
	}
	all, err := st.ListPayloads(context.Background(), store.PayloadQuery{Deployment: "dep-1", Limit: 1000})
	if err != nil || len(all) != 240 {
		t.Fatalf("stored %d: %v", len(all), err)
	}
	var rec payloadlog.Record
	if err := json.Unmarshal(all[0].Record, &rec); err != nil {
		t.Fatal(err)
	}
	if sec := rec.Inputs[1]; sec.Name != "secret" || !sec.Redacted || sec.Data != nil || len(sec.Shape) != 2 {
		t.Fatalf("the redacted input: %s", all[0].Record)
	}
	url := "http://" + addr
	get := func(path string) (int, map[string]any) {
		t.Helper()
		return doJSONAuth(t, "GET", url+path, "", "tok")
	}
	code, out := get("/api/payloads?deployment=dep-1&limit=5")
	if recs, _ := out["records"].([]any); code != 200 || len(recs) != 5 {
		t.Fatalf("list: %d %v", code, out)
	}
	code, out = get("/api/payloads/drift?deployment=dep-1&reference_records=100&records=120&buckets=3")
	if code != 200 {
		t.Fatalf("drift: %d %v", code, out)
	}
	levels := map[string]string{}
	for _, f := range out["features"].([]any) {
		f := f.(map[string]any)
		levels[f["name"].(string)] = f["level"].(string)
	}
	if levels["x mean"] != "drift" || levels["logits class"] != "drift" {
		t.Fatalf("drifted traffic: %v", levels)
	}
	if _, ok := levels["secret mean"]; ok {
		t.Fatal("a redacted input became a feature")
	}
	code, out = get("/api/payloads/drift?deployment=dep-1&reference_records=60&records=60&from=" + all[len(all)-1].Time.Format(time.RFC3339Nano) + "&to=" + all[len(all)-60].Time.Add(time.Nanosecond).Format(time.RFC3339Nano))
	if code != 200 {
		t.Fatalf("a chosen window: %d %v", code, out)
	}
	for _, f := range out["features"].([]any) {
		if f := f.(map[string]any); f["level"] != "stable" {
			t.Fatalf("the reference against itself: %v", f)
		}
	}
	if code, out := get("/api/payloads?limit=3"); code != 200 || len(out["records"].([]any)) != 3 {
		t.Fatalf("every sender's: %d %v", code, out)
	}
	for _, bad := range []string{"/api/payloads?deployment=x&limit=0", "/api/payloads/drift?deployment=x&from=yesterday", "/api/payloads/drift?records=5"} {
		if code, out := get(bad); code != 400 || errCode(t, out) == "" {
			t.Errorf("GET %s: %d %v", bad, code, out)
		}
	}
}

// TestPayloadIngestRefuses: records that do not validate are refused by
// line, the rest kept; what is not NDJSON or JSON is refused whole.
func TestPayloadIngestRefuses(t *testing.T) {
	url := startCRUDServer(t, nil)
	good := `{"id":"a1","time":"2026-11-27T09:00:00Z","model":"m","version":"1","latency_ms":1,"inputs":[],"outputs":[]}`
	body := strings.Join([]string{good, `{"id":"bad id!","time":"2026-11-27T09:00:00Z","model":"m"}`, `{"id":"a2","model":"m"}`, `not json`,
		`{"id":"a3","time":"2026-11-27T09:00:00Z","model":""}`, good}, "\n")
	code, out := doJSONType(t, "POST", url+"/api/payloads?deployment=d", body, "application/x-ndjson")
	if code != 200 || out["accepted"] != float64(2) || out["stored"] != float64(1) || len(out["refused"].([]any)) != 4 {
		t.Fatalf("mixed batch: %d %v", code, out)
	}
	if code, out := doJSONType(t, "POST", url+"/api/payloads", `[`+good+`]`, "application/json"); code != 200 || out["stored"] != float64(1) {
		t.Fatalf("a JSON array without a deployment: %d %v", code, out)
	}
	if code, out := doJSONType(t, "POST", url+"/api/payloads", `[{]`, "application/json"); code != 400 || errCode(t, out) != "invalid_json" {
		t.Fatalf("broken array: %d %v", code, out)
	}
	if code, _ := doJSONType(t, "POST", url+"/api/payloads", good, "text/plain"); code != 415 {
		t.Fatalf("text/plain: %d", code)
	}
	huge := `{"id":"h","time":"2026-11-27T09:00:00Z","model":"m","error":"` + strings.Repeat("x", maxPayloadRecordBytes) + `"}`
	if code, _ := doJSONType(t, "POST", url+"/api/payloads", huge, "application/x-ndjson"); code != 413 {
		t.Fatalf("a record over the limit: %d", code)
	}
	many := strings.Repeat(good+"\n", store.MaxPayloadsPerBatch+1)
	if code, _ := doJSONType(t, "POST", url+"/api/payloads", many, "application/x-ndjson"); code != 413 {
		t.Fatalf("too many records: %d", code)
	}
}

// doJSONAuth is doJSON with a bearer token.
func doJSONAuth(t *testing.T, method, url, body, token string) (int, map[string]any) {
	t.Helper()
	return doRequest(t, method, url, body, map[string]string{"Authorization": "Bearer " + token})
}

// doJSONType is doJSON with a Content-Type.
func doJSONType(t *testing.T, method, url, body, ct string) (int, map[string]any) {
	t.Helper()
	return doRequest(t, method, url, body, map[string]string{"Content-Type": ct})
}

func doRequest(t *testing.T, method, url, body string, headers map[string]string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %d, not a JSON object: %q", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

// TestParseRFC3339: what RFC 3339 allows and Go's layout does not.
func TestParseRFC3339(t *testing.T) {
	for _, v := range []string{"2026-11-27T09:00:00Z", "2026-11-27t09:00:00z", "2026-11-27T09:00:00.123456789012+02:00", "2026-11-27T09:00:00.5-01:30"} {
		if _, err := parseRFC3339(v); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
	for _, v := range []string{"yesterday", "2026-11-27", "2026-11-27T09:00:00"} {
		if _, err := parseRFC3339(v); err == nil {
			t.Errorf("%s accepted", v)
		}
	}
}

// TestPayloadDriftAgainstARun: a training run's logged data summary (the
// artifact fw-reference.jsonl, one record per row) is the reference of
// ?reference_run=: traffic like the training data is stable against it,
// shifted traffic drifts; a run without a summary, a broken summary and a
// reference given twice are refused with the reason.
func TestPayloadDriftAgainstARun(t *testing.T) {
	st, err := store.Open(context.Background(), store.Config{Dir: filepath.Join(t.TempDir(), "db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	art := t.TempDir()
	files, err := blob.NewDir(art)
	if err != nil {
		t.Fatal(err)
	}
	url := startFilesServer(t, st, Config{ArtifactDir: art, Artifacts: files})
	ingest(t, url, `[`+runStart("train-1", "digits", `{}`)+`,`+runStart("train-2", "digits", `{}`)+`,`+runStart("bare", "digits", `{}`)+`,`+
		runStart("long", "digits", `{}`)+`,`+runStart("gone", "digits", `{}`)+`]`)
	record := func(i int, mean float64, at time.Time) string {
		x := make([]float64, 8)
		for j := range x {
			x[j] = mean + float64((i*7+j)%5)/5
		}
		b, _ := json.Marshal(payloadlog.Record{ID: fmt.Sprintf("%032x", i+1), Time: at, Model: "digits", Version: "1",
			Inputs: []payloadlog.Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 8}, Data: x}}, Outputs: []payloadlog.Tensor{}})
		return string(b)
	}
	var ref strings.Builder
	for i := range 300 {
		ref.WriteString(record(i, 0, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) + "\n")
	}
	put := url + "/api/2.0/mlflow-artifacts/artifacts/0/"
	if code, body, _ := fetch(t, "PUT", put+"train-1/artifacts/"+ReferenceArtifact, ref.String()); code != 200 {
		t.Fatalf("upload the summary: %d %s", code, body)
	}
	if code, body, _ := fetch(t, "PUT", put+"train-2/artifacts/"+ReferenceArtifact, record(0, 0, time.Now())+"\nnot json\n"); code != 200 {
		t.Fatalf("upload the broken summary: %d %s", code, body)
	}
	long := `{"id":"` + strings.Repeat("a", maxPayloadRecordBytes) + `"}` + "\n"
	if code, body, _ := fetch(t, "PUT", put+"long/artifacts/"+ReferenceArtifact, long); code != 200 {
		t.Fatalf("upload the summary with a long line: %d %s", code, body)
	}
	if code, body, _ := fetch(t, "PUT", put+"gone/artifacts/"+ReferenceArtifact, ref.String()); code != 200 {
		t.Fatalf("upload the summary then removed: %d %s", code, body)
	}
	if err := os.Remove(filepath.Join(art, "gone", ReferenceArtifact)); err != nil {
		t.Fatal(err)
	}
	// Served traffic: 100 records like the training data, then 100 shifted.
	post := func(from int, mean float64) {
		t.Helper()
		var body strings.Builder
		for i := range 100 {
			body.WriteString(record(1000+from+i, mean, time.Now().Add(time.Duration(from+i)*time.Millisecond)) + "\n")
		}
		if code, out := doJSONType(t, "POST", url+"/api/payloads?deployment=dep", body.String(), "application/x-ndjson"); code != 200 {
			t.Fatalf("post payloads: %d %v", code, out)
		}
	}
	level := func(q string) (string, map[string]any) {
		t.Helper()
		code, out := doJSON(t, "GET", url+"/api/payloads/drift?model=digits&version=1&"+q, "")
		if code != 200 {
			t.Fatalf("drift %s: %d %v", q, code, out)
		}
		for _, f := range out["features"].([]any) {
			if f := f.(map[string]any); f["name"] == "x mean" {
				return f["level"].(string), out
			}
		}
		t.Fatalf("drift %s: no x mean feature: %v", q, out)
		return "", nil
	}
	post(0, 0)
	if lv, out := level("reference_run=train-1&records=100"); lv != "stable" || out["reference_run"] != "train-1" ||
		out["reference"].(map[string]any)["records"].(float64) != 300 || out["current"].(map[string]any)["records"].(float64) != 100 {
		t.Fatalf("traffic like the training data: %s %v", lv, out)
	}
	// The window parameters pick the summary's rows: by time, then a count.
	if _, out := level("reference_run=train-1&records=100&reference_records=50&reference_from=2026-11-01T00:00:00Z"); out["reference"].(map[string]any)["records"].(float64) != 50 {
		t.Fatalf("the first 50 rows of the summary: %v", out["reference"])
	}
	code, out := doJSON(t, "GET", url+"/api/payloads/drift?model=digits&version=1&reference_run=train-1&reference_to=2026-10-01T00:00:00Z", "")
	if code != 200 || out["reference"].(map[string]any)["records"].(float64) != 0 || len(out["features"].([]any)) != 0 {
		t.Fatalf("no row of the summary before its time: %d %v", code, out)
	}
	post(100, 3)
	if lv, _ := level("reference_run=train-1&records=100"); lv != "drift" {
		t.Fatalf("shifted traffic against the training data: %s", lv)
	}
	// The summary logged again (rows like the shifted traffic): read anew,
	// not the summarized copy the dashboard keeps between polls.
	var shifted strings.Builder
	for i := range 300 {
		shifted.WriteString(record(i, 3, time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)) + "\n")
	}
	if code, body, _ := fetch(t, "PUT", put+"train-1/artifacts/"+ReferenceArtifact, shifted.String()); code != 200 {
		t.Fatalf("upload the summary again: %d %s", code, body)
	}
	if lv, _ := level("reference_run=train-1&records=100"); lv != "stable" {
		t.Fatalf("the shifted traffic against a summary logged again like it: %s", lv)
	}
	for q, want := range map[string]struct {
		code int
		text string
	}{
		"reference_run=bare":     {404, "has logged no data summary"},
		"reference_run=nobody":   {404, ""},
		"reference_run=train-2":  {409, "line 2"},
		"reference_run=Bad%20ID": {400, "reference_run"},
	} {
		code, out := doJSON(t, "GET", url+"/api/payloads/drift?model=digits&version=1&"+q, "")
		if code != want.code || errCode(t, out) == "" || !strings.Contains(fmt.Sprint(out), want.text) {
			t.Errorf("%s: %d %v, want %d with %q", q, code, out, want.code, want.text)
		}
	}
}

// The cache of summarized references is bounded by the samples it holds,
// dropping the least recently used run; a changed tag is a miss.
func TestReferenceCache(t *testing.T) {
	var c referenceCache
	n := maxCachedSamples / 2
	c.put("a", "1", make([]drift.Sample, n))
	c.put("b", "1", make([]drift.Sample, n))
	if _, ok := c.get("a", "1"); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	if _, ok := c.get("a", "2"); ok {
		t.Fatal("another tag hit")
	}
	c.put("c", "1", make([]drift.Sample, 1)) // over the bound: b goes
	if _, ok := c.get("b", "1"); ok {
		t.Fatal("the least recently used run was kept over the bound")
	}
	for _, id := range []string{"a", "c"} {
		if _, ok := c.get(id, "1"); !ok {
			t.Fatalf("%s was dropped", id)
		}
	}
	if c.cache().Used() != int64(n+1) || c.cache().Len() != 2 {
		t.Fatalf("held %d in %d runs", c.cache().Used(), c.cache().Len())
	}
}

// A record sent without inputs or outputs (or with null) is stored with
// empty lists, as the API's document describes a record (schemathesis
// found null answered).
func TestPayloadWithoutTensorsIsStoredWithEmptyLists(t *testing.T) {
	for _, body := range []string{
		`{"id":"a1","time":"2026-11-29T12:00:00Z","model":"m","version":"1"}`,
		`{"id":"a2","time":"2026-11-29T12:00:00Z","model":"m","version":"1","inputs":null,"outputs":null}`,
	} {
		p, msg := payloadOf(json.RawMessage(body), "")
		if msg != "" {
			t.Fatalf("%s: %s", body, msg)
		}
		if !bytes.Contains(p.Record, []byte(`"inputs":[]`)) || !bytes.Contains(p.Record, []byte(`"outputs":[]`)) {
			t.Fatalf("%s stored as %s", body, p.Record)
		}
	}
}
