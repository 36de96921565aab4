package httpapi

// Triton's status codes and sentences on the /v2 routes (issue #21):
// Triton's clients and tests match them, so fw's message starts with
// Triton's sentence and adds its own explanation after it. fw's own routes
// keep fw's codes.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/serving"
	"github.com/fw-serve/fw/sharedmem"
)

// expectTriton checks a V2 error whose message starts with Triton's
// sentence, prefix.
func (r v2Reply) expectTriton(t testing.TB, status int, code, prefix string) {
	t.Helper()
	r.expectError(t, status, code, prefix)
	if msg := r.json(t)["error"].(string); !strings.HasPrefix(msg, prefix) {
		t.Fatalf("message %q does not start with Triton's %q", msg, prefix)
	}
}

// A /v2 body over --max-body-bytes is Triton's 400 with Triton's sentence
// for what was too large (the JSON request, the raw input, the decompressed
// data), on every /v2 route, on routes fw does not serve (generate) before
// their 404, and whether its size is declared or found reading it; the
// repository routes' own smaller bound says so. fw's /predict keeps 413.
func TestV2BodyLimitsAnswerTritonsSentences(t *testing.T) {
	const max = 8192
	ts := v2Start(t, "digits_mlp.onnx", Config{MaxBodyBytes: max})
	infer := ts.url + "/v2/models/digits_mlp/infer"
	big := []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,64],"data":[` + strings.Repeat("0,", 5000) + `0]}]}`)
	jsonSentence := fmt.Sprintf("request JSON size of %d bytes exceeds the maximum allowed input size of 8192 bytes. Use --http-max-input-size to increase the limit.", len(big))

	v2Do(t, "POST", infer, big).expectTriton(t, 400, CodeTooLarge, jsonSentence)
	v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/generate", big).expectTriton(t, 400, CodeTooLarge, jsonSentence)
	v2Do(t, "POST", ts.url+"/v2/repository/index", big).expectTriton(t, 400, CodeTooLarge, jsonSentence)
	post(t, infer, "application/json", big, true).expectTriton(t, 400, CodeTooLarge,
		"request JSON size of more than 8192 bytes exceeds the maximum allowed input size of 8192 bytes. Use --http-max-input-size to increase the limit.")
	raw := make([]byte, max+8)
	v2Do(t, "POST", infer, raw, v2HeaderLength, "0").expectTriton(t, 400, CodeTooLarge,
		"Raw input has a byte_size (8200 bytes) that exceeds the maximum allowed value of 8192 bytes. Use --http-max-input-size to increase the limit.")
	v2Do(t, "POST", infer, raw, v2HeaderLength, "10").expectTriton(t, 400, CodeTooLarge,
		"request JSON size of 8200 bytes exceeds the maximum allowed input size of 8192 bytes. Use --http-max-input-size to increase the limit.")
	padded := append([]byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,64],"data":[`+strings.Repeat("0,", 63)+`0]}]`), bytes.Repeat([]byte(" "), 2*max)...)
	padded = append(padded, '}')
	for _, stream := range []bool{false, true} {
		post(t, infer, "application/json", compressAs(t, "gzip", padded), stream, "Content-Encoding", "gzip").expectTriton(t, 400, CodeTooLarge,
			"Decompressed data size exceeds the maximum allowed value of 8192 bytes. Use --http-max-input-size to increase the limit.")
	}
	// A tensor read from JSON "data" that would take more than the limit:
	// 2,752 FP32 elements in about 5.5 KB of JSON are 11,008 bytes.
	n := 43 * 64
	small := []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[43,64],"data":[` + strings.Repeat("0,", n-1) + `0]}]}`)
	if len(small) > max {
		t.Fatalf("the request is %d bytes, over the limit", len(small))
	}
	v2Do(t, "POST", infer, small).expectTriton(t, 400, CodeTooLarge,
		"JSON input 'input' has a byte_size (11008 bytes) that exceeds the maximum allowed value of 8192 bytes. Use --http-max-input-size to increase the limit.")
	// Under the limit it is served.
	ok := []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[2,64],"data":[` + strings.Repeat("0,", 127) + `0]}]}`)
	if r := v2Do(t, "POST", infer, ok); r.status != 200 {
		t.Fatalf("a request under the limit: %d %s", r.status, r.body)
	}
	// fw's own route keeps its 413 and message.
	if r := v2Do(t, "POST", ts.url+"/predict", big); r.status != 413 || !strings.Contains(string(r.body), "--max-body-bytes") {
		t.Fatalf("/predict over the limit: %d %s", r.status, r.body)
	}

	// The repository routes' own bound (1 MiB) is not --max-body-bytes.
	def := v2Start(t, "digits_mlp.onnx", Config{})
	body := append([]byte(`{"ready":true,"x":"`), bytes.Repeat([]byte("A"), maxRepositoryBody)...)
	body = append(body, `"}`...)
	r := v2Do(t, "POST", def.url+"/v2/repository/index", body)
	r.expectTriton(t, 400, CodeTooLarge, fmt.Sprintf("request JSON size of %d bytes exceeds the maximum allowed input size of 1048576 bytes. This route takes", len(body)))
	if strings.Contains(string(r.body), "--http-max-input-size") {
		t.Fatalf("the repository bound is not the flag's: %s", r.body)
	}
}

