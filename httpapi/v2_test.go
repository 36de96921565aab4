package httpapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/serving"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// v2ModelsDir is where `make models` wrote the reference models.
func v2ModelsDir(t testing.TB) string { return testmodels.Dir(t) }

type v2TestServer struct {
	url string
	srv *Server
	m   *engine.Model
}

// v2Start serves a reference model on a real 127.0.0.1 socket, as fw serve does.
func v2Start(t testing.TB, file string, cfg Config) *v2TestServer {
	t.Helper()
	m, err := engine.Load(context.Background(), filepath.Join(v2ModelsDir(t), file), engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	base, cancel := context.WithCancel(context.Background())
	srv := NewTestServer(base, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	b := batcher.New(m.Forward, batcher.Config{MaxBatchRows: 64, MaxDelay: 0, Instances: 1, MaxQueue: 64}, srv.BatchStats())
	srv.Swap(&serving.Instance{Model: m, Batcher: b})
	srv.SetState(serving.StateReady, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &fasthttp.Server{Handler: srv.Handler, StreamRequestBody: true, DisablePreParseMultipartForm: true, MaxRequestBodySize: int(srv.cfg.MaxBodyBytes)}
	go hs.Serve(ln)
	t.Cleanup(func() {
		hs.Shutdown()
		cancel()
		if inst := srv.Current(); inst != nil {
			inst.Batcher.Close(context.Background())
			inst.Model.Close()
		}
	})
	return &v2TestServer{url: "http://" + ln.Addr().String(), srv: srv, m: m}
}

type v2Reply struct {
	status int
	header http.Header
	body   []byte
}

func v2Do(t testing.TB, method, url string, body []byte, hdr ...string) v2Reply {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
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
	return v2Reply{resp.StatusCode, resp.Header, b}
}

func (r v2Reply) json(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("response is not JSON (%d): %q", r.status, r.body)
	}
	return v
}

// expectError checks a V2 error: the status, "error" a readable message
// string (what tritonclient shows), fw's code beside it.
func (r v2Reply) expectError(t testing.TB, status int, code, contains string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	v := r.json(t)
	msg, ok := v["error"].(string)
	if !ok || msg == "" {
		t.Fatalf(`"error" is not a message string: %s`, r.body)
	}
	if got, _ := v["code"].(string); got != code {
		t.Fatalf("code %q, want %q: %s", got, code, r.body)
	}
	if !strings.Contains(msg, contains) {
		t.Fatalf("message %q does not say %q", msg, contains)
	}
}

// v2TestVector returns the model's test-vector input and output tensors.
func v2TestVector(t testing.TB, m *engine.Model) (in, out map[string]engine.Tensor, atol, rtol float64) {
	t.Helper()
	if m.Meta == nil || m.Meta.TestVector == nil {
		t.Fatalf("%s has no test vector", m.Path)
	}
	tv := m.Meta.TestVector
	dec := func(src map[string]engine.EncodedTensor) map[string]engine.Tensor {
		res := map[string]engine.Tensor{}
		for k, e := range src {
			x, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			res[k] = x
		}
		return res
	}
	return dec(tv.Inputs), dec(tv.Outputs), tv.Atol, tv.Rtol
}

func v2Values(x engine.Tensor) []any {
	out := make([]any, x.Len())
	for i := range out {
		if x.DType == engine.Int64 {
			out[i] = x.Int64s()[i]
		} else {
			out[i] = x.At(i)
		}
	}
	return out
}

// v2Nest shapes flat values into nested arrays of shape.
func v2Nest(flat []any, shape []int64) any {
	if len(shape) <= 1 {
		return flat
	}
	n := len(flat) / int(shape[0])
	out := make([]any, shape[0])
	for i := range out {
		out[i] = v2Nest(flat[i*n:(i+1)*n], shape[1:])
	}
	return out
}

func v2JSONInput(name string, x engine.Tensor, nested bool) map[string]any {
	data := any(v2Values(x))
	if nested {
		data = v2Nest(v2Values(x), x.Shape)
	}
	return map[string]any{"name": name, "shape": x.Shape, "datatype": serving.DatatypeName(x.DType), "data": data}
}

func v2Marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// v2BinaryBody builds a binary-extension body: the JSON header, then the
// raw data of the inputs that declare binary_data_size.
func v2BinaryBody(t testing.TB, req map[string]any, raw ...[]byte) ([]byte, string) {
	h := v2Marshal(t, req)
	body := append([]byte(nil), h...)
	for _, r := range raw {
		body = append(body, r...)
	}
	return body, strconv.Itoa(len(h))
}

type v2Out struct {
	Name       string         `json:"name"`
	Datatype   string         `json:"datatype"`
	Shape      []int64        `json:"shape"`
	Data       []any          `json:"data"`
	Parameters map[string]any `json:"parameters"`
}

type v2Resp struct {
	ModelName    string  `json:"model_name"`
	ModelVersion string  `json:"model_version"`
	ID           *string `json:"id"`
	Outputs      []v2Out `json:"outputs"`
}

// v2Decode parses an inference response, JSON or binary, into the header
// and each output's values as float64.
func v2Decode(t testing.TB, r v2Reply) (v2Resp, map[string][]float64) {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	js, bin := r.body, []byte(nil)
	if h := r.header.Get(v2HeaderLength); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n > len(r.body) {
			t.Fatalf("bad %s %q for a %d-byte body", v2HeaderLength, h, len(r.body))
		}
		if ct := r.header.Get("Content-Type"); ct != "application/octet-stream" {
			t.Fatalf("binary response with Content-Type %q", ct)
		}
		js, bin = r.body[:n], r.body[n:]
	} else if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("JSON response with Content-Type %q", ct)
	}
	var resp v2Resp
	if err := json.Unmarshal(js, &resp); err != nil {
		t.Fatalf("response header is not JSON: %v: %q", err, js)
	}
	vals := map[string][]float64{}
	for _, o := range resp.Outputs {
		var v []float64
		if size, ok := o.Parameters["binary_data_size"].(float64); ok {
			if o.Data != nil {
				t.Fatalf("output %s has both data and binary_data_size", o.Name)
			}
			n := int(size)
			if n > len(bin) {
				t.Fatalf("output %s: binary_data_size %d, %d bytes left", o.Name, n, len(bin))
			}
			dt := serving.ParseDatatype(o.Datatype)
			x, err := engine.NewTensor(dt, []int64{int64(n / dt.Size())})
			if err != nil {
				t.Fatalf("output %s: %v", o.Name, err)
			}
			copy(x.Data, bin[:n])
			bin = bin[n:]
			for i := 0; i < x.Len(); i++ {
				v = append(v, x.At(i))
			}
		} else {
			for _, e := range o.Data {
				f, ok := e.(float64)
				if !ok {
					t.Fatalf("output %s holds %v", o.Name, e)
				}
				v = append(v, f)
			}
		}
		if int64(len(v)) != engine.NumElements(o.Shape) {
			t.Fatalf("output %s: %d values for shape %v", o.Name, len(v), o.Shape)
		}
		vals[o.Name] = v
	}
	if len(bin) != 0 {
		t.Fatalf("%d unclaimed bytes after the outputs", len(bin))
	}
	return resp, vals
}

