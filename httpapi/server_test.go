package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/serving"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

func modelsDir(t testing.TB) string { return testmodels.Dir(t) }

type testServer struct {
	url string
	srv *httpapi.Server
	m   *engine.Model
}

// startServer serves model on a real 127.0.0.1 socket, as fw serve does.
func startServer(t testing.TB, model string, cfg httpapi.Config, bc batcher.Config) *testServer {
	t.Helper()
	return startServerWith(t, model, cfg, bc, nil)
}

// startServerWith is startServer with the engine calls going through wrap
// (nil: the model's own).
func startServerWith(t testing.TB, model string, cfg httpapi.Config, bc batcher.Config, wrap func(batcher.RunFunc) batcher.RunFunc) *testServer {
	t.Helper()
	m, err := engine.Load(context.Background(), model, engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	base, cancel := context.WithCancel(context.Background())
	srv := httpapi.NewTestServer(base, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	bc.Unbatched = bc.Unbatched || !m.Batched() // as modelhost sets it (or a test's own)
	run := batcher.RunFunc(m.Forward)
	if wrap != nil {
		run = wrap(run)
	}
	b := batcher.New(run, bc, srv.BatchStats())
	srv.Swap(&serving.Instance{Model: m, Batcher: b, Stats: &serving.Stats{}})
	srv.SetState(serving.StateReady, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	max := cfg.MaxBodyBytes
	if max == 0 {
		max = httpapi.DefaultConfig().MaxBodyBytes
	}
	hs := &fasthttp.Server{Handler: srv.Handler, StreamRequestBody: true, DisablePreParseMultipartForm: true, MaxRequestBodySize: int(max)}
	go hs.Serve(ln)
	t.Cleanup(func() {
		hs.Shutdown()
		cancel()
		if inst := srv.Current(); inst != nil {
			inst.Batcher.Close(context.Background())
			inst.Model.Close()
		}
	})
	return &testServer{url: "http://" + ln.Addr().String(), srv: srv, m: m}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("response is not JSON (%d): %s", r.status, r.body)
	}
	return v
}

// errCode checks the one error shape and returns its code.
func (r reply) errCode(t testing.TB) string {
	t.Helper()
	v := r.json(t)
	e, ok := v["error"].(map[string]any)
	if !ok || len(v) != 1 {
		t.Fatalf("not the error shape: %s", r.body)
	}
	code, _ := e["code"].(string)
	msg, _ := e["message"].(string)
	if code == "" || msg == "" {
		t.Fatalf("error without code or message: %s", r.body)
	}
	return code
}

func do(t testing.TB, method, url, ctype string, body []byte, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

// testRows returns the model's test-vector rows as JSON arrays, and the
// engine's own outputs for them.
func testRows(t testing.TB, m *engine.Model) ([][]float64, engine.Tensor) {
	t.Helper()
	x, err := m.Meta.TestVector.Inputs[m.Inputs()[0].Name].Decode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Run(context.Background(), []engine.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	n := int(x.Shape[0])
	per := x.Len() / n
	rows := make([][]float64, n)
	for r := range rows {
		rows[r] = make([]float64, per)
		for i := range rows[r] {
			rows[r][i] = x.At(r*per + i)
		}
	}
	return rows, out[0]
}

func predictBody(rows [][]float64) []byte {
	b, _ := json.Marshal(map[string]any{"data": rows})
	return b
}

func predictions(t testing.TB, r reply) [][]float64 {
	t.Helper()
	var v struct {
		Predictions [][]float64 `json:"predictions"`
		Labels      []string    `json:"labels"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil || r.status != 200 {
		t.Fatalf("predict: %d %s", r.status, r.body)
	}
	return v.Predictions
}

func TestPredictMatchesEngine(t *testing.T) {
	dir := modelsDir(t)
	for _, name := range []string{"digits_mlp.onnx", "digits_cnn.onnx"} {
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, filepath.Join(dir, name), httpapi.Config{}, batcher.Config{})
			rows, want := testRows(t, ts.m)
			got := predictions(t, do(t, "POST", ts.url+"/predict", "application/json", predictBody(rows)))
			if len(got) != len(rows) {
				t.Fatalf("%d predictions for %d rows", len(got), len(rows))
			}
			per := want.Len() / len(rows)
			for r := range got {
				for i, v := range got[r] {
					if float32(v) != float32(want.At(r*per+i)) {
						t.Fatalf("row %d class %d: %v, engine %v", r, i, v, want.At(r*per+i))
					}
				}
			}
			var full map[string]any
			json.Unmarshal(do(t, "POST", ts.url+"/predict", "application/json; charset=utf-8", predictBody(rows[:1])).body, &full)
			if labels, _ := full["labels"].([]any); len(labels) != 1 {
				t.Fatalf("labels missing: %v", full)
			}
			if model, _ := full["model"].(map[string]any); model["name"] != strings.Split(name, ".")[0] {
				t.Fatalf("model missing: %v", full)
			}
		})
	}
}

// Rows may be nested to the per-sample shape or flat; both give the same answer.
func TestPredictNestedAndFlatRows(t *testing.T) {
	ts := startServer(t, filepath.Join(modelsDir(t), "digits_cnn.onnx"), httpapi.Config{}, batcher.Config{})
	rows, _ := testRows(t, ts.m)
	nested := make([][][][]float64, len(rows))
	for r, row := range rows {
		img := make([][]float64, 8)
		for y := range img {
			img[y] = row[y*8 : y*8+8]
		}
		nested[r] = [][][]float64{img}
	}
	b, _ := json.Marshal(map[string]any{"data": nested})
	a := predictions(t, do(t, "POST", ts.url+"/predict", "application/json", b))
	f := predictions(t, do(t, "POST", ts.url+"/predict", "application/json", predictBody(rows)))
	if fmt.Sprint(a) != fmt.Sprint(f) {
		t.Fatalf("nested %v != flat %v", a, f)
	}
	// Named inputs work too.
	b, _ = json.Marshal(map[string]any{"inputs": map[string]any{"input": rows}})
	n := predictions(t, do(t, "POST", ts.url+"/predict", "application/json", b))
	if fmt.Sprint(n) != fmt.Sprint(f) {
		t.Fatalf("named %v != data %v", n, f)
	}
}

func TestPredictInt64Model(t *testing.T) {
	ts := startServer(t, filepath.Join(modelsDir(t), "textcls.onnx"), httpapi.Config{}, batcher.Config{})
	rows, want := testRows(t, ts.m)
	got := predictions(t, do(t, "POST", ts.url+"/predict", "application/json", predictBody(rows)))
	if math.Abs(got[0][0]-want.At(0)) > 1e-5 {
		t.Fatalf("textcls: %v vs %v", got[0][0], want.At(0))
	}
	r := do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data": [[1.5, 2]]}`))
	if r.status != 422 || r.errCode(t) != "invalid_input" || !strings.Contains(string(r.body), "int64") {
		t.Fatalf("fractional token: %d %s", r.status, r.body)
	}
}

// Every error class gets its status and the one error shape.
func TestErrorClasses(t *testing.T) {
	dir := modelsDir(t)
	ts := startServer(t, filepath.Join(dir, "digits_mlp.onnx"), httpapi.Config{MaxRows: 3, MaxBodyBytes: 64 << 10}, batcher.Config{})
	row := strings.TrimSuffix(strings.Repeat("0.5,", 64), ",")
	f := func(name string, r reply, status int, code string, msgPart string) {
		t.Helper()
		if r.status != status {
			t.Errorf("%s: status %d, want %d (%s)", name, r.status, status, r.body)
			return
		}
		if got := r.errCode(t); got != code {
			t.Errorf("%s: code %q, want %q", name, got, code)
		}
		if !strings.Contains(string(r.body), msgPart) {
			t.Errorf("%s: %s does not mention %q", name, r.body, msgPart)
		}
	}
	f("bad json", do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data": [[1,2`)), 400, "invalid_json", "not valid JSON")
	f("not an object", do(t, "POST", ts.url+"/predict", "application/json", []byte(`[1,2]`)), 400, "bad_request", `data`)
	f("content type", do(t, "POST", ts.url+"/predict", "text/plain", []byte(`{}`)), 415, "unsupported_media_type", "application/json")
	f("no data", do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"rows": []}`)), 422, "invalid_input", `missing \"data\"`)
	f("shape", do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data": [[1,2,3]]}`)), 422, "invalid_input", "[N, 64]")
	f("string", do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data": [[`+strings.Repeat("1,", 63)+`"a"]]}`)), 422, "invalid_input", "string where a number belongs")
	f("ragged", do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data": [[`+row+`],[1,2]]}`)), 422, "invalid_input", "row 1")
	f("empty", do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data": []}`)), 422, "invalid_input", "no rows")
	f("unknown input", do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"inputs": {"input": [[`+row+`]], "extra": [[1]]}}`)), 422, "invalid_input", "extra")
	f("rows", do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data": [[`+row+`],[`+row+`],[`+row+`],[`+row+`]]}`)), 413, "payload_too_large", "--max-rows")
	big := []byte(`{"data": [[` + strings.Repeat("0.25,", 20000) + `0]]}`)
	f("body", do(t, "POST", ts.url+"/predict", "application/json", big), 413, "payload_too_large", "--max-body-bytes")
	f("route", do(t, "GET", ts.url+"/nope", "", nil), 404, "not_found", "/docs")
	f("method", do(t, "GET", ts.url+"/predict", "", nil), 405, "method_not_allowed", "POST")
	// The server keeps serving after all of that.
	if r := do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data": [[`+row+`]]}`)); r.status != 200 {
		t.Fatalf("after errors: %d %s", r.status, r.body)
	}
}

func TestAPIKeys(t *testing.T) {
	ts := startServer(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), httpapi.Config{APIKeys: []string{"s3cret", "other"}}, batcher.Config{})
	body := []byte(`{"data": [[` + strings.TrimSuffix(strings.Repeat("0,", 64), ",") + `]]}`)
	if r := do(t, "POST", ts.url+"/predict", "application/json", body); r.status != 401 || r.errCode(t) != "unauthorized" || r.header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no key: %d %s", r.status, r.body)
	}
	if r := do(t, "POST", ts.url+"/predict", "application/json", body, "Authorization", "Bearer wrong"); r.status != 401 {
		t.Fatalf("wrong key: %d", r.status)
	}
	for _, k := range []string{"s3cret", "other"} {
		if r := do(t, "POST", ts.url+"/predict", "application/json", body, "Authorization", "Bearer "+k); r.status != 200 {
			t.Fatalf("key %s: %d %s", k, r.status, r.body)
		}
	}
	for _, open := range []string{"/health", "/health/live", "/metrics", "/model"} {
		if r := do(t, "GET", ts.url+open, "", nil); r.status != 200 {
			t.Fatalf("%s should stay open: %d", open, r.status)
		}
	}
}

func TestHealthAndReadiness(t *testing.T) {
	ts := startServer(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), httpapi.Config{}, batcher.Config{})
	v := do(t, "GET", ts.url+"/health", "", nil).json(t)
	if v["status"] != "ok" || v["device"] != "cpu" || v["model"].(map[string]any)["name"] != "digits_mlp" {
		t.Fatalf("health: %v", v)
	}
	ts.srv.SetState(serving.StateDraining, "shutting down")
	for _, p := range []string{"/health", "/health/ready"} {
		r := do(t, "GET", ts.url+p, "", nil)
		if r.status != 503 || r.errCode(t) != "not_ready" || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "shutting down") {
			t.Fatalf("%s while draining: %d %s", p, r.status, r.body)
		}
	}
	if r := do(t, "GET", ts.url+"/health/live", "", nil); r.status != 200 {
		t.Fatalf("live while draining: %d", r.status)
	}
	// Predictions are still served while draining.
	row := strings.TrimSuffix(strings.Repeat("0,", 64), ",")
	if r := do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data":[[`+row+`]]}`)); r.status != 200 {
		t.Fatalf("predict while draining: %d %s", r.status, r.body)
	}
	ts.srv.SetState(serving.StateBroken, "engine failed")
	if r := do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data":[[`+row+`]]}`)); r.status != 503 || r.errCode(t) != "not_ready" {
		t.Fatalf("predict while broken: %d %s", r.status, r.body)
	}
	ts.srv.SetState(serving.StateReady, "")
	m := do(t, "GET", ts.url+"/model", "", nil).json(t)
	if m["format"] != "onnx" || len(m["labels"].([]any)) != 10 || m["inputs"].([]any)[0].(map[string]any)["dtype"] != "float32" {
		t.Fatalf("model: %v", m)
	}
}

