package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/testlog"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/internal/testreq"
	"github.com/fw-serve/fw/serving"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/valyala/fasthttp"
)

// edgeServer is a Server on a reference model, driven either through
// Handler on a RequestCtx (fuzzing) or on a real socket (listen).
type edgeServer struct {
	srv *Server
	m   *engine.Model
	log *testlog.Buffer
	// lastPath is the path the router saw in the last serve (fuzzing).
	lastPath []byte
}

// gate holds engine calls: each reports on started, then waits until
// release, so a test decides when a batch ends instead of timing it.
type gate struct {
	started chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{started: make(chan struct{}, 64), open: make(chan struct{})} }

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// wait waits for an engine call to start, failing instead of hanging.
func (g *gate) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.started:
	case <-time.After(30 * time.Second):
		t.Fatal("no engine call started")
	}
}

// newEdgeServer loads model from the reference models behind a batcher
// with bc; with a gate, every engine call waits for its release.
func newEdgeServer(t testing.TB, model string, cfg Config, bc batcher.Config, g *gate) *edgeServer {
	t.Helper()
	m, err := engine.Load(context.Background(), filepath.Join(testmodels.Dir(t), model), engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	run := m.Forward
	if g != nil {
		run = func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
			g.started <- struct{}{}
			<-g.open
			return m.Forward(ctx, in)
		}
	}
	reg := prometheus.NewRegistry()
	base, cancel := context.WithCancel(context.Background())
	logs := &testlog.Buffer{}
	srv := NewTestServer(base, cfg, slog.New(slog.NewTextHandler(logs, nil)), reg)
	srv.Swap(&serving.Instance{Model: m, Batcher: batcher.New(run, bc, srv.BatchStats())})
	srv.SetState(serving.StateReady, "")
	t.Cleanup(func() {
		cancel()
		if inst := srv.Current(); inst != nil {
			inst.Batcher.Close(context.Background())
			inst.Model.Close()
		}
	})
	return &edgeServer{srv: srv, m: m, log: logs}
}

// listen serves the server on a real 127.0.0.1 socket as fw serve does and
// returns its address; the listener stops when the test ends. Register it
// after anything that must be released before shutdown can finish.
func (es *edgeServer) listen(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &fasthttp.Server{Handler: es.srv.Handler, StreamRequestBody: true, DisablePreParseMultipartForm: true, MaxRequestBodySize: int(es.srv.cfg.MaxBodyBytes)}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ln) }()
	t.Cleanup(func() {
		hs.Shutdown()
		<-done
	})
	return ln.Addr().String()
}

// serveBody runs one request through Handler, as fasthttp would, the body
// given as a stream of unknown length when stream is set (as fasthttp gives a
// handler a chunked or large body), and returns the response with a streamed
// body (NDJSON) read to its end.
func (es *edgeServer) serveBody(method, uri, ctype string, body []byte, stream bool, hdr ...string) *fasthttp.Response {
	ctx := testreq.Serve(es.srv.Handler, method, uri, ctype, body, stream, hdr...)
	es.lastPath = append(es.lastPath[:0], ctx.Path()...)
	resp := new(fasthttp.Response)
	ctx.Response.CopyTo(resp)
	resp.SetBody(ctx.Response.Body()) // runs a body stream writer to its end
	return resp
}