func v2Close(t testing.TB, name string, got []float64, want engine.Tensor, atol, rtol float64) {
	t.Helper()
	if len(got) != want.Len() {
		t.Fatalf("%s: %d values, want %d", name, len(got), want.Len())
	}
	for i, g := range got {
		w := want.At(i)
		if math.Abs(g-w) > atol+rtol*math.Abs(w) {
			t.Fatalf("%s[%d] = %g, want %g (atol %g, rtol %g)", name, i, g, w, atol, rtol)
		}
	}
}

func TestV2Metadata(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	r := v2Do(t, "GET", ts.url+"/v2", nil)
	if r.status != 200 {
		t.Fatalf("GET /v2: %d %s", r.status, r.body)
	}
	v := r.json(t)
	if v["name"] != "fw" || v["version"] == "" || fmt.Sprint(v["extensions"]) != "[classification binary_tensor_data model_configuration statistics model_repository system_shared_memory cuda_shared_memory logging trace generate]" {
		t.Fatalf("GET /v2: %s", r.body)
	}
	for _, p := range []string{"/v2/health/live", "/v2/health/ready", "/v2/models/digits_mlp/ready", "/v2/models/digits_mlp/versions/1/ready"} {
		// 200 with an empty body, as Triton answers: its scripts compare curl's output with "200"
		if r := v2Do(t, "GET", ts.url+p, nil); r.status != 200 || len(r.body) != 0 {
			t.Fatalf("GET %s: %d %q", p, r.status, r.body)
		}
	}
	for _, p := range []string{"/v2/health/live", "/v2/health/ready", "/v2/models/digits_mlp/ready"} {
		if r := v2Do(t, "HEAD", ts.url+p, nil); r.status != 200 {
			t.Fatalf("HEAD %s: %d", p, r.status)
		}
	}
	for _, p := range []string{"/v2/models/digits_mlp", "/v2/models/digits_mlp/versions/1"} {
		r := v2Do(t, "GET", ts.url+p, nil)
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", p, r.status, r.body)
		}
		var md struct {
			Name     string         `json:"name"`
			Versions []string       `json:"versions"`
			Platform string         `json:"platform"`
			Inputs   []v2TensorMeta `json:"inputs"`
			Outputs  []v2TensorMeta `json:"outputs"`
		}
		if err := json.Unmarshal(r.body, &md); err != nil {
			t.Fatal(err)
		}
		if md.Name != "digits_mlp" || fmt.Sprint(md.Versions) != "[1]" || md.Platform != "onnxruntime_onnx" ||
			len(md.Inputs) != 1 || md.Inputs[0].Name != "input" || md.Inputs[0].Datatype != "FP32" || fmt.Sprint(md.Inputs[0].Shape) != "[-1 64]" ||
			len(md.Outputs) != 1 || md.Outputs[0].Name != "logits" || md.Outputs[0].Datatype != "FP32" || fmt.Sprint(md.Outputs[0].Shape) != "[-1 10]" {
			t.Fatalf("GET %s: %s", p, r.body)
		}
	}
	v2Do(t, "GET", ts.url+"/v2/models/nope", nil).expectError(t, 404, CodeNotFound, `Request for unknown model: 'nope' is not found; the models served are digits_mlp`)
	v2Do(t, "GET", ts.url+"/v2/models/nope/ready", nil).expectError(t, 404, CodeNotFound, `digits_mlp`)
	v2Do(t, "GET", ts.url+"/v2/models/digits_mlp/versions/7", nil).expectError(t, 404, CodeNotFound, `this server serves version 1 of digits_mlp`)
	v2Do(t, "POST", ts.url+"/v2/models/nope/infer", []byte(`{}`)).expectError(t, 404, CodeNotFound, `Request for unknown model: 'nope'`)
	v2Do(t, "GET", ts.url+"/v2/models/digits_mlp/trace", nil).expectError(t, 404, CodeNotFound, "no route")
	v2Do(t, "GET", ts.url+"/v2/repository/index", nil).expectError(t, 405, CodeMethodNotAllowed, "use POST")
	v2Do(t, "GET", ts.url+"/v2x", nil).expectError(t, 404, CodeNotFound, "no route")
	v2Do(t, "GET", ts.url+"/v2/models/digits_mlp/infer", nil).expectError(t, 405, CodeMethodNotAllowed, "POST")
	v2Do(t, "POST", ts.url+"/v2/models/digits_mlp", []byte(`{}`)).expectError(t, 405, CodeMethodNotAllowed, "GET")

	// Draining: liveness stays, readiness turns 503, inference is still served.
	in, _, _, _ := v2TestVector(t, ts.m)
	body := v2Marshal(t, map[string]any{"inputs": []any{v2JSONInput("input", in["input"], false)}})
	ts.srv.SetState(serving.StateDraining, "shutting down")
	if r := v2Do(t, "GET", ts.url+"/v2/health/live", nil); r.status != 200 {
		t.Fatalf("live while draining: %d", r.status)
	}
	v2Do(t, "GET", ts.url+"/v2/health/ready", nil).expectError(t, 503, CodeNotReady, "shutting down")
	v2Do(t, "GET", ts.url+"/v2/models/digits_mlp/ready", nil).expectError(t, 503, CodeNotReady, "shutting down")
	if r := v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/infer", body); r.status != 200 {
		t.Fatalf("infer while draining: %d %s", r.status, r.body)
	}
	// Not ready (a reload that broke, say): inference answers 503 too.
	ts.srv.SetState(serving.StateBroken, "the model failed to load")
	v2Do(t, "GET", ts.url+"/v2/health/ready", nil).expectError(t, 503, CodeNotReady, "failed to load")
	v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/infer", body).expectError(t, 503, CodeNotReady, "not ready")
	ts.srv.SetState(serving.StateReady, "")
}