// Concurrent requests with mixed row counts each get exactly their own rows
// back, equal to what the engine computes for them alone, and the batcher
// really coalesced them (the batch-size histogram has batches above 1 row).
func TestConcurrentRequestsCoalesceAndSplitExactly(t *testing.T) {
	ts := startServer(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), httpapi.Config{}, batcher.Config{MaxBatchRows: 64, MaxDelay: 2 * time.Millisecond})
	rows, _ := testRows(t, ts.m)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 48; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				n := 1 + (g+i)%5
				mine := make([][]float64, n)
				for r := range mine {
					src := rows[(g+i+r)%len(rows)]
					row := append([]float64(nil), src...)
					row[0] = float64(g*100+i*10+r) / 10000 // make every row distinct
					mine[r] = row
				}
				resp := do(t, "POST", ts.url+"/predict", "application/json", predictBody(mine))
				var v struct{ Predictions [][]float64 }
				if err := json.Unmarshal(resp.body, &v); err != nil || resp.status != 200 {
					errs <- fmt.Errorf("status %d: %s", resp.status, resp.body)
					return
				}
				x, err := engine.NewTensor(engine.Float32, []int64{int64(n), 64})
				if err != nil {
					errs <- err
					return
				}
				for r := range mine {
					for c, val := range mine[r] {
						x.Float32s()[r*64+c] = float32(val)
					}
				}
				want, err := ts.m.Run(context.Background(), []engine.Tensor{x})
				if err != nil {
					errs <- err
					return
				}
				if len(v.Predictions) != n {
					errs <- fmt.Errorf("%d rows sent, %d predictions", n, len(v.Predictions))
					return
				}
				for r := range v.Predictions {
					for c, val := range v.Predictions[r] {
						if float32(val) != float32(want[0].At(r*10+c)) {
							errs <- fmt.Errorf("request %d/%d row %d: got %v want %v", g, i, r, val, want[0].At(r*10+c))
							return
						}
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	metrics := string(do(t, "GET", ts.url+"/metrics", "", nil).body)
	count := metricValue(t, metrics, `fw_batch_size_rows_count{model="test",version="1"}`)
	le1 := metricValue(t, metrics, `fw_batch_size_rows_bucket{model="test",version="1",le="1"}`)
	if count == 0 || count-le1 == 0 {
		t.Fatalf("no batch above 1 row: %v batches, %v of 1 row", count, le1)
	}
	t.Logf("%v engine calls for 480 requests; %v of them single-row", count, le1)
}

func metricValue(t testing.TB, text, name string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` ([0-9.e+]+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("metric %s not found", name)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func TestMetricsExposition(t *testing.T) {
	ts := startServer(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), httpapi.Config{}, batcher.Config{})
	do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data": [[1]]}`))
	text := string(do(t, "GET", ts.url+"/metrics", "", nil).body)
	for _, want := range []string{`fw_http_requests_total{code="422",endpoint="predict"} 1`, "fw_http_request_duration_seconds_bucket", "fw_queue_depth", "fw_inference_duration_seconds", "fw_rows_total", "go_goroutines", "process_resident_memory_bytes", "fw_batch_size_rows_bucket"} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func multipartBody(t testing.TB, files map[string][]byte) ([]byte, string) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for name, data := range files {
		fw, err := w.CreateFormFile("file", name)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(data)
	}
	w.Close()
	return buf.Bytes(), w.FormDataContentType()
}