// panics reads fw_http_panics_total.
func (es *edgeServer) panics() float64 {
	var m dto.Metric
	if err := es.srv.metrics.panics.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// checkAnswer is what every fuzz target asserts about one answer: the route
// did not panic (the recover is not what saved it), the status is 200, a
// 4xx, 503 or 504, and a non-2xx body has the documented error shape (V2's
// own shape on V2 routes).
func (es *edgeServer) checkAnswer(t *testing.T, resp *fasthttp.Response, v2 bool) {
	t.Helper()
	if n := es.panics(); n != 0 {
		t.Fatalf("a route panicked (%v recovered); log:\n%s", n, es.log.String())
	}
	code := resp.StatusCode()
	switch {
	case code == 200:
		return
	case code >= 400 && code < 500, code == 503, code == 504:
	case code == 500 && v2 && v2RefusalCode(resp.Body()):
		// Triton's status for some refusals of the request (a shape
		// element that is not an unsigned integer), not a failure.
	default:
		t.Fatalf("status %d: %s", code, resp.Body())
	}
	if v2 {
		var e struct {
			Error *string `json:"error"`
		}
		if err := json.Unmarshal(resp.Body(), &e); err != nil || e.Error == nil || *e.Error == "" {
			t.Fatalf("%d without the V2 error shape: %s", code, resp.Body())
		}
		return
	}
	if msg := errorShape(resp.Body()); msg != "" {
		t.Fatalf("%d: %s: %s", code, msg, resp.Body())
	}
}

// v2RefusalCode reports whether a V2 error body's fw code says the request
// was refused (bad_request), not that the server failed.
func v2RefusalCode(body []byte) bool {
	var e struct {
		Code string `json:"code"`
	}
	return json.Unmarshal(body, &e) == nil && e.Code == CodeBadRequest
}

// errorShape checks {"error": {"code", "message", "details"?}} and says
// what is wrong, or "" when the body has the shape.
func errorShape(body []byte) string {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		return "not JSON"
	}
	if len(v) != 1 || v["error"] == nil {
		return `not exactly one "error" member`
	}
	var e map[string]json.RawMessage
	if err := json.Unmarshal(v["error"], &e); err != nil {
		return `"error" is not an object`
	}
	var code, msg string
	if json.Unmarshal(e["code"], &code) != nil || code == "" || json.Unmarshal(e["message"], &msg) != nil || msg == "" {
		return "no code or message"
	}
	for k := range e {
		if k != "code" && k != "message" && k != "details" {
			return "unknown member " + k
		}
	}
	return ""
}