// fw's other /v2 refusals keep fw's code but answer Triton's status, 400
// (Triton's INVALID_ARG) for what fw's own routes answer 413 or 422.
func TestV2InvalidInputIs400(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{MaxRows: 2})
	url := ts.url + "/v2/models/digits_mlp/infer"
	v2Do(t, "POST", url, []byte(`{"inputs":[{"name":"input","datatype":"INT64","shape":[1,64],"data":[`+strings.Repeat("0,", 63)+`0]}]}`)).
		expectError(t, 400, CodeInvalidInput, "has datatype INT64 but this model takes FP32")
	v2Do(t, "POST", url, []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[3,64],"data":[`+strings.Repeat("0,", 191)+`0]}]}`)).
		expectError(t, 400, CodeTooLarge, "--max-rows")
	if r := v2Do(t, "POST", ts.url+"/predict", []byte(`{"data":[[1]]}`)); r.status != 422 {
		t.Fatalf("/predict keeps 422: %d %s", r.status, r.body)
	}
}

// The shape of a V2 input, checked as Triton checks it: an element count
// or byte size that overflows is Triton's 400 and sentence; an element
// that is not an unsigned integer is Triton's 500 (its JSON reader fails),
// with fw's code saying the request is at fault.
func TestV2ShapeSentences(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	url := ts.url + "/v2/models/digits_mlp/infer"
	req := func(shape string) []byte {
		return []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":` + shape + `,"data":[1.0]}]}`)
	}
	v2Do(t, "POST", url, req(`[16,1152921504606846978]`)).expectTriton(t, 400, CodeBadRequest,
		"invalid shape for input 'input': shape [16,1152921504606846978] causes total element count to exceed maximum size of 9223372036854775807")
	v2Do(t, "POST", url, req(`[4,1152921504606846978]`)).expectTriton(t, 400, CodeBadRequest,
		"byte size overflow for input 'input': element count (4611686018427387912) * data type size (4) exceeds maximum allowed size (9223372036854775807)")
	// The document's bound on a size (maxShapeDim): up to it a size is read
	// (then its count refused with 400), beyond it it is not.
	v2Do(t, "POST", url, req(`[1,9223372036854775807]`)).expectTriton(t, 400, CodeBadRequest,
		"byte size overflow for input 'input': element count (9223372036854775807)")
	for _, shape := range []string{`[2,-5]`, `[1.5,64]`, `["1",64]`, `[1,9223372036854775808]`, `[1,336679844898533077704275898497236992]`} {
		v2Do(t, "POST", url, req(shape)).expectTriton(t, 500, CodeBadRequest,
			"Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer")
	}
	if r := v2Do(t, "GET", ts.url+"/v2/health/live", nil); r.status != 200 {
		t.Fatalf("live after the refusals: %d", r.status)
	}
}