func TestPredictImage(t *testing.T) {
	dir := modelsDir(t)
	for _, model := range []string{"digits_cnn.onnx", "digits_mlp.onnx"} {
		t.Run(model, func(t *testing.T) {
			ts := startServer(t, filepath.Join(dir, model), httpapi.Config{MaxImagePixels: 1 << 20}, batcher.Config{})
			samples, _ := filepath.Glob(filepath.Join(dir, "samples", "digit_*.png"))
			if len(samples) < 10 {
				t.Fatalf("expected 10 digit samples, found %d", len(samples))
			}
			files := map[string][]byte{}
			for _, s := range samples[:3] {
				b, _ := os.ReadFile(s)
				files[filepath.Base(s)] = b
			}
			// Raw body, one image: the label is in the file name (digit_<label>_<i>.png).
			for _, s := range samples {
				b, _ := os.ReadFile(s)
				r := do(t, "POST", ts.url+"/predict/image?top_k=3", "image/png", b)
				var v struct {
					Predictions []struct {
						TopK []struct {
							Label string
							Index int
							Score float64
						} `json:"top_k"`
					}
				}
				if err := json.Unmarshal(r.body, &v); err != nil || r.status != 200 || len(v.Predictions) != 1 || len(v.Predictions[0].TopK) != 3 {
					t.Fatalf("%s: %d %s", s, r.status, r.body)
				}
				want := strings.Split(filepath.Base(s), "_")[1]
				if got := v.Predictions[0].TopK[0].Label; got != want {
					t.Errorf("%s predicted %s", s, got)
				}
			}
			body, ct := multipartBody(t, files)
			r := do(t, "POST", ts.url+"/predict/image?scores=true", ct, body)
			var v struct{ Predictions []map[string]any }
			if json.Unmarshal(r.body, &v); r.status != 200 || len(v.Predictions) != 3 || len(v.Predictions[0]["scores"].([]any)) != 10 {
				t.Fatalf("multipart: %d %s", r.status, r.body)
			}
		})
	}
}