func TestV2InferJSON(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	in, want, atol, rtol := v2TestVector(t, ts.m)
	for _, nested := range []bool{false, true} {
		body := v2Marshal(t, map[string]any{"id": "req-1", "inputs": []any{v2JSONInput("input", in["input"], nested)}})
		for _, url := range []string{"/v2/models/digits_mlp/infer", "/v2/models/digits_mlp/versions/1/infer"} {
			r := v2Do(t, "POST", ts.url+url, body)
			resp, vals := v2Decode(t, r)
			if resp.ModelName != "digits_mlp" || resp.ModelVersion != "1" || resp.ID == nil || *resp.ID != "req-1" || len(resp.Outputs) != 1 {
				t.Fatalf("response header: %s", r.body)
			}
			o := resp.Outputs[0]
			if o.Name != "logits" || o.Datatype != "FP32" || fmt.Sprint(o.Shape) != "[4 10]" {
				t.Fatalf("output: %+v", o)
			}
			v2Close(t, "logits", vals["logits"], want["logits"], atol, rtol)
		}
	}
	// Requested outputs, JSON explicitly.
	body := v2Marshal(t, map[string]any{"inputs": []any{v2JSONInput("input", in["input"], false)},
		"outputs": []any{map[string]any{"name": "logits", "parameters": map[string]any{"binary_data": false}}}})
	r := v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/infer", body)
	resp, vals := v2Decode(t, r)
	if resp.ID != nil || r.header.Get(v2HeaderLength) != "" {
		t.Fatalf("unexpected id or binary header: %v %s", r.header, r.body)
	}
	v2Close(t, "logits", vals["logits"], want["logits"], atol, rtol)
}