// "data" nested 99 arrays deep is read flat (INT64 and BYTES alike); a
// value 100 levels down is Triton's sentence, read without recursing
// further.
func TestV2DataNestingDepth(t *testing.T) {
	nest := func(depth int, v string) string {
		return strings.Repeat("[", depth) + v + strings.Repeat("]", depth)
	}
	tcls := v2Start(t, "textcls.onnx", Config{})
	in, _, _, _ := v2TestVector(t, tcls.m)
	x := in["tokens"]
	flat := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(x.Int64s())), ","), "[]")
	body := func(depth int) []byte {
		return []byte(fmt.Sprintf(`{"inputs":[{"name":"tokens","datatype":"INT64","shape":%s,"data":%s}]}`, serving.ShapeString(x.Shape), nest(depth, flat)))
	}
	for _, depth := range []int{1, 50, 99} {
		if r := v2Do(t, "POST", tcls.url+"/v2/models/textcls/infer", body(depth)); r.status != 200 {
			t.Fatalf("INT64 data nested %d deep: %d %s", depth, r.status, r.body)
		}
	}
	for _, depth := range []int{100, 120, 290} {
		v2Do(t, "POST", tcls.url+"/v2/models/textcls/infer", body(depth)).expectTriton(t, 400, CodeBadRequest,
			"JSON nesting depth exceeds maximum allowed limit (100)")
	}
	// Deeper than the request's own bound: the same sentence.
	v2Do(t, "POST", tcls.url+"/v2/models/textcls/infer", body(400)).expectTriton(t, 400, CodeInvalidJSON,
		"JSON nesting depth exceeds maximum allowed limit (100)")

	str := startModel(t, testmodels.Triton(t, "simple_identity"), Config{}, nil)
	sbody := func(depth int) []byte {
		return []byte(`{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[1,1],"data":` + nest(depth, `"hello"`) + `}]}`)
	}
	_, out := stringOutputs(t, v2Do(t, "POST", str.url+"/v2/models/simple_identity/infer", sbody(50)))
	if got := out["OUTPUT0"]; len(got) != 1 || got[0] != "hello" {
		t.Fatalf("BYTES nested 50 deep: %q", got)
	}
	v2Do(t, "POST", str.url+"/v2/models/simple_identity/infer", sbody(120)).expectTriton(t, 400, CodeBadRequest,
		"JSON nesting depth exceeds maximum allowed limit (100)")
}

// A raw binary request (Inference-Header-Content-Length: 0) for a BYTES
// input is its one element, as Triton reads it, when the input's shape
// (less the batch axis, as the configuration gives it) is [1]; otherwise
// Triton's sentence.
func TestV2RawBinaryBytes(t *testing.T) {
	one := startModel(t, testmodels.Triton(t, "simple_identity"), Config{}, func(inst *serving.Instance) {
		inst.Config.Inputs[0].Dims = []int64{1} // config.pbtxt's dims: [ 1 ]
	})
	r := v2Do(t, "POST", one.url+"/v2/models/simple_identity/infer", []byte("427"), v2HeaderLength, "0")
	if r.status != 200 {
		t.Fatalf("raw BYTES: %d %s", r.status, r.body)
	}
	n, err := strconv.Atoi(r.header.Get(v2HeaderLength))
	if err != nil {
		t.Fatalf("no %s: %v", v2HeaderLength, err)
	}
	var resp v2Resp
	if err := json.Unmarshal(r.body[:n], &resp); err != nil {
		t.Fatal(err)
	}
	if got := deserialize(t, r.body[n:]); len(got) != 1 || got[0] != "427" || serving.ShapeString(resp.Outputs[0].Shape) != "[1,1]" {
		t.Fatalf("raw BYTES answer %s: %q", r.body[:n], got)
	}
	many := startModel(t, testmodels.Triton(t, "simple_identity"), Config{}, nil)
	v2Do(t, "POST", many.url+"/v2/models/simple_identity/infer", []byte("427"), v2HeaderLength, "0").expectTriton(t, 400, CodeBadRequest,
		"For BYTE datatype raw input 'INPUT0', the model must have input shape [1]")
}