func TestPredictImageErrors(t *testing.T) {
	dir := modelsDir(t)
	ts := startServer(t, filepath.Join(dir, "digits_cnn.onnx"), httpapi.Config{MaxImagePixels: 64 * 64}, batcher.Config{})
	png, _ := os.ReadFile(filepath.Join(dir, "samples", "digit_3_2.png"))
	f := func(name string, r reply, status int, code string) {
		t.Helper()
		if r.status != status || r.errCode(t) != code {
			t.Errorf("%s: %d %s, want %d %s", name, r.status, r.body, status, code)
		}
	}
	f("corrupt", do(t, "POST", ts.url+"/predict/image", "image/png", png[:len(png)/2]), 400, "bad_image")
	f("garbage", do(t, "POST", ts.url+"/predict/image", "image/jpeg", []byte("hello")), 400, "bad_image")
	f("content type", do(t, "POST", ts.url+"/predict/image", "application/pdf", png), 415, "unsupported_media_type")
	f("top_k", do(t, "POST", ts.url+"/predict/image?top_k=0", "image/png", png), 400, "bad_request")
	// An empty resize is a mistake, not "the model's own" (schemathesis sent resize=).
	f("empty resize", do(t, "POST", ts.url+"/predict/image?resize=", "image/png", png), 400, "bad_request")
	f("empty form", func() reply { b, ct := multipartBody(t, nil); return do(t, "POST", ts.url+"/predict/image", ct, b) }(), 400, "bad_request")
	jpg, _ := os.ReadFile(filepath.Join(dir, "samples", "rgb_224.jpg"))
	f("pixels", do(t, "POST", ts.url+"/predict/image", "image/jpeg", jpg), 413, "payload_too_large")
	if r := do(t, "POST", ts.url+"/predict/image", "image/png", png); r.status != 200 {
		t.Fatalf("after errors: %d %s", r.status, r.body)
	}
}