func TestV2InferBinary(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	in, want, atol, rtol := v2TestVector(t, ts.m)
	x := in["input"]
	binIn := map[string]any{"name": "input", "shape": x.Shape, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": len(x.Data)}}
	cases := []struct {
		name      string
		req       map[string]any
		binaryIn  bool
		binaryOut bool
	}{
		{"bin-in/json-out", map[string]any{"inputs": []any{binIn}}, true, false},
		{"bin-in/bin-out", map[string]any{"inputs": []any{binIn}, "outputs": []any{map[string]any{"name": "logits", "parameters": map[string]any{"binary_data": true}}}}, true, true},
		{"bin-in/bin-out-default", map[string]any{"inputs": []any{binIn}, "parameters": map[string]any{"binary_data_output": true}}, true, true},
		{"json-in/bin-out", map[string]any{"inputs": []any{v2JSONInput("input", x, false)}, "parameters": map[string]any{"binary_data_output": true}}, false, true},
		{"output-overrides-default", map[string]any{"inputs": []any{binIn}, "parameters": map[string]any{"binary_data_output": true},
			"outputs": []any{map[string]any{"name": "logits", "parameters": map[string]any{"binary_data": false}}}}, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r v2Reply
			if c.binaryIn {
				body, hl := v2BinaryBody(t, c.req, x.Data)
				r = v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/infer", body, v2HeaderLength, hl, "Content-Type", "application/octet-stream")
			} else {
				r = v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/infer", v2Marshal(t, c.req))
			}
			resp, vals := v2Decode(t, r)
			if got := r.header.Get(v2HeaderLength) != ""; got != c.binaryOut {
				t.Fatalf("binary response %v, want %v: %s", got, c.binaryOut, r.body)
			}
			if c.binaryOut && resp.Outputs[0].Parameters["binary_data_size"] != float64(4*40) {
				t.Fatalf("binary_data_size: %+v", resp.Outputs[0])
			}
			v2Close(t, "logits", vals["logits"], want["logits"], atol, rtol)
		})
	}
}

func TestV2InferInt64(t *testing.T) {
	ts := v2Start(t, "textcls.onnx", Config{})
	in, want, atol, rtol := v2TestVector(t, ts.m)
	x := in["tokens"]
	if x.DType != engine.Int64 {
		t.Fatalf("tokens are %s", x.DType)
	}
	r := v2Do(t, "POST", ts.url+"/v2/models/textcls/infer", v2Marshal(t, map[string]any{"inputs": []any{v2JSONInput("tokens", x, true)}}))
	_, vals := v2Decode(t, r)
	v2Close(t, "logits", vals["logits"], want["logits"], atol, rtol)

	body, hl := v2BinaryBody(t, map[string]any{
		"inputs":     []any{map[string]any{"name": "tokens", "shape": x.Shape, "datatype": "INT64", "parameters": map[string]any{"binary_data_size": len(x.Data)}}},
		"parameters": map[string]any{"binary_data_output": true},
	}, x.Data)
	_, vals = v2Decode(t, v2Do(t, "POST", ts.url+"/v2/models/textcls/infer", body, v2HeaderLength, hl))
	v2Close(t, "logits", vals["logits"], want["logits"], atol, rtol)

	// An FP32 tensor for an INT64 input is refused, naming both.
	f := map[string]any{"name": "tokens", "shape": x.Shape, "datatype": "FP32", "data": v2Values(x)}
	v2Do(t, "POST", ts.url+"/v2/models/textcls/infer", v2Marshal(t, map[string]any{"inputs": []any{f}})).
		expectError(t, 400, CodeInvalidInput, "has datatype FP32 but this model takes INT64")
	// Integral floats are taken as integers; fractions are not.
	vals2 := v2Values(x)
	vals2[3] = 1.5
	g := map[string]any{"name": "tokens", "shape": x.Shape, "datatype": "INT64", "data": vals2}
	v2Do(t, "POST", ts.url+"/v2/models/textcls/infer", v2Marshal(t, map[string]any{"inputs": []any{g}})).
		expectError(t, 400, CodeInvalidInput, "element 3 is 1.5")
	// So are a shape's: 2.0 is an integer to JSON Schema, which the served
	// document's "integer" means (schemathesis sent [3595.0, 1, 8, 8]).
	fs := make([]any, len(x.Shape))
	for i, d := range x.Shape {
		fs[i] = float64(d)
	}
	fbody := []byte(strings.Replace(string(v2Marshal(t, map[string]any{"inputs": []any{map[string]any{"name": "tokens", "shape": fs, "datatype": "INT64", "data": v2Values(x)}}})),
		fmt.Sprintf(`"shape":[%d,`, x.Shape[0]), fmt.Sprintf(`"shape":[%d.0,`, x.Shape[0]), 1))
	if !strings.Contains(string(fbody), ".0,") {
		t.Fatalf("the shape is not written with a fraction: %s", fbody[:80])
	}
	_, vals = v2Decode(t, v2Do(t, "POST", ts.url+"/v2/models/textcls/infer", fbody))
	v2Close(t, "logits", vals["logits"], want["logits"], atol, rtol)
}

