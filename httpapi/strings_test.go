package httpapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/serving"
	"github.com/fw-serve/fw/sharedmem"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// startModel serves the model file at path on a real 127.0.0.1 socket, as
// fw serve does; prepare, when set, edits the instance (a repository's
// labels) before it serves.
func startModel(t testing.TB, path string, cfg Config, prepare func(*serving.Instance)) *v2TestServer {
	t.Helper()
	m, err := engine.Load(context.Background(), path, engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	base, cancel := context.WithCancel(context.Background())
	srv := NewTestServer(base, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	b := batcher.New(m.Forward, batcher.Config{MaxBatchRows: 64, MaxDelay: 0, Instances: 1, MaxQueue: 64, Unbatched: !m.Batched()}, srv.BatchStats())
	inst := &serving.Instance{Model: m, Batcher: b}
	if filepath.Base(path) == "model.onnx" { // a repository's NAME/1/model.onnx
		inst.ServedName = filepath.Base(filepath.Dir(filepath.Dir(path)))
	}
	inst.Config = serving.Config(inst, filepath.Base(path))
	if prepare != nil {
		prepare(inst)
	}
	srv.Swap(inst)
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
		b.Close(context.Background())
		m.Close()
	})
	return &v2TestServer{url: "http://" + ln.Addr().String(), srv: srv, m: m}
}