func TestBatchEndpoint(t *testing.T) {
	ts := startServer(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), httpapi.Config{}, batcher.Config{})
	rows, want := testRows(t, ts.m)
	items := []map[string]any{}
	for i, row := range rows {
		items = append(items, map[string]any{"id": fmt.Sprintf("r%d", i), "data": [][]float64{row}})
	}
	items = append(items, map[string]any{"id": "bad", "data": [][]float64{{1, 2}}})
	items = append(items, map[string]any{"data": [][]float64{rows[0], rows[1]}})
	b, _ := json.Marshal(map[string]any{"requests": items})
	r := do(t, "POST", ts.url+"/predict/batch", "application/json", b)
	var v struct {
		Responses []struct {
			ID          any
			Predictions [][]float64
			Error       *struct{ Code, Message string }
		}
	}
	if err := json.Unmarshal(r.body, &v); err != nil || r.status != 200 || len(v.Responses) != len(items) {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	for i := range rows {
		resp := v.Responses[i]
		if resp.ID != fmt.Sprintf("r%d", i) || resp.Error != nil || float32(resp.Predictions[0][0]) != float32(want.At(i*10)) {
			t.Fatalf("item %d: %+v", i, resp)
		}
	}
	if bad := v.Responses[len(rows)]; bad.ID != "bad" || bad.Error == nil || bad.Error.Code != "invalid_input" {
		t.Fatalf("bad item: %+v", bad)
	}
	if last := v.Responses[len(rows)+1]; last.ID != float64(len(rows)+1) || len(last.Predictions) != 2 {
		t.Fatalf("item without id: %+v", last)
	}
	if r := do(t, "POST", ts.url+"/predict/batch", "application/json", []byte(`{"data": []}`)); r.status != 422 {
		t.Fatalf("missing requests: %d", r.status)
	}
}

// A long NDJSON stream goes through line by line, in order, with bad lines
// answered individually.
func TestBatchNDJSONStream(t *testing.T) {
	ts := startServer(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), httpapi.Config{MaxBodyBytes: 4096}, batcher.Config{})
	row := strings.TrimSuffix(strings.Repeat("0.5,", 64), ",")
	const lines = 5000
	pr, pw := io.Pipe()
	go func() {
		w := bufioWriter(pw)
		for i := 0; i < lines; i++ {
			switch {
			case i == 17:
				fmt.Fprintf(w, "{broken\n")
			case i == 18:
				fmt.Fprintf(w, "{\"id\": %d, \"data\": [[1,2]]}\n", i)
			case i == 19:
				fmt.Fprintf(w, "{\"id\": %d, \"pad\": %q}\n", i, strings.Repeat("x", 5000)) // longer than --max-body-bytes
			default:
				fmt.Fprintf(w, "{\"id\": %d, \"data\": [[%s]]}\n", i, row)
			}
		}
		w.Flush()
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", ts.url+"/predict/batch", pr)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	dec := json.NewDecoder(resp.Body)
	n := 0
	for ; dec.More(); n++ {
		var v map[string]any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		_, isErr := v["error"]
		switch n {
		case 17, 18, 19:
			if !isErr {
				t.Errorf("line %d should be an error: %v", n, v)
			}
		default:
			if isErr || v["id"] != float64(n) {
				t.Fatalf("line %d: %v", n, v)
			}
		}
	}
	if n != lines {
		t.Fatalf("%d responses for %d lines", n, lines)
	}
}