func TestV2InferErrors(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	in, _, _, _ := v2TestVector(t, ts.m)
	x := in["input"]
	url := ts.url + "/v2/models/digits_mlp/infer"
	good := func() map[string]any { return v2JSONInput("input", x, false) }
	with := func(k string, v any) map[string]any { m := good(); m[k] = v; return m }
	req := func(inputs ...any) []byte { return v2Marshal(t, map[string]any{"inputs": inputs}) }
	binIn := func(size int) map[string]any {
		return map[string]any{"name": "input", "shape": x.Shape, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": size}}
	}
	cases := []struct {
		name     string
		body     []byte
		hdr      []string
		status   int
		code     string
		contains string
	}{
		{"invalid json", []byte(`{"inputs": [`), nil, 400, CodeInvalidJSON, "not valid JSON"},
		{"not an object", []byte(`[1,2]`), nil, 400, CodeBadRequest, "JSON object"},
		{"no inputs", []byte(`{}`), nil, 400, CodeInvalidInput, `no "inputs"; this model takes "input" (FP32 [-1,64])`},
		{"inputs not array", []byte(`{"inputs": {}}`), nil, 400, CodeBadRequest, `"inputs" must be an array`},
		{"missing input", []byte(`{"inputs":[]}`), nil, 400, CodeInvalidInput, `input "input" is missing`},
		{"unknown input", req(good(), with("name", "pixels")), nil, 400, CodeInvalidInput, `unknown input "pixels"; this model takes "input" (FP32 [-1,64])`},
		{"duplicate input", req(good(), good()), nil, 400, CodeBadRequest, "already exists in request"},
		{"no name", req(map[string]any{"shape": []int{1}}), nil, 400, CodeBadRequest, `needs a "name"`},
		{"wrong datatype", req(with("datatype", "INT64")), nil, 400, CodeInvalidInput, "has datatype INT64 but this model takes FP32"},
		{"unknown datatype", req(with("datatype", "FP8")), nil, 400, CodeInvalidInput, `datatype "FP8" is not one of the protocol's (BOOL, UINT8,`},
		{"datatype another input's", req(with("datatype", "BYTES")), nil, 400, CodeInvalidInput, `has datatype BYTES but this model takes FP32`},
		{"no datatype", req(with("datatype", nil)), nil, 400, CodeBadRequest, `needs a "datatype"`},
		{"no shape", req(with("shape", nil)), nil, 400, CodeBadRequest, `needs a "shape" array such as [-1,64]`},
		{"negative shape", req(with("shape", []int{-1, 64})), nil, 500, CodeBadRequest, "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{"fractional shape", req(with("shape", []any{1.5, 64})), nil, 500, CodeBadRequest, "Unable to parse 'shape'"},
		{"huge shape", req(with("shape", []int64{1 << 40, 1 << 40})), nil, 400, CodeBadRequest, "invalid shape for input 'input': shape [1099511627776,1099511627776] causes total element count to exceed maximum size of 9223372036854775807"},
		{"shape bytes overflow", req(with("shape", []int64{4, 1<<60 + 2})), nil, 400, CodeBadRequest, "byte size overflow for input 'input': element count (4611686018427387912) * data type size (4) exceeds maximum allowed size"},
		{"shape vs data", req(with("shape", []int{5, 64})), nil, 400, CodeInvalidInput, "shape [5,64] needs 320 elements, \"data\" holds 256"},
		{"shape vs data, few", req(with("shape", []int{2, 64})), nil, 400, CodeInvalidInput, "needs 128 elements, \"data\" holds 256"},
		{"shape beyond the body", req(with("shape", []int{1 << 17, 64})), nil, 400, CodeInvalidInput, "\"data\" holds 256"},
		{"shape beyond the limit", req(with("shape", []int{1 << 30, 64})), nil, 400, CodeTooLarge, "JSON input 'input' has a byte_size (274877906944 bytes) that exceeds the maximum allowed value of 67108864 bytes. Use --http-max-input-size to increase the limit."},
		{"wrong rank", req(with("shape", []int{256})), nil, 400, CodeInvalidInput, "wrong rank"},
		{"wrong width", req(with("shape", []int{8, 32})), nil, 400, CodeInvalidInput, "wrong size on axis 1"},
		{"string element", req(with("data", func() []any { v := v2Values(x); v[7] = "a"; return v }())), nil, 400, CodeInvalidInput, "element 7 is string where a FP32 number belongs"},
		{"null data", req(with("data", nil)), nil, 400, CodeBadRequest, `neither "data" nor parameter "binary_data_size"`},
		{"data not array", req(with("data", 3)), nil, 400, CodeBadRequest, `"data" must be an array`},
		{"no data", req(func() map[string]any { m := good(); delete(m, "data"); return m }()), nil, 400, CodeBadRequest, `neither "data" nor parameter "binary_data_size"`},
		{"inf", req(with("data", func() []any { v := v2Values(x); v[0] = json.Number("1e999"); return v }())), nil, 400, CodeInvalidInput, "NaN and Inf are refused"},
		{"unknown output", v2Marshal(t, map[string]any{"inputs": []any{good()}, "outputs": []any{map[string]any{"name": "probs"}}}), nil, 400, CodeInvalidInput, `unexpected inference output 'probs' for model: unknown output "probs"; this model's outputs are "logits" (FP32 [-1,10])`},
		{"classification < 0", v2Marshal(t, map[string]any{"inputs": []any{good()}, "outputs": []any{map[string]any{"name": "logits", "parameters": map[string]any{"classification": -3}}}}), nil, 400, CodeBadRequest, `parameter "classification" is -3`},
		{"classification not an int", v2Marshal(t, map[string]any{"inputs": []any{good()}, "outputs": []any{map[string]any{"name": "logits", "parameters": map[string]any{"classification": "3"}}}}), nil, 400, CodeBadRequest, `parameter "classification" must be an integer`},
		{"id not string", v2Marshal(t, map[string]any{"id": 3, "inputs": []any{good()}}), nil, 400, CodeBadRequest, `"id" must be a string`},
		{"binary without header", append(req(binIn(len(x.Data))), x.Data...), nil, 400, CodeInvalidJSON, v2HeaderLength},
		{"binary size without header", req(binIn(len(x.Data))), nil, 400, CodeBadRequest, "has no Inference-Header-Content-Length header"},
		{"header past body", req(good()), []string{v2HeaderLength, "100000"}, 400, CodeBadRequest, "the length in bytes of the JSON part"},
		{"header not a number", req(good()), []string{v2HeaderLength, "x"}, 400, CodeBadRequest, "the length in bytes of the JSON part"},
		{"binary short", append(req(binIn(len(x.Data))), x.Data[:100]...), []string{v2HeaderLength, strconv.Itoa(len(req(binIn(len(x.Data)))))}, 400, CodeBadRequest, "only 100 bytes of binary data remain"},
		{"binary long", append(req(binIn(len(x.Data))), append(x.Data, 1, 2, 3)...), []string{v2HeaderLength, strconv.Itoa(len(req(binIn(len(x.Data)))))}, 400, CodeBadRequest, "3 bytes of binary data follow the JSON header that no input claims"},
		{"binary size vs shape", append(req(binIn(100)), x.Data[:100]...), []string{v2HeaderLength, strconv.Itoa(len(req(binIn(100))))}, 400, CodeInvalidInput, "needs 1024 bytes of binary data, binary_data_size is 100"},
		{"binary and data", req(func() map[string]any { m := good(); m["parameters"] = map[string]any{"binary_data_size": 4}; return m }()), nil, 400, CodeBadRequest, `both "data" and parameter "binary_data_size"`},
		{"brotli", req(good()), []string{"Content-Encoding", "br"}, 415, CodeUnsupportedMedia, "gzip or deflate"},
		{"not gzip", req(good()), []string{"Content-Encoding", "gzip"}, 400, CodeBadRequest, "not valid gzip"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v2Do(t, "POST", url, c.body, c.hdr...).expectError(t, c.status, c.code, c.contains)
		})
	}
	// The server still answers correctly afterwards.
	if r := v2Do(t, "POST", url, req(good())); r.status != 200 {
		t.Fatalf("after the errors: %d %s", r.status, r.body)
	}
}

func TestV2Auth(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{APIKeys: []string{"s3cret"}})
	in, _, _, _ := v2TestVector(t, ts.m)
	body := v2Marshal(t, map[string]any{"inputs": []any{v2JSONInput("input", in["input"], false)}})
	for _, p := range []string{"/v2/health/live", "/v2/health/ready"} {
		if r := v2Do(t, "GET", ts.url+p, nil); r.status != 200 {
			t.Fatalf("GET %s without a key: %d", p, r.status)
		}
	}
	for _, p := range []string{"/v2", "/v2/models/digits_mlp", "/v2/models/digits_mlp/ready"} {
		v2Do(t, "GET", ts.url+p, nil).expectError(t, 401, CodeUnauthorized, "needs an API key")
		if r := v2Do(t, "GET", ts.url+p, nil, "Authorization", "Bearer s3cret"); r.status != 200 {
			t.Fatalf("GET %s with the key: %d %s", p, r.status, r.body)
		}
	}
	url := ts.url + "/v2/models/digits_mlp/infer"
	r := v2Do(t, "POST", url, body)
	r.expectError(t, 401, CodeUnauthorized, "needs an API key")
	if r.header.Get("WWW-Authenticate") == "" {
		t.Fatal("401 without WWW-Authenticate")
	}
	v2Do(t, "POST", url, body, "Authorization", "Bearer wrong").expectError(t, 401, CodeUnauthorized, "not valid")
	if r := v2Do(t, "POST", url, body, "Authorization", "Bearer s3cret"); r.status != 200 {
		t.Fatalf("infer with the key: %d %s", r.status, r.body)
	}
}