// The repository index reads "ready" as Triton does: a value that is not a
// boolean is Triton's sentence, an array nested 250,000 deep included (as
// quickly, and without recursing into it); malformed bodies are still
// invalid JSON.
func TestV2RepositoryIndexReady(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	url := ts.url + "/v2/repository/index"
	deep := `{"ready":` + strings.Repeat("[", 250000) + "true" + strings.Repeat("]", 250000) + "}"
	for _, body := range []string{deep, `{"ready":[true]}`, `{"ready":"true"}`, `{"ready":null}`, `{"a":1,"ready":1}`} {
		v2Do(t, "POST", url, []byte(body)).expectTriton(t, 400, CodeBadRequest, "Invalid value for 'ready': expected a boolean")
	}
	// Whitespace alone is not "no body" (schemathesis sent "\n"): Triton's
	// JSON parser refuses it too.
	for _, body := range []string{`{"ready":true`, `[1]`, `{"ready":true,}`, `{"x":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`, "\n", "  "} {
		v2Do(t, "POST", url, []byte(body)).expectError(t, 400, CodeInvalidJSON, `not a JSON object like {"ready": true}`)
	}
	for _, body := range []string{``, `{}`, `{"ready":false}`, `{"ready":true}`, ` {"x":[1,{"y":2}], "ready" : true} `} {
		if r := v2Do(t, "POST", url, []byte(body)); r.status != 200 {
			t.Fatalf("%q: %d %s", body, r.status, r.body)
		}
	}
}