// /predict/batch joins its items' rows into few engine calls (NDJSON and
// JSON alike), answers each item as /predict would, in order, counts each
// as a request, and when a joined call fails runs its items alone, so only
// the item that fails gets an error.
func TestBatchJoinsItems(t *testing.T) {
	var mu sync.Mutex
	calls, rowsSeen := 0, 0
	const poison = 77 // an engine call holding a row starting with this fails
	wrap := func(run batcher.RunFunc) batcher.RunFunc {
		return func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
			mu.Lock()
			calls++
			rowsSeen += int(in[0].Shape[0])
			mu.Unlock()
			x, per := in[0].Float32s(), int(in[0].Shape[1])
			for r := 0; r < int(in[0].Shape[0]); r++ {
				if x[r*per] == poison {
					return nil, fmt.Errorf("the engine refuses row %d", r)
				}
			}
			return run(ctx, in)
		}
	}
	ts := startServerWith(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), httpapi.Config{}, batcher.Config{MaxBatchRows: 64}, wrap)
	rows, _ := testRows(t, ts.m)
	// What /predict answers for each row alone.
	want := make([]string, len(rows))
	for i, row := range rows {
		r := do(t, "POST", ts.url+"/predict", "application/json", predictBody([][]float64{row}))
		var v struct{ Predictions json.RawMessage }
		if err := json.Unmarshal(r.body, &v); err != nil || r.status != 200 {
			t.Fatalf("/predict: %d %s", r.status, r.body)
		}
		want[i] = string(v.Predictions)
	}
	const n = 300
	bad := slices.Clone(rows[0])
	bad[0] = poison
	var nd bytes.Buffer
	var items []any
	for i := 0; i < n; i++ {
		item := map[string]any{"id": i, "data": [][]float64{rows[i%len(rows)]}}
		switch i {
		case 40:
			item["data"] = [][]float64{bad}
		case 41:
			item["data"] = [][]float64{rows[0], rows[1]} // two rows joins too
		case 42:
			item["data"] = [][]float64{{1, 2}} // refused at decoding: never sent
		}
		b, _ := json.Marshal(item)
		nd.Write(append(b, '\n'))
		items = append(items, item)
	}
	jsonBody, _ := json.Marshal(map[string]any{"requests": items})
	for _, c := range []struct {
		ctype string
		body  []byte
	}{{"application/x-ndjson", nd.Bytes()}, {"application/json", jsonBody}} {
		mu.Lock()
		calls, rowsSeen = 0, 0
		mu.Unlock()
		before := ts.srv.Current().Stats.Snapshot()
		r := do(t, "POST", ts.url+"/predict/batch", c.ctype, c.body)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", c.ctype, r.status, r.body)
		}
		var got []map[string]json.RawMessage
		if c.ctype == "application/json" {
			var v struct{ Responses []map[string]json.RawMessage }
			if err := json.Unmarshal(r.body, &v); err != nil {
				t.Fatal(err)
			}
			got = v.Responses
		} else {
			for _, line := range bytes.Split(bytes.TrimSpace(r.body), []byte("\n")) {
				var v map[string]json.RawMessage
				if err := json.Unmarshal(line, &v); err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				got = append(got, v)
			}
		}
		if len(got) != n {
			t.Fatalf("%s: %d answers for %d items", c.ctype, len(got), n)
		}
		for i, v := range got {
			if string(v["id"]) != strconv.Itoa(i) {
				t.Fatalf("%s: answer %d has id %s", c.ctype, i, v["id"])
			}
			switch i {
			case 40, 42:
				if v["error"] == nil {
					t.Errorf("%s: item %d: %s, want an error", c.ctype, i, v["predictions"])
				}
			case 41:
				if p := string(v["predictions"]); !strings.HasPrefix(p, "["+strings.Trim(want[0], "[]")+"],[") && !strings.HasPrefix(p, "[["+strings.Trim(want[0], "[]")+"],") {
					t.Errorf("%s: item 41: %s, want %s then %s", c.ctype, p, want[0], want[1])
				}
			default:
				if string(v["predictions"]) != want[i%len(rows)] {
					t.Fatalf("%s: item %d: %s, want %s (as /predict)", c.ctype, i, v["predictions"], want[i%len(rows)])
				}
			}
		}
		mu.Lock()
		c2, r2 := calls, rowsSeen
		mu.Unlock()
		// 300 items, 301 rows sent (item 42 never is): joined, far fewer
		// calls than items, even with the poisoned group run again alone.
		if c2 > n/3 || r2 < n {
			t.Errorf("%s: %d engine calls for %d rows of %d items", c.ctype, c2, r2, n)
		}
		after := ts.srv.Current().Stats.Snapshot()
		if ok := after.Success.Count - before.Success.Count; ok != n-2 {
			t.Errorf("%s: %d successful requests counted, want %d (one per item)", c.ctype, ok, n-2)
		}
	}
}