// FuzzV2Request feeds the request parser arbitrary bodies and
// Inference-Header-Content-Length values: it must never panic, and what it
// accepts must be consistent.
func FuzzV2Request(f *testing.F) {
	ins := []engine.TensorSpec{
		{Name: "input", DType: engine.Float32, Shape: []int64{-1, 4}},
		{Name: "tokens", DType: engine.Int64, Shape: []int64{-1, 2}},
		{Name: "mask", DType: engine.Bool, Shape: []int64{-1, 2}},
	}
	outs := []engine.TensorSpec{{Name: "logits", DType: engine.Float32, Shape: []int64{-1, 3}}, {Name: "aux", DType: engine.Int8, Shape: []int64{-1}}}
	jsonReq := `{"id":"a","inputs":[{"name":"input","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]},` +
		`{"name":"tokens","shape":[1,2],"datatype":"INT64","data":[[5,6]]},{"name":"mask","shape":[1,2],"datatype":"BOOL","data":[true,0]}],` +
		`"outputs":[{"name":"logits","parameters":{"binary_data":true}}],"parameters":{"binary_data_output":false}}`
	f.Add([]byte(jsonReq), "")
	hdr := `{"inputs":[{"name":"input","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}},` +
		`{"name":"tokens","shape":[1,2],"datatype":"INT64","parameters":{"binary_data_size":16}},{"name":"mask","shape":[1,2],"datatype":"BOOL","data":[1,1]}]}`
	raw := make([]byte, 32)
	binary.LittleEndian.PutUint32(raw, math.Float32bits(1.5))
	raw[16] = 7
	f.Add(append([]byte(hdr), raw...), strconv.Itoa(len(hdr)))
	f.Add(append([]byte(hdr), raw[:20]...), strconv.Itoa(len(hdr)))
	f.Add(append([]byte(hdr), raw...), "5")
	f.Add([]byte(hdr), "")
	f.Add([]byte(`{"inputs":[{"name":"input","shape":[9223372036854775807,2],"datatype":"FP32","data":[]}]}`), "")
	f.Add([]byte(`{"inputs":[{"name":"input","shape":[4294967296,4294967296,0],"datatype":"FP32","data":[]}]}`), "")
	f.Add([]byte(`{"inputs":[{"name":"input","shape":[1,4],"datatype":"FP16","data":[[[[1]]],[2,[3,[4]]]]}]}`), "")
	f.Add([]byte(`{"inputs":[{"name":"nope"}],"outputs":[{"name":"x"}]}`), "")
	f.Add([]byte(`{"inputs":[`), "")
	f.Add([]byte(`[]`), "-1")
	f.Fuzz(func(t *testing.T, body []byte, hl string) {
		if len(body) > 1<<20 || len(hl) > 64 {
			return
		}
		var h []byte
		if hl != "" {
			h = []byte(hl)
		}
		req, aerr := parseV2Request(body, h, ins, outs, v2Limits{}, nil)
		if aerr != nil {
			// 500 bad_request: Triton's status for a shape its JSON reader
			// cannot take as unsigned integers (beyond uint64 included).
			badShape := aerr.Status == 500 && aerr.Code == CodeBadRequest
			if req != nil || aerr.Message == "" || (aerr.Status != 400 && aerr.Status != 422 && !badShape) {
				t.Fatalf("bad error: %+v", aerr)
			}
			return
		}
		if len(req.inputs) != len(ins) {
			t.Fatalf("%d inputs", len(req.inputs))
		}
		for i, x := range req.inputs {
			if x.DType != ins[i].DType {
				t.Fatalf("input %d: dtype %s", i, x.DType)
			}
			if want := engine.NumElements(x.Shape) * int64(x.DType.Size()); int64(len(x.Data)) != want || want > int64(len(body)) {
				t.Fatalf("input %d: %d bytes for shape %v (body %d)", i, len(x.Data), x.Shape, len(body))
			}
		}
		for _, o := range req.outputs {
			if o.index < 0 || o.index >= len(outs) {
				t.Fatalf("output index %d", o.index)
			}
		}
	})
}