// rawChunks sends a POST of body in chunks of size bytes (then the last
// chunk) on its own connection and returns the status line and body of the
// answer.
func rawChunks(t *testing.T, url, path string, body []byte, size int, hdr ...string) (string, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	w := bufio.NewWriterSize(c, 1<<16)
	fmt.Fprintf(w, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n", path)
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(w, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	w.WriteString("\r\n")
	go func() { // the answer may come before every chunk is written
		for b := body; len(b) > 0; {
			n := min(size, len(b))
			fmt.Fprintf(w, "%x\r\n", n)
			w.Write(b[:n])
			if _, err := w.WriteString("\r\n"); err != nil {
				return
			}
			b = b[n:]
		}
		w.WriteString("0\r\n\r\n")
		w.Flush()
	}()
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	var length int
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Content-Length") {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	answer := make([]byte, length)
	if _, err := io.ReadFull(br, answer); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(status), string(answer)
}

// A chunked /v2 body of more than 65,536 non-empty chunks is refused with
// Triton's sentence, counting chunks, not reads: a large body in few large
// chunks is read whole, and the limit is exact. fw's own routes do not
// count chunks.
func TestV2ChunkedBodyLimit(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	infer := "/v2/models/digits_mlp/infer"
	const sentence = "Chunked request body exceeds maximum of 65536 non-empty chunks. Send fewer or larger HTTP chunks."
	req := []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,64],"data":[` + strings.Repeat("0,", 63) + `0]}]`)
	padded := func(n int) []byte { // req padded with spaces to n bytes
		return append(append(slices.Clip(req), bytes.Repeat([]byte(" "), n-len(req)-1)...), '}')
	}
	if status, body := rawChunks(t, ts.url, infer, padded(65536), 1); status != "HTTP/1.1 200 OK" {
		t.Fatalf("65536 chunks: %s %s", status, body)
	}
	for _, n := range []int{65537, 300_000} {
		status, body := rawChunks(t, ts.url, infer, padded(n), 1)
		var e struct{ Error, Code string }
		if status != "HTTP/1.1 400 Bad Request" || json.Unmarshal([]byte(body), &e) != nil || !strings.HasPrefix(e.Error, sentence) || e.Code != CodeBadRequest {
			t.Fatalf("%d chunks: %s %s", n, status, body)
		}
	}
	// Compressed, the chunks are counted as sent: an "id" of 150,000
	// random letters compresses to more than 65,536 bytes.
	rng := rand.New(rand.NewPCG(1, 2))
	id := make([]byte, 150_000)
	for i := range id {
		id[i] = byte('a' + rng.IntN(26))
	}
	gz := compressAs(t, "gzip", append(append(slices.Clip(req), `,"id":"`+string(id)+`"`...), '}'))
	if len(gz) <= 65536 {
		t.Fatalf("the compressed body is %d bytes", len(gz))
	}
	status, body := rawChunks(t, ts.url, infer, gz, 1, "Content-Encoding", "gzip")
	if status != "HTTP/1.1 400 Bad Request" || !strings.Contains(body, sentence) {
		t.Fatalf("%d compressed chunks: %s %s", len(gz), status, body)
	}
	if status, body := rawChunks(t, ts.url, infer, gz, 1<<10, "Content-Encoding", "gzip"); status != "HTTP/1.1 200 OK" {
		t.Fatalf("the compressed body in 1 KiB chunks: %s %s", status, body)
	}
	// Few chunks, each far larger than a read: 16 MiB in 4 chunks.
	if status, body := rawChunks(t, ts.url, infer, padded(16<<20), 4<<20); status != "HTTP/1.1 200 OK" {
		t.Fatalf("4 chunks of 4 MiB: %s %.300s", status, body)
	}
	// fw's own route reads as many chunks as its limits allow.
	rows := []byte(`{"data":[[` + strings.Repeat("0,", 63) + `0]]` + strings.Repeat(" ", 70000) + `}`)
	if status, body := rawChunks(t, ts.url, "/predict", rows, 1); status != "HTTP/1.1 200 OK" {
		t.Fatalf("/predict in 70,000 chunks: %s %s", status, body)
	}
}

// Registering system shared memory opens the object first, as Triton does:
// a key that opens none is Triton's 500 and sentence, whatever the window
// (byte_size 0 included). CUDA shared memory is refused with Triton's
// sentence for a handle it cannot open, then why.
func TestV2SharedMemoryTritonStatuses(t *testing.T) {
	dir := t.TempDir()
	reg := sharedmem.New(dir, true)
	defer reg.Close()
	ts := v2Start(t, "digits_mlp.onnx", Config{SharedMemory: reg})
	for _, size := range []int{0, 64} {
		body := fmt.Appendf(nil, `{"key":"/test_shm","offset":0,"byte_size":%d}`, size)
		v2Do(t, "POST", ts.url+"/v2/systemsharedmemory/region/test_shm/register", body).expectTriton(t, 500, CodeBadRequest,
			"Unable to open shared memory region: '/test_shm'")
	}
	if err := os.WriteFile(filepath.Join(dir, "small"), make([]byte, 64), 0o600); err != nil {
		t.Fatal(err)
	}
	v2Do(t, "POST", ts.url+"/v2/systemsharedmemory/region/r/register", []byte(`{"key":"/small","offset":0,"byte_size":65}`)).
		expectTriton(t, 400, CodeBadRequest, "failed to register shared memory region 'r': invalid args")
	v2Do(t, "POST", ts.url+"/v2/cudasharedmemory/region/c/register", []byte(`{"raw_handle":{"b64":""},"device_id":0,"byte_size":0}`)).
		expectTriton(t, 400, CodeBadRequest, "failed to register shared memory region 'c': invalid args")
}

// Client shared memory off (tritonserver's --allow-client-shm default):
// register and unregister, system and CUDA, answer 501 with Triton's
// sentence; the status answers, empty; no region is made.
func TestV2SharedMemoryClientsNotAllowed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in"), make([]byte, 64), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := sharedmem.New(dir, false)
	defer reg.Close()
	ts := v2Start(t, "digits_mlp.onnx", Config{SharedMemory: reg})
	for _, c := range []struct{ path, body string }{
		{"/v2/systemsharedmemory/region/in/register", `{"key":"/in","offset":0,"byte_size":64}`},
		{"/v2/systemsharedmemory/region/in/unregister", ``},
		{"/v2/systemsharedmemory/unregister", ``},
		{"/v2/cudasharedmemory/region/c/register", `{"raw_handle":{"b64":""},"device_id":0,"byte_size":8}`},
		{"/v2/cudasharedmemory/unregister", ``},
	} {
		v2Do(t, "POST", ts.url+c.path, []byte(c.body)).expectTriton(t, 501, CodeNotImplemented, sharedmem.DisabledMessage)
	}
	for _, path := range []string{"/v2/systemsharedmemory/status", "/v2/cudasharedmemory/status"} {
		if r := v2Do(t, "GET", ts.url+path, nil); r.status != 200 || strings.TrimSpace(string(r.body)) != "[]" {
			t.Errorf("%s: %d %s", path, r.status, r.body)
		}
	}
}

// A load's file override fw does not take: one whose path no file system
// can hold (a component over 255 bytes) is Triton's 500 "failed to poll
// from model repository", any other a failed load (400); the model served
// goes on serving.
func TestV2LoadFileOverride(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	url := ts.url + "/v2/repository/models/digits_mlp/load"
	long, _ := json.Marshal(map[string]any{"parameters": map[string]any{"file:" + strings.Repeat("A", 256): "YQ==", "config": "{}"}})
	v2Do(t, "POST", url, long).expectTriton(t, 500, CodeLoadFailed, "failed to poll from model repository")
	v2Do(t, "POST", url, []byte(`{"parameters":{"file:1/model.onnx":"YQ=="}}`)).expectTriton(t, 400, CodeLoadFailed, "failed to load 'digits_mlp'")
	if r := v2Do(t, "GET", ts.url+"/v2/health/ready", nil); r.status != 200 {
		t.Fatalf("ready after the refused loads: %d %s", r.status, r.body)
	}
}

// readAllLimit reads at most limit bytes into the buffer it is given,
// growing it only when it is full (v2Infer reuses a pooled one, so a
// refused chunked body leaves little garbage: Triton's test bounds the
// server's RSS growth over 100 of them by 1 MiB).
func TestReadAllLimit(t *testing.T) {
	src := bytes.Repeat([]byte("abcdefgh"), 1000)
	buf := make([]byte, 0, len(src)+10)
	b, err := readAllLimit(chunked{bytes.NewReader(src)}, int64(len(src)+1), buf, 0)
	if err != nil || !bytes.Equal(b, src) || &b[0] != &buf[:1][0] {
		t.Fatalf("read %d bytes (%v), into the given buffer: %v", len(b), err, &b[0] == &buf[:1][0])
	}
	b, err = readAllLimit(bytes.NewReader(src), 100, nil, 0)
	if err != nil || len(b) != 100 {
		t.Fatalf("limit 100: %d bytes, %v", len(b), err)
	}
	b, err = readAllLimit(io.MultiReader(bytes.NewReader(src[:10]), iotest.ErrReader(io.ErrUnexpectedEOF)), 100, make([]byte, 0, 4), 0)
	if err != io.ErrUnexpectedEOF || !bytes.Equal(b, src[:10]) {
		t.Fatalf("a failing reader: %q %v", b, err)
	}
	// A body of declared length grows by doubling and stops at its length
	// (plus the byte that shows its end): a 60 MB /predict body allocated
	// five times its size while append grew the buffer by 1.25x, and
	// TestPeakMemoryPerRequest's peak RSS followed (4.1-4.7x the body).
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b, err = readAllLimit(chunked{bytes.NewReader(big)}, 64<<20, nil, int64(len(big)))
	runtime.ReadMemStats(&after)
	if err != nil || !bytes.Equal(b, big) || cap(b) != len(big)+1 {
		t.Fatalf("declared 1 MiB: %d bytes, cap %d, %v", len(b), cap(b), err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(2.2*float64(len(big))) {
		t.Errorf("reading 1 MiB of declared length allocated %d bytes (%.1fx)", alloc, float64(alloc)/float64(len(big)))
	}
	// A declared length is not trusted: memory follows what arrives.
	b, err = readAllLimit(bytes.NewReader(src[:100]), 64<<20, nil, 60<<20)
	if err != nil || len(b) != 100 || cap(b) > 1024 {
		t.Fatalf("declared 60 MiB, sent 100 bytes: %d bytes, cap %d, %v", len(b), cap(b), err)
	}
}