// A joined request that fails for what is not its items' fault (here its
// engine call answers that the server is overloaded) is every item's
// answer as it is: its items are not retried one by one into the same
// condition, which would multiply the load by the items.
func TestBatchJoinedRefusalNotRetried(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	busy := func(batcher.RunFunc) batcher.RunFunc {
		return func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
			mu.Lock()
			calls++
			mu.Unlock()
			return nil, fmt.Errorf("%w: the device is busy", batcher.ErrQueueFull)
		}
	}
	ts := startServerWith(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), httpapi.Config{}, batcher.Config{MaxBatchRows: 64}, busy)
	rows, _ := testRows(t, ts.m)
	const n = 256 // four chunks of 64 items
	var items []any
	for i := 0; i < n; i++ {
		items = append(items, map[string]any{"data": [][]float64{rows[i%len(rows)]}})
	}
	body, _ := json.Marshal(map[string]any{"requests": items})
	r := do(t, "POST", ts.url+"/predict/batch", "application/json", body)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if refused := bytes.Count(r.body, []byte(`"code":"overloaded"`)); refused != n {
		t.Fatalf("%d of %d items answered overloaded: %.300s", refused, n, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls > 8 { // one call per chunk's group (the batcher may retry a failed call once)
		t.Fatalf("%d engine calls for 4 joined requests: their items were retried one by one", calls)
	}
}

// Items of a model that cannot join them (here one served without a batch
// axis) still run side by side, as many in flight as the request's chunks
// hold, not one chunk's item after another.
func TestBatchUnjoinedItemsInFlight(t *testing.T) {
	var ts *testServer
	var mu sync.Mutex
	deepest := 0
	watch := func(run batcher.RunFunc) batcher.RunFunc {
		return func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
			mu.Lock()
			deepest = max(deepest, ts.srv.Current().Batcher.QueueDepth())
			mu.Unlock()
			time.Sleep(time.Millisecond)
			return run(ctx, in)
		}
	}
	ts = startServerWith(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), httpapi.Config{}, batcher.Config{Unbatched: true}, watch)
	rows, _ := testRows(t, ts.m)
	var items []any
	for i := 0; i < 256; i++ {
		items = append(items, map[string]any{"data": [][]float64{rows[i%len(rows)]}})
	}
	body, _ := json.Marshal(map[string]any{"requests": items})
	r := do(t, "POST", ts.url+"/predict/batch", "application/json", body)
	if r.status != 200 || bytes.Contains(r.body, []byte(`"error"`)) {
		t.Fatalf("%d %.300s", r.status, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if deepest < 32 {
		t.Fatalf("at most %d items waited for the engine at once: the items ran one after another", deepest)
	}
}

// gateEngine replaces the server's batcher with one whose engine calls each
// report on started, then wait for release before running the model, so a
// test decides when a batch ends instead of relying on the model's speed.
func gateEngine(t *testing.T, ts *testServer, bc batcher.Config) (started chan struct{}, release func()) {
	t.Helper()
	started = make(chan struct{}, 64)
	gate := make(chan struct{})
	run := func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		started <- struct{}{}
		<-gate
		return ts.m.Forward(ctx, in)
	}
	old := ts.srv.Swap(&serving.Instance{Model: ts.m, Batcher: batcher.New(run, bc, ts.srv.BatchStats())})
	old.Batcher.Close(context.Background())
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release) // before the server's cleanup closes the batcher
	return started, release
}

// waitGate waits for an engine call to start, failing instead of hanging.
func waitGate(t *testing.T, started chan struct{}) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no engine call started")
	}
}

// The queue bound answers 503 overloaded with Retry-After instead of growing
// latency; the queued request is served once the engine is free.
func TestOverload(t *testing.T) {
	dir := modelsDir(t)
	bc := batcher.Config{MaxQueue: 1, MaxBatchRows: 1, MaxDelay: 0, Instances: 1}
	ts := startServer(t, filepath.Join(dir, "digits_mlp.onnx"), httpapi.Config{Timeout: time.Minute}, bc)
	started, release := gateEngine(t, ts, bc)
	body := []byte(`{"data":[[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]]}`)
	replies := make(chan reply, 2)
	send := func() { replies <- do(t, "POST", ts.url+"/predict", "application/json", body) }
	go send()
	waitGate(t, started) // A's engine call runs and holds the only instance
	go send()
	inst := ts.srv.Current()
	for deadline := time.Now().Add(10 * time.Second); inst.Batcher.QueueDepth() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second request never queued")
		}
	}
	r := do(t, "POST", ts.url+"/predict", "application/json", body) // the queue (1) is full
	if r.status != 503 || r.errCode(t) != "overloaded" || r.header.Get("Retry-After") == "" {
		t.Fatalf("over the queue bound: %d %v %s, want 503 overloaded with Retry-After", r.status, r.header, r.body)
	}
	release()
	for i := 0; i < 2; i++ {
		select {
		case r := <-replies:
			if r.status != 200 {
				t.Fatalf("a request within the bound: %d %s", r.status, r.body)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("requests within the bound never answered")
		}
	}
}