// TestV2ConfigAndStats: Triton's model configuration and statistics over
// HTTP, with every field tools read strictly present as a number, and the
// statistics counting what was served.
func TestV2ConfigAndStats(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	r := v2Do(t, "GET", ts.url+"/v2/models/digits_mlp/config", nil)
	if r.status != 200 {
		t.Fatalf("config: %d %s", r.status, r.body)
	}
	c := r.json(t)
	in := c["input"].([]any)[0].(map[string]any)
	db := c["dynamic_batching"].(map[string]any)
	ig := c["instance_group"].([]any)[0].(map[string]any)
	if c["name"] != "digits_mlp" || c["platform"] != "onnxruntime_onnx" || c["backend"] != "onnxruntime" || c["max_batch_size"] != float64(64) ||
		in["name"] != "input" || in["data_type"] != "TYPE_FP32" || fmt.Sprint(in["dims"]) != "[64]" ||
		db["max_queue_delay_microseconds"] != float64(0) || ig["kind"] != "KIND_CPU" || ig["count"] != float64(1) || c["default_model_filename"] != "digits_mlp.onnx" {
		t.Fatalf("config: %s", r.body)
	}
	if r := v2Do(t, "GET", ts.url+"/v2/models/other/config", nil); r.status != 404 {
		t.Fatalf("config of another model: %d", r.status)
	}
	if r := v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/config", []byte("{}")); r.status != 405 {
		t.Fatalf("POST config: %d", r.status)
	}

	in4, _, _, _ := v2TestVector(t, ts.m)
	body := v2Marshal(t, map[string]any{"inputs": []any{v2JSONInput("input", in4["input"], false)}})
	for range 2 {
		if r := v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/infer", body); r.status != 200 {
			t.Fatalf("infer: %d %s", r.status, r.body)
		}
	}
	if r := v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/infer", []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,64],"data":[1]}]}`)); r.status != 400 {
		t.Fatalf("bad infer: %d", r.status)
	}
	for _, path := range []string{"/v2/models/digits_mlp/stats", "/v2/models/digits_mlp/versions/1/stats", "/v2/models/stats"} {
		r := v2Do(t, "GET", ts.url+path, nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		ms := r.json(t)["model_stats"].([]any)[0].(map[string]any)
		is := ms["inference_stats"].(map[string]any)
		for _, k := range []string{"success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss"} {
			d, ok := is[k].(map[string]any)
			if _, isNum := d["count"].(float64); !ok || !isNum {
				t.Fatalf("%s: inference_stats.%s is not {count, ns} numbers: %s", path, k, r.body)
			}
			if _, isNum := d["ns"].(float64); !isNum {
				t.Fatalf("%s: inference_stats.%s.ns is not a number: %s", path, k, r.body)
			}
		}
		// The 400 above failed before the engine (a shape the decoder
		// refused), so it is not a model failure: only the two successes
		// and their 8 rows count.
		success := is["success"].(map[string]any)
		bs := ms["batch_stats"].([]any)
		if ms["name"] != "digits_mlp" || success["count"] != float64(2) || success["ns"].(float64) <= 0 ||
			ms["inference_count"] != float64(8) || ms["execution_count"] != float64(2) || len(bs) != 1 ||
			bs[0].(map[string]any)["batch_size"] != float64(4) || ms["last_inference"].(float64) <= 0 {
			t.Fatalf("%s after two requests of 4 rows: %s", path, r.body)
		}
	}
}