// digitPNG is an 8x8 grayscale digit-like picture.
func digitPNG(t testing.TB) []byte {
	img := image.NewGray(image.Rect(0, 0, 8, 8))
	for y := 1; y < 7; y++ {
		img.SetGray(3, y, color.Gray{Y: 255})
		img.SetGray(4, y, color.Gray{Y: 200})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// rawHTTP is one client connection speaking HTTP/1.1 by hand, so a test
// sees exactly whether the server keeps it open.
type rawHTTP struct {
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawHTTP {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second)) // fail instead of hanging
	return &rawHTTP{c: c, r: bufio.NewReader(c)}
}

// roundTrip sends a request (a chunked body when chunked, so the server
// streams it) and reads one response.
func (rc *rawHTTP) roundTrip(t *testing.T, method, path, ctype string, body []byte, chunked bool, hdr ...string) *fasthttp.Response {
	t.Helper()
	if _, err := rc.c.Write(rawRequest(method, path, ctype, body, chunked, hdr...)); err != nil {
		t.Fatalf("%s %s: write: %v", method, path, err)
	}
	return rc.read(t, method+" "+path)
}

// read reads one response.
func (rc *rawHTTP) read(t *testing.T, what string) *fasthttp.Response {
	t.Helper()
	resp := new(fasthttp.Response)
	if err := resp.Read(rc.r); err != nil {
		t.Fatalf("%s: no response on this connection: %v", what, err)
	}
	return resp
}

// rawRequest is an HTTP/1.1 request as bytes.
func rawRequest(method, path, ctype string, body []byte, chunked bool, hdr ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n", method, path)
	if ctype != "" {
		fmt.Fprintf(&b, "Content-Type: %s\r\n", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	if chunked {
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		for rest := body; len(rest) > 0; {
			n := min(len(rest), 1000)
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, rest[:n])
			rest = rest[n:]
		}
		b.WriteString("0\r\n\r\n")
	} else {
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
		b.Write(body)
	}
	return b.Bytes()
}

func mlpRow() []byte {
	return []byte(`{"data":[[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]]}`)
}

// A panic in any route is answered 500 internal in the error shape (V2's on
// V2 routes), logged with the request id and the stack, counted, and the
// same server - the same connection even - goes on serving.
func TestPanicIsAnsweredAndServingGoesOn(t *testing.T) {
	es := newEdgeServer(t, "digits_mlp.onnx", Config{}, batcher.Config{MaxDelay: 0}, nil)
	es.srv.routeHook = func(ctx *fasthttp.RequestCtx) {
		if len(ctx.Request.Header.Peek("X-Test-Panic")) > 0 {
			ctx.SetBodyString("half an answer")
			panic("deliberate test panic")
		}
	}
	addr := es.listen(t)
	rc := dialRaw(t, addr)

	resp := rc.roundTrip(t, "POST", "/predict", "application/json", mlpRow(), false, "X-Test-Panic", "1", "X-Request-Id", "req-42")
	if resp.StatusCode() != 500 || errorShape(resp.Body()) != "" || !bytes.Contains(resp.Body(), []byte(`"code":"internal"`)) || !bytes.Contains(resp.Body(), []byte("req-42")) {
		t.Fatalf("panicking route: %d %s, want 500 internal naming req-42", resp.StatusCode(), resp.Body())
	}
	if got := string(resp.Header.Peek("X-Request-Id")); got != "req-42" {
		t.Errorf("X-Request-Id %q, want req-42", got)
	}
	if resp.ConnectionClose() {
		t.Error("a 500 after the body was read closed the connection")
	}
	if n := es.panics(); n != 1 {
		t.Fatalf("fw_http_panics_total = %v, want 1", n)
	}
	logs := es.log.String()
	for _, want := range []string{"request_id=req-42", "deliberate test panic", "routeSafely", "path=/predict"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}

	// The next request on the same connection is served.
	if resp := rc.roundTrip(t, "POST", "/predict", "application/json", mlpRow(), false); resp.StatusCode() != 200 {
		t.Fatalf("after the panic: %d %s", resp.StatusCode(), resp.Body())
	}

	// A V2 route answers in V2's shape; a generated request id is given.
	resp = rc.roundTrip(t, "GET", "/v2/models/digits_mlp", "", nil, false, "X-Test-Panic", "1")
	var v2 struct{ Error, Code string }
	if err := json.Unmarshal(resp.Body(), &v2); resp.StatusCode() != 500 || err != nil || v2.Code != "internal" || v2.Error == "" {
		t.Fatalf("panicking V2 route: %d %s", resp.StatusCode(), resp.Body())
	}
	if id := string(resp.Header.Peek("X-Request-Id")); id == "" || !strings.Contains(v2.Error, id) {
		t.Errorf("generated request id %q not in %q", id, v2.Error)
	}

	// A panic before a streamed body was read: the drain logic still runs,
	// the client reads the 500, and the connection is not confused by the
	// rest, which is read to its end and dropped.
	rc2 := dialRaw(t, addr)
	resp = rc2.roundTrip(t, "POST", "/predict", "application/json", bytes.Repeat([]byte(" "), 64<<10), true, "X-Test-Panic", "1")
	if resp.StatusCode() != 500 {
		t.Fatalf("panic with a streamed body: %d %s", resp.StatusCode(), resp.Body())
	}
	if n := es.panics(); n != 3 {
		t.Fatalf("fw_http_panics_total = %v, want 3", n)
	}
	if resp := rc2.roundTrip(t, "GET", "/health", "", nil, false); resp.StatusCode() != 200 {
		t.Fatalf("health after panics: %d %s", resp.StatusCode(), resp.Body())
	}
}

// postAsync sends a POST on its own connection and delivers the status.
func postAsync(addr, path string, body []byte) <-chan int {
	ch := make(chan int, 1)
	go func() {
		var req fasthttp.Request
		var resp fasthttp.Response
		req.Header.SetMethod("POST")
		req.SetRequestURI("http://" + addr + path)
		req.Header.SetContentType("application/json")
		req.SetBody(body)
		if err := fasthttp.DoTimeout(&req, &resp, 30*time.Second); err != nil {
			ch <- -1
			return
		}
		ch <- resp.StatusCode()
	}()
	return ch
}

func wantStatus(t *testing.T, what string, ch <-chan int, status int) {
	t.Helper()
	select {
	case got := <-ch:
		if got != status {
			t.Fatalf("%s: status %d, want %d", what, got, status)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer", what)
	}
}

// wantKept checks an overload answer: its status and code, Retry-After, and
// no Connection: close.
func wantKept(t *testing.T, what string, resp *fasthttp.Response, status int, code string) {
	t.Helper()
	if resp.StatusCode() != status || !bytes.Contains(resp.Body(), []byte(`"code":"`+code+`"`)) {
		t.Fatalf("%s: %d %s, want %d %s", what, resp.StatusCode(), resp.Body(), status, code)
	}
	if len(resp.Header.Peek("Retry-After")) == 0 {
		t.Errorf("%s: no Retry-After", what)
	}
	if resp.ConnectionClose() {
		t.Errorf("%s: the answer closes a keep-alive connection whose body was read", what)
	}
}

// Overload answers stay cheap: a 503 (queue full, not ready) to a request
// whose body was read, streamed or not, keeps the keep-alive connection, and
// the next request on it is served.
func TestOverloadKeepsTheConnection(t *testing.T) {
	g := newGate()
	es := newEdgeServer(t, "digits_mlp.onnx", Config{Timeout: time.Minute}, batcher.Config{MaxQueue: 1, MaxBatchRows: 1, MaxDelay: 0, Instances: 1}, g)
	addr := es.listen(t)
	t.Cleanup(g.release) // before the listener's shutdown waits for the held requests

	first := postAsync(addr, "/predict", mlpRow())
	g.wait(t) // the first request holds the only instance
	second := postAsync(addr, "/predict", mlpRow())
	inst := es.srv.Current()
	for deadline := time.Now().Add(30 * time.Second); inst.Batcher.QueueDepth() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second request never queued")
		}
	}

	rc := dialRaw(t, addr)
	wantKept(t, "queue full, chunked body", rc.roundTrip(t, "POST", "/predict", "application/json", mlpRow(), true), 503, CodeOverloaded)
	wantKept(t, "queue full, sized body", rc.roundTrip(t, "POST", "/predict", "application/json", mlpRow(), false), 503, CodeOverloaded)
	big := append(bytes.Repeat([]byte(" "), 256<<10), mlpRow()...) // beyond fasthttp's read-ahead: streamed
	wantKept(t, "queue full, large body", rc.roundTrip(t, "POST", "/predict", "application/json", big, false), 503, CodeOverloaded)

	g.release()
	wantStatus(t, "first", first, 200)
	wantStatus(t, "second", second, 200)
	if resp := rc.roundTrip(t, "POST", "/predict", "application/json", mlpRow(), true); resp.StatusCode() != 200 {
		t.Fatalf("on the same connection after the 503s: %d %s", resp.StatusCode(), resp.Body())
	}

	// Not ready: answered before the body is read; the body is drained so
	// the connection still carries the next request.
	es.srv.SetState(serving.StateStarting, "loading the model")
	wantKept(t, "not ready, chunked body", rc.roundTrip(t, "POST", "/predict", "application/json", mlpRow(), true), 503, CodeNotReady)
	es.srv.SetState(serving.StateReady, "")
	if resp := rc.roundTrip(t, "GET", "/health", "", nil, false); resp.StatusCode() != 200 {
		t.Fatalf("after not ready: %d %s", resp.StatusCode(), resp.Body())
	}
}

// A 504 (--timeout passed while the batch runs) carries Retry-After and
// keeps the connection.
func TestTimeoutKeepsTheConnection(t *testing.T) {
	g := newGate()
	es := newEdgeServer(t, "digits_mlp.onnx", Config{Timeout: 50 * time.Millisecond}, batcher.Config{MaxBatchRows: 1, MaxDelay: 0, Instances: 1}, g)
	addr := es.listen(t)
	t.Cleanup(g.release)
	rc := dialRaw(t, addr)
	// The gate holds the engine call, so only the timeout can answer.
	wantKept(t, "timeout", rc.roundTrip(t, "POST", "/predict", "application/json", mlpRow(), true), 504, CodeTimeout)
	g.wait(t)
	g.release()
	if resp := rc.roundTrip(t, "GET", "/health", "", nil, false); resp.StatusCode() != 200 {
		t.Fatalf("after the 504: %d %s", resp.StatusCode(), resp.Body())
	}
}

// A body larger than the drain bound still closes the connection: the rest
// must not be parsed as a request.
func TestUnreadBodyClosesTheConnection(t *testing.T) {
	es := newEdgeServer(t, "digits_mlp.onnx", Config{MaxBodyBytes: 1 << 10}, batcher.Config{}, nil)
	rc := dialRaw(t, es.listen(t))
	req := rawRequest("POST", "/predict", "application/json", bytes.Repeat([]byte(" "), maxDrainBytes+(1<<20)), true)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		rc.c.Write(req) // fails once the server closes: expected
	}()
	resp := rc.read(t, "POST /predict")
	rc.c.Close()
	<-wrote
	if resp.StatusCode() != 413 || !resp.ConnectionClose() {
		t.Fatalf("body over the drain bound: %d close=%v %s, want 413 with Connection: close", resp.StatusCode(), resp.ConnectionClose(), resp.Body())
	}
}