// A request whose --timeout passes while its batch runs is answered 504
// timeout at once; the server keeps serving afterwards.
func TestTimeoutWhileBatchRuns(t *testing.T) {
	dir := modelsDir(t)
	bc := batcher.Config{MaxBatchRows: 1, MaxDelay: 0, Instances: 1}
	ts := startServer(t, filepath.Join(dir, "digits_mlp.onnx"), httpapi.Config{Timeout: 100 * time.Millisecond}, bc)
	started, release := gateEngine(t, ts, bc)
	body := []byte(`{"data":[[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]]}`)
	replies := make(chan reply, 1)
	go func() { replies <- do(t, "POST", ts.url+"/predict", "application/json", body) }()
	waitGate(t, started)
	select {
	case r := <-replies: // the engine call is still held by the gate
		if r.status != 504 || r.errCode(t) != "timeout" {
			t.Fatalf("timeout during the batch: %d %s, want 504 timeout", r.status, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer although the timeout passed")
	}
	release()
	if r := do(t, "POST", ts.url+"/predict", "application/json", body); r.status != 200 {
		t.Fatalf("after a timeout: %d %s", r.status, r.body)
	}
}

// An exception inside the engine is a 500 with the error shape, and the
// server keeps serving. A TorchScript file without fw.json has no declared
// shapes, so a wrong shape reaches libtorch, which throws.
func TestEngineFailureIs500AndServerKeepsServing(t *testing.T) {
	dir := modelsDir(t)
	if _, err := engine.TorchVersion(""); err != nil {
		if os.Getenv("FW_REQUIRE_MODELS") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ts := startServer(t, filepath.Join(dir, "bad", "plain.ts.pt"), httpapi.Config{}, batcher.Config{})
	r := do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data": [[1, 2, 3]]}`))
	if r.status != 500 || r.errCode(t) != "engine_error" {
		t.Fatalf("wrong shape through libtorch: %d %s", r.status, r.body)
	}
	row := strings.TrimSuffix(strings.Repeat("0.5,", 64), ",")
	if r := do(t, "POST", ts.url+"/predict", "application/json", []byte(`{"data": [[`+row+`]]}`)); r.status != 200 {
		t.Fatalf("after an engine failure: %d %s", r.status, r.body)
	}
}

// With the access log on, a streamed NDJSON response still streams.
func TestAccessLogKeepsNDJSONStreaming(t *testing.T) {
	ts := startServer(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), httpapi.Config{AccessLog: true}, batcher.Config{})
	row := strings.TrimSuffix(strings.Repeat("0.5,", 64), ",")
	var body strings.Builder
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&body, "{\"id\": %d, \"data\": [[%s]]}\n", i, row)
	}
	r := do(t, "POST", ts.url+"/predict/batch", "application/x-ndjson", []byte(body.String()))
	if r.status != 200 || bytes.Count(r.body, []byte("\n")) != 50 {
		t.Fatalf("status %d, %d lines", r.status, bytes.Count(r.body, []byte("\n")))
	}
}

// --pprof serves Go's runtime profiles behind the API keys; without it the
// paths are unknown routes.
func TestPprof(t *testing.T) {
	model := filepath.Join(modelsDir(t), "digits_mlp.onnx")
	off := startServer(t, model, httpapi.Config{}, batcher.Config{})
	if r := do(t, "GET", off.url+"/debug/pprof/goroutine?debug=1", "", nil); r.status != 404 || r.errCode(t) != "not_found" {
		t.Fatalf("without --pprof: %d %s", r.status, r.body)
	}
	ts := startServer(t, model, httpapi.Config{Pprof: true, APIKeys: []string{"k"}}, batcher.Config{})
	if r := do(t, "GET", ts.url+"/debug/pprof/goroutine?debug=1", "", nil); r.status != 401 || r.errCode(t) != "unauthorized" {
		t.Fatalf("no key: %d %s", r.status, r.body)
	}
	r := do(t, "GET", ts.url+"/debug/pprof/goroutine?debug=1", "", nil, "Authorization", "Bearer k")
	if r.status != 200 || !strings.Contains(string(r.body), "goroutine profile:") {
		t.Fatalf("goroutines: %d %.200s", r.status, r.body)
	}
	// A CPU profile is a gzipped protocol buffer, what go tool pprof reads.
	r = do(t, "GET", ts.url+"/debug/pprof/profile?seconds=1", "", nil, "Authorization", "Bearer k")
	if r.status != 200 || len(r.body) < 2 || r.body[0] != 0x1f || r.body[1] != 0x8b {
		t.Fatalf("cpu profile: %d %.200q", r.status, r.body)
	}
	if r := do(t, "PUT", ts.url+"/debug/pprof/heap", "", nil, "Authorization", "Bearer k"); r.status != 405 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
}