// serialize is tritonclient's serialize_byte_tensor, written out.
func serialize(elems ...string) []byte {
	var b []byte
	for _, s := range elems {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

// deserialize reads the serialized form, failing the test when it is not
// exactly that.
func deserialize(t testing.TB, b []byte) []string {
	t.Helper()
	var out []string
	for len(b) > 0 {
		if len(b) < 4 {
			t.Fatalf("a cut length prefix: %q", b)
		}
		n := binary.LittleEndian.Uint32(b)
		if int(n) > len(b)-4 {
			t.Fatalf("length %d beyond %d bytes", n, len(b)-4)
		}
		out = append(out, string(b[4:4+n]))
		b = b[4+n:]
	}
	return out
}

// stringOutputs parses an inference response whose outputs are BYTES:
// each output's elements (from "data" or its binary data), and the header.
func stringOutputs(t testing.TB, r v2Reply) (v2Resp, map[string][]string) {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	js, bin := r.body, []byte(nil)
	if h := r.header.Get(v2HeaderLength); h != "" {
		n, _ := strconv.Atoi(h)
		js, bin = r.body[:n], r.body[n:]
	}
	if !utf8.Valid(js) {
		t.Fatalf("the JSON part is not UTF-8: %q", js)
	}
	var resp v2Resp
	if err := json.Unmarshal(js, &resp); err != nil {
		t.Fatalf("not JSON: %v: %q", err, js)
	}
	out := map[string][]string{}
	for _, o := range resp.Outputs {
		if o.Datatype != "BYTES" {
			t.Fatalf("output %s is %s", o.Name, o.Datatype)
		}
		var elems []string
		if size, ok := o.Parameters["binary_data_size"].(float64); ok {
			elems = deserialize(t, bin[:int(size)])
			bin = bin[int(size):]
		} else {
			for _, e := range o.Data {
				s, ok := e.(string)
				if !ok {
					t.Fatalf("output %s holds %v, not a string", o.Name, e)
				}
				elems = append(elems, s)
			}
		}
		if int64(len(elems)) != engine.NumElements(o.Shape) {
			t.Fatalf("output %s: %d elements for shape %v", o.Name, len(elems), o.Shape)
		}
		out[o.Name] = elems
	}
	return resp, out
}

// Triton's simple_string over HTTP: BYTES inputs as JSON strings (flat and
// nested) or in the binary extension's serialized form, outputs as JSON
// strings or serialized binary data, joined into one engine call with
// other requests (the batcher's string path).
func TestV2StringModelJSONAndBinary(t *testing.T) {
	ts := startModel(t, testmodels.Triton(t, "simple_string"), Config{}, nil)
	url := ts.url + "/v2/models/simple_string/infer"
	a, b := make([]any, 32), make([]string, 32)
	for i := range a {
		a[i], b[i] = strconv.Itoa(i), strconv.Itoa(-2*i)
	}
	nested := []any{a[:16], a[16:]}
	body := v2Marshal(t, map[string]any{"inputs": []any{
		map[string]any{"name": "INPUT0", "datatype": "BYTES", "shape": []int{2, 16}, "data": nested},
		map[string]any{"name": "INPUT1", "datatype": "BYTES", "shape": []int{2, 16}, "data": b},
	}})
	resp, out := stringOutputs(t, v2Do(t, "POST", url, body))
	if fmt := serving.ShapeString(resp.Outputs[0].Shape); fmt != "[2,16]" {
		t.Fatalf("OUTPUT0 shape %s", fmt)
	}
	for i := 0; i < 32; i++ {
		if out["OUTPUT0"][i] != strconv.Itoa(-i) || out["OUTPUT1"][i] != strconv.Itoa(3*i) {
			t.Fatalf("element %d: %q %q", i, out["OUTPUT0"][i], out["OUTPUT1"][i])
		}
	}
	// The binary extension both ways: tritonclient's serialized form.
	sa, sb := serialize(b[:16]...), serialize(b[16:]...)
	req := map[string]any{
		"inputs": []any{
			map[string]any{"name": "INPUT0", "datatype": "BYTES", "shape": []int{1, 16}, "parameters": map[string]any{"binary_data_size": len(sa)}},
			map[string]any{"name": "INPUT1", "datatype": "BYTES", "shape": []int{1, 16}, "parameters": map[string]any{"binary_data_size": len(sb)}},
		},
		"outputs": []any{map[string]any{"name": "OUTPUT1", "parameters": map[string]any{"binary_data": true}}, map[string]any{"name": "OUTPUT0"}},
	}
	raw, hl := v2BinaryBody(t, req, sa, sb)
	r := v2Do(t, "POST", url, raw, v2HeaderLength, hl)
	resp, out = stringOutputs(t, r)
	if resp.Outputs[0].Name != "OUTPUT1" || resp.Outputs[1].Data == nil {
		t.Fatalf("outputs %+v", resp.Outputs)
	}
	for i := 0; i < 16; i++ {
		x, y := -2*i, -2*(i+16)
		if out["OUTPUT0"][i] != strconv.Itoa(x+y) || out["OUTPUT1"][i] != strconv.Itoa(x-y) {
			t.Fatalf("binary element %d: %q %q", i, out["OUTPUT0"][i], out["OUTPUT1"][i])
		}
	}
}

// simple_identity: what goes in comes out byte for byte over the binary
// extension (empty strings, bytes that are not UTF-8, NUL bytes as
// Triton's simple_http_string_infer_client sends them, escapes decoded
// from JSON); a JSON answer is valid JSON (\u0000 for NUL), and an
// output with bytes that are not UTF-8 is refused as JSON with how to ask
// for it (binary_data), as Triton refuses it (its L0_string_io
// test_unicode_bytes expects the error).
func TestV2StringIdentityBytes(t *testing.T) {
	ts := startModel(t, testmodels.Triton(t, "simple_identity"), Config{}, nil)
	url := ts.url + "/v2/models/simple_identity/infer"
	elems := []string{"", "\xff\xfe\x80", "plain", "é\t\"quoted\"\\", strings.Repeat("x", 70000), "😀", "he\x00llo", "\x00\x01\x02\x03"}
	raw := serialize(elems...)
	in := map[string]any{"name": "INPUT0", "datatype": "BYTES", "shape": []int{2, 4}, "parameters": map[string]any{"binary_data_size": len(raw)}}
	body, hl := v2BinaryBody(t, map[string]any{"inputs": []any{in}, "parameters": map[string]any{"binary_data_output": true}}, raw)
	_, out := stringOutputs(t, v2Do(t, "POST", url, body, v2HeaderLength, hl))
	if !slices.Equal(out["OUTPUT0"], elems) {
		t.Fatalf("binary identity changed the bytes: %q", out["OUTPUT0"][:3])
	}
	body, hl = v2BinaryBody(t, map[string]any{"inputs": []any{in}}, raw)
	v2Do(t, "POST", url, body, v2HeaderLength, hl).expectError(t, 400, CodeBadRequest, `output "OUTPUT0" element 1 holds BYTES that are not valid UTF-8`)
	valid := []string{"", "plain", "é\t\"quoted\"\\", "😀", "he\x00llo", "\x00\x01\x02\x03"}
	raw = serialize(valid...)
	in = map[string]any{"name": "INPUT0", "datatype": "BYTES", "shape": []int{1, 6}, "parameters": map[string]any{"binary_data_size": len(raw)}}
	body, hl = v2BinaryBody(t, map[string]any{"inputs": []any{in}}, raw)
	_, out = stringOutputs(t, v2Do(t, "POST", url, body, v2HeaderLength, hl))
	if !slices.Equal(out["OUTPUT0"], valid) {
		t.Fatalf("JSON answer: %q", out["OUTPUT0"])
	}
	// JSON escapes in, exact bytes out; a raw byte that is not UTF-8 in a
	// JSON string is taken as sent.
	js := []byte(`{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[1,5],"data":["\u00e9\ud83d\ude00\n\/","\ud800x","raw` + "\xff" + `","","he\u0000llo"]}],` +
		`"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`)
	_, out = stringOutputs(t, v2Do(t, "POST", url, js))
	if want := []string{"é😀\n/", "\ufffdx", "raw\xff", "", "he\x00llo"}; !slices.Equal(out["OUTPUT0"], want) {
		t.Fatalf("escapes: %q, want %q", out["OUTPUT0"], want)
	}
}

// Hostile BYTES inputs are refused with a message, before anything the
// claimed sizes would need is allocated: length prefixes beyond the data,
// 4 GiB and "negative" lengths, element counts that do not match the
// shape, shapes far beyond the body, numbers where strings belong, bad
// escapes.
func TestV2StringRefusals(t *testing.T) {
	ts := startModel(t, testmodels.Triton(t, "simple_identity"), Config{MaxRows: 8}, nil)
	url := ts.url + "/v2/models/simple_identity/infer"
	bin := func(shape []int, raw []byte, size int) v2Reply {
		in := map[string]any{"name": "INPUT0", "datatype": "BYTES", "shape": shape, "parameters": map[string]any{"binary_data_size": size}}
		body, hl := v2BinaryBody(t, map[string]any{"inputs": []any{in}}, raw)
		return v2Do(t, "POST", url, body, v2HeaderLength, hl)
	}
	two := serialize("ab", "c")
	f := func(name string, r v2Reply, status int, code, msg string) {
		t.Helper()
		t.Run(name, func(t *testing.T) { r.expectError(t, status, code, msg) })
	}
	f("length beyond the data", bin([]int{1, 2}, two[:len(two)-1], len(two)-1), 400, CodeInvalidInput, "element 1: its length 1 runs past the end")
	f("4 GiB length", bin([]int{1, 1}, []byte{0xff, 0xff, 0xff, 0xff, 'a'}, 5), 400, CodeInvalidInput, "its length 4294967295 runs past")
	f("negative int32 length", bin([]int{1, 1}, []byte{0, 0, 0, 0x80, 'a', 'b'}, 6), 400, CodeInvalidInput, "its length 2147483648 runs past")
	f("fewer elements than the shape", bin([]int{1, 3}, append(two, 0, 0, 0, 0), 13), 400, CodeInvalidInput, "element 2: the data ends inside its 4-byte length")
	f("more elements than the shape", bin([]int{1, 1}, two, len(two)), 400, CodeInvalidInput, "bytes follow the 1 elements")
	f("size below the lengths", bin([]int{2, 2}, two, len(two)), 400, CodeInvalidInput, "needs at least 16 bytes of binary data")
	f("shape far beyond the body", bin([]int{8, 1 << 40}, two, len(two)), 400, CodeInvalidInput, "needs at least")
	f("rows above --max-rows", bin([]int{9, 1}, serialize("a", "b", "c", "d", "e", "f", "g", "h", "i"), 9*5), 400, CodeTooLarge, "--max-rows")
	js := func(data string) v2Reply {
		return v2Do(t, "POST", url, []byte(`{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[1,2],"data":`+data+`}]}`))
	}
	f("number for BYTES", js(`["a", 7]`), 400, CodeInvalidInput, "element 1 is number where a BYTES string belongs")
	f("bad escape", js(`["a", "\x"]`), 400, CodeInvalidJSON, `invalid escape \x`)
	f("bad unicode escape", js(`["a", "\u12"]`), 400, CodeInvalidJSON, `invalid \u escape`)
	f("raw control character", js("[\"a\", \"b\nc\"]"), 400, CodeInvalidJSON, "control character")
	f("count", js(`["a"]`), 400, CodeInvalidInput, `needs 2 elements, "data" holds 1`)
	f("huge JSON shape", v2Do(t, "POST", url, []byte(`{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[1,4611686018427387903],"data":["a"]}]}`)),
		400, CodeBadRequest, "byte size overflow for input 'INPUT0': element count (4611686018427387903) * the 4-byte length of each BYTES element")
	f("FP32 for BYTES", v2Do(t, "POST", url, []byte(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"data":[1]}]}`)),
		400, CodeInvalidInput, "has datatype FP32 but this model takes BYTES")
	// Empty strings are elements like any other.
	_, out := stringOutputs(t, bin([]int{1, 3}, serialize("", "", ""), 12))
	if !slices.Equal(out["OUTPUT0"], []string{"", "", ""}) {
		t.Fatalf("empty strings: %q", out["OUTPUT0"])
	}
}

// BYTES in and out of system shared memory, in the serialized form the
// client wrote (tritonclient's set_shared_memory_region), the byte size
// the client's; a window too small for the output or holding malformed
// data is refused.
func TestV2StringSharedMemory(t *testing.T) {
	dir := t.TempDir()
	reg := sharedmem.New(dir, true)
	defer reg.Close()
	ts := startModel(t, testmodels.Triton(t, "simple_identity"), Config{SharedMemory: reg}, nil)
	url := ts.url + "/v2/models/simple_identity/infer"
	elems := []string{"shm", "", "\xff bytes", "four"}
	in := serialize(elems...)
	obj := make([]byte, 4096)
	copy(obj[100:], in)
	if err := os.WriteFile(filepath.Join(dir, "strs"), obj, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("in", "/strs", 0, 2048); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("out", "/strs", 2048, 2048); err != nil {
		t.Fatal(err)
	}
	req := func(inSize, outSize int) []byte {
		return v2Marshal(t, map[string]any{
			"inputs": []any{map[string]any{"name": "INPUT0", "datatype": "BYTES", "shape": []int{2, 2}, "parameters": map[string]any{
				"shared_memory_region": "in", "shared_memory_offset": 100, "shared_memory_byte_size": inSize}}},
			"outputs": []any{map[string]any{"name": "OUTPUT0", "parameters": map[string]any{
				"shared_memory_region": "out", "shared_memory_offset": 8, "shared_memory_byte_size": outSize}}},
		})
	}
	r := v2Do(t, "POST", url, req(len(in), 1024))
	resp := r.json(t)
	o := resp["outputs"].([]any)[0].(map[string]any)
	if r.status != 200 || o["datatype"] != "BYTES" || o["parameters"].(map[string]any)["shared_memory_byte_size"] != float64(len(in)) {
		t.Fatalf("shared memory answer %d: %s", r.status, r.body)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "strs"))
	if !bytes.Equal(got[2048+8:2048+8+len(in)], in) {
		t.Fatalf("the output region holds %q", got[2056:2056+len(in)])
	}
	v2Do(t, "POST", url, req(len(in), len(in)-1)).expectError(t, 400, CodeInvalidInput, "more than shared_memory_byte_size")
	v2Do(t, "POST", url, req(len(in)-1, 1024)).expectError(t, 400, CodeInvalidInput, "runs past the end")
	v2Do(t, "POST", url, req(len(in)+4, 1024)).expectError(t, 400, CodeInvalidInput, "bytes follow the 4 elements")
	v2Do(t, "POST", url, req(15, 1024)).expectError(t, 400, CodeInvalidInput, "needs at least 16 bytes")
	// A size beyond the registered window is refused before any allocation.
	v2Do(t, "POST", url, req(1<<40, 1024)).expectError(t, 400, CodeBadRequest, "Invalid offset + byte size for shared memory region: 'in'")
}

// /predict takes JSON rows of strings for a BYTES input (nested to the
// per-sample shape, or flat) and answers strings.
func TestPredictStrings(t *testing.T) {
	ts := startModel(t, testmodels.Triton(t, "simple_identity"), Config{}, nil)
	r := v2Do(t, "POST", ts.url+"/predict", []byte(`{"data": [["a", "\u00e9"], ["", "\ud83d\ude00"]]}`))
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var v struct{ Predictions [][]string }
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Predictions) != 2 || !slices.Equal(v.Predictions[1], []string{"", "😀"}) || v.Predictions[0][1] != "é" {
		t.Fatalf("predictions %q", v.Predictions)
	}
	r = v2Do(t, "POST", ts.url+"/predict", []byte(`{"data": [["a", 1]]}`))
	if r.status != 422 || !strings.Contains(string(r.body), "where a string belongs") {
		t.Fatalf("a number for BYTES: %d %s", r.status, r.body)
	}
}

// The classification extension over HTTP: "value:index:label" strings of
// the top N per row, labels from fw.json (digits_mlp's "0".."9") or from a
// repository's label file (Instance.Config), N clamped to the classes,
// binary data too; outputs Triton cannot classify are refused.
func TestV2Classification(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	in, want, _, _ := v2TestVector(t, ts.m)
	x := in["input"]
	logits := want["logits"]
	rows, classes := int(x.Shape[0]), int(logits.Shape[1])
	cls := func(n int, binary bool) v2Reply {
		return v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/infer", v2Marshal(t, map[string]any{
			"inputs":  []any{v2JSONInput("input", x, false)},
			"outputs": []any{map[string]any{"name": "logits", "parameters": map[string]any{"classification": n, "binary_data": binary}}},
		}))
	}
	for _, binary := range []bool{false, true} {
		resp, out := stringOutputs(t, cls(3, binary))
		if s := serving.ShapeString(resp.Outputs[0].Shape); s != "["+strconv.Itoa(rows)+",3]" {
			t.Fatalf("shape %s", s)
		}
		for r := 0; r < rows; r++ {
			best, bi := -1e300, 0
			for c := 0; c < classes; c++ {
				if v := logits.At(r*classes + c); v > best {
					best, bi = v, c
				}
			}
			parts := strings.Split(out["logits"][r*3], ":")
			if len(parts) != 3 || parts[1] != strconv.Itoa(bi) || parts[2] != strconv.Itoa(bi) {
				t.Fatalf("row %d top class %q, want index and label %d", r, out["logits"][r*3], bi)
			}
			if f, err := strconv.ParseFloat(parts[0], 64); err != nil || len(parts[0]) < 8 || parts[0][len(parts[0])-7] != '.' || f < best-1e-4 || f > best+1e-4 {
				t.Fatalf("row %d value %q, want %f with six decimals", r, parts[0], best)
			}
		}
	}
	resp, _ := stringOutputs(t, cls(1000, false))
	if resp.Outputs[0].Shape[1] != int64(classes) {
		t.Fatalf("classification 1000 of %d classes: shape %v", classes, resp.Outputs[0].Shape)
	}

	// A repository's labels: Triton's simple with a label file on OUTPUT0
	// (INT32 sums), as modelrepo fills Instance.Config.
	simple := startModel(t, testmodels.Triton(t, "simple"), Config{}, func(inst *serving.Instance) {
		inst.Config.Outputs[0].LabelFilename = "labels.txt"
		inst.Config.Outputs[0].Labels = []string{"zero", "one", "two"}
	})
	a, b := make([]any, 16), make([]any, 16)
	for i := range a {
		a[i], b[i] = (i*7)%16, 1
	}
	r := v2Do(t, "POST", simple.url+"/v2/models/simple/infer", v2Marshal(t, map[string]any{
		"inputs": []any{
			map[string]any{"name": "INPUT0", "datatype": "INT32", "shape": []int{1, 16}, "data": a},
			map[string]any{"name": "INPUT1", "datatype": "INT32", "shape": []int{1, 16}, "data": b},
		},
		"outputs": []any{
			map[string]any{"name": "OUTPUT0", "parameters": map[string]any{"classification": 2}},
			map[string]any{"name": "OUTPUT1", "parameters": map[string]any{"classification": 1}},
		},
	}))
	_, out := stringOutputs(t, r)
	// OUTPUT0[i] = (7i mod 16) + 1: 16 at i = 9 (no label: there are 3), 15 at i = 2.
	if !slices.Equal(out["OUTPUT0"], []string{"16:9", "15:2:two"}) || !slices.Equal(out["OUTPUT1"], []string{"14:9"}) {
		t.Fatalf("simple classes %q %q", out["OUTPUT0"], out["OUTPUT1"])
	}

	// Outputs without an order are refused before the request runs.
	str := startModel(t, testmodels.Triton(t, "simple_identity"), Config{}, nil)
	v2Do(t, "POST", str.url+"/v2/models/simple_identity/infer", v2Marshal(t, map[string]any{
		"inputs":  []any{map[string]any{"name": "INPUT0", "datatype": "BYTES", "shape": []int{1, 1}, "data": []string{"a"}}},
		"outputs": []any{map[string]any{"name": "OUTPUT0", "parameters": map[string]any{"classification": 1}}},
	})).expectError(t, 400, CodeBadRequest, "class result not available for output due to unsupported type 'BYTES'")
}

// A model without a batch axis classifies its whole output: [N] strings.
func TestV2ClassificationUnbatched(t *testing.T) {
	ts := startModel(t, testmodels.Triton(t, "nobatch"), Config{}, nil)
	r := v2Do(t, "POST", ts.url+"/v2/models/nobatch/infer", v2Marshal(t, map[string]any{
		"inputs":  []any{map[string]any{"name": "x", "datatype": "FP32", "shape": []int{4}, "data": []float64{1, 2, 3, 4}}},
		"outputs": []any{map[string]any{"name": "y", "parameters": map[string]any{"classification": 5}}},
	}))
	resp, out := stringOutputs(t, r)
	// y = x @ [[1,0],[0,1],[1,1],[2,-1]] = [12, 1].
	if s := serving.ShapeString(resp.Outputs[0].Shape); s != "[2]" || !slices.Equal(out["y"], []string{"12.000000:0", "1.000000:1"}) {
		t.Fatalf("unbatched classes %s %q", s, out["y"])
	}
}
