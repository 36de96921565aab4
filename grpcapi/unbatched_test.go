package grpcapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/serving"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// serveHTTP starts fw's HTTP front end on f's model host (the statistics,
// metrics and registry the gRPC front end uses, as fw serve wires them) on a
// loopback socket and returns its URL and a client with room for many
// concurrent connections.
func (f *fixture) serveHTTP(t testing.TB, maxRows int) (string, *http.Client) {
	t.Helper()
	base, cancel := context.WithCancel(context.Background())
	hs := httpapi.New(base, httpapi.Config{MaxRows: maxRows, Version: "test"}, serving.One(f.host), f.metrics, quietLog(), f.reg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := &fasthttp.Server{Handler: hs.Handler}
	go fs.Serve(ln)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		fs.Shutdown()
		cancel()
	})
	return "http://" + ln.Addr().String(), &http.Client{Transport: tr}
}

// httpJSON sends body (JSON-encoded unless nil) and decodes the JSON answer.
func httpJSON(c *http.Client, method, url string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%d %s: not JSON: %s", resp.StatusCode, url, raw)
	}
	return resp.StatusCode, v, nil
}

// tritonModel copies one of Triton's sample models to <name>.onnx, the name
// fw serve then serves it under.
func tritonModel(t testing.TB, name string) string {
	t.Helper()
	data, err := os.ReadFile(testmodels.Triton(t, name))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name+".onnx")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// unbatchedModel is one of Triton's sample models without a batch axis and
// the outputs it must give.
type unbatchedModel struct {
	name          string
	input, output string
	inShape       []int64
	outShape      []int64
	x             func(id int) []float32
	y             func(x []float32) []float32
}

var unbatchedModels = []unbatchedModel{
	{"nobatch", "x", "y", []int64{4}, []int64{2},
		func(id int) []float32 { return []float32{float32(id % 13), -1, float32(id%5) / 2, 2} },
		func(x []float32) []float32 { return []float32{x[0] + x[2] + 2*x[3], x[1] + x[2] - x[3]} }},
	{"fixed_batch1", "x", "y", []int64{1, 16}, []int64{1, 16},
		func(id int) []float32 {
			x := make([]float32, 16)
			for i := range x {
				x[i] = float32(id) + float32(i)/4
			}
			return x
		},
		func(x []float32) []float32 {
			y := make([]float32, len(x))
			for i, v := range x {
				y[i] = 2 * v
			}
			return y
		}},
}

// Models without a batch axis served by fw serve's two front ends on one
// host, each with 32 clients sending 60 requests at once: every answer is
// the model's own, no engine call fails (fw_batch_errors_total stays 0:
// once a fixed batch of 1 had its requests joined, refused and retried
// alone, and nobatch failed every request with 500 / INTERNAL), each
// request is one engine call, and --max-rows does not count an axis 0 that
// is not rows. The metadata and the model configuration say max_batch_size
// 0 and give the full shapes.
func TestUnbatchedModelsUnderConcurrency(t *testing.T) {
	const clients, each = 32, 60
	for _, um := range unbatchedModels {
		t.Run(um.name, func(t *testing.T) {
			f := start(t, options{model: tritonModel(t, um.name), maxRows: 2})
			url, hc := f.serveHTTP(t, 2)
			checkUnbatchedDescriptions(t, f, url, hc, um)

			errs := make(chan error, 2*clients*each)
			fail := func(format string, args ...any) { errs <- fmt.Errorf(format, args...) }
			var wg sync.WaitGroup
			for c := 0; c < clients; c++ {
				wg.Add(2)
				go func() { // HTTP V2
					defer wg.Done()
					for k := 0; k < each; k++ {
						id := c*each + k
						x := um.x(id)
						code, v, err := httpJSON(hc, "POST", url+"/v2/models/"+um.name+"/infer", map[string]any{
							"id": fmt.Sprint(id), "inputs": []any{map[string]any{"name": um.input, "datatype": "FP32", "shape": um.inShape, "data": x}}})
						if err != nil || code != 200 {
							fail("HTTP request %d: %d %v %v", id, code, v, err)
							continue
						}
						if err := checkV2JSONOutput(v, um, x); err != nil {
							fail("HTTP request %d: %v", id, err)
						}
					}
				}()
				go func() { // gRPC
					defer wg.Done()
					ctx := callCtx(t)
					for k := 0; k < each; k++ {
						id := 10_000 + c*each + k
						x := um.x(id)
						r, err := f.client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: um.name,
							Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: um.input, Datatype: "FP32", Shape: um.inShape}},
							RawInputContents: [][]byte{f32bytes(x)}})
						if err != nil {
							fail("gRPC request %d: %v", id, err)
							continue
						}
						if o := r.Outputs; len(o) != 1 || o[0].Name != um.output || fmt.Sprint(o[0].Shape) != fmt.Sprint(um.outShape) ||
							!bytes.Equal(r.RawOutputContents[0], f32bytes(um.y(x))) {
							fail("gRPC request %d: outputs %v, want %s %v %v", id, o, um.output, um.outShape, um.y(x))
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			n := 0
			for err := range errs {
				if n++; n <= 10 {
					t.Error(err)
				}
			}
			if n > 10 {
				t.Errorf("... and %d more failed requests", n-10)
			}
			code, _, err := httpJSON(hc, "GET", url+"/v2", nil) // the server still answers
			if err != nil || code != 200 {
				t.Fatalf("GET /v2: %d %v", code, err)
			}
			resp, err := hc.Get(url + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			metrics, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if m := regexp.MustCompile(`(?m)^fw_batch_errors_total\{model="[^"]+",version="1"\} (\S+)$`).FindSubmatch(metrics); m == nil || string(m[1]) != "0" {
				t.Errorf("fw_batch_errors_total: %q, want 0", m)
			}
			snap := f.stats.Snapshot()
			total := uint64(2 * clients * each)
			if snap.Success.Count != total || snap.Fail.Count != 0 || snap.ExecutionCount != total || snap.InferenceCount != total ||
				len(snap.Batches) != 1 || snap.Batches[0].BatchSize != 1 {
				t.Errorf("statistics after %d requests: success %d, fail %d, engine calls %d, rows %d, batch sizes %+v; want every request one engine call of one row",
					total, snap.Success.Count, snap.Fail.Count, snap.ExecutionCount, snap.InferenceCount, snap.Batches)
			}
		})
	}
}

// checkV2JSONOutput checks a V2 JSON inference answer of um for input x.
func checkV2JSONOutput(v map[string]any, um unbatchedModel, x []float32) error {
	outs, _ := v["outputs"].([]any)
	if len(outs) != 1 {
		return fmt.Errorf("outputs %v", v["outputs"])
	}
	o, _ := outs[0].(map[string]any)
	data, _ := o["data"].([]any)
	want := um.y(x)
	if o["name"] != um.output || fmt.Sprint(o["shape"]) != fmt.Sprint(um.outShape) || len(data) != len(want) {
		return fmt.Errorf("output %v, want %s %v %v", o, um.output, um.outShape, want)
	}
	for i, d := range data {
		if f, ok := d.(float64); !ok || float32(f) != want[i] {
			return fmt.Errorf("output element %d is %v, want %g (all: %v)", i, d, want[i], data)
		}
	}
	return nil
}

// checkUnbatchedDescriptions: the V2 metadata (HTTP and gRPC) gives the
// full shapes, and the model configuration max_batch_size 0, the full
// dims and no dynamic batching (Triton's rule for a model without a batch
// axis).
func checkUnbatchedDescriptions(t *testing.T, f *fixture, url string, hc *http.Client, um unbatchedModel) {
	t.Helper()
	ctx := callCtx(t)
	md, err := f.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: um.name})
	if err != nil || fmt.Sprint(md.Inputs[0].Shape) != fmt.Sprint(um.inShape) || fmt.Sprint(md.Outputs[0].Shape) != fmt.Sprint(um.outShape) {
		t.Errorf("gRPC ModelMetadata: %v %v; want input %v, output %v", md, err, um.inShape, um.outShape)
	}
	_, hm, err := httpJSON(hc, "GET", url+"/v2/models/"+um.name, nil)
	if err != nil || fmt.Sprint(hm["inputs"]) != fmt.Sprintf("[map[datatype:FP32 name:%s shape:%v]]", um.input, um.inShape) {
		t.Errorf("HTTP metadata: %v %v; want input shape %v", hm, err, um.inShape)
	}
	cfg, err := f.client.ModelConfig(ctx, &pb.ModelConfigRequest{Name: um.name})
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Config; c.MaxBatchSize != 0 || fmt.Sprint(c.Input[0].Dims) != fmt.Sprint(um.inShape) ||
		fmt.Sprint(c.Output[0].Dims) != fmt.Sprint(um.outShape) || c.GetDynamicBatching() != nil {
		t.Errorf("gRPC ModelConfig: %v; want max_batch_size 0, dims %v -> %v, no dynamic batching", c, um.inShape, um.outShape)
	}
	_, hcfg, err := httpJSON(hc, "GET", url+"/v2/models/"+um.name+"/config", nil)
	in, _ := hcfg["input"].([]any)
	if err != nil || hcfg["max_batch_size"] != float64(0) || len(in) != 1 || fmt.Sprint(in[0].(map[string]any)["dims"]) != fmt.Sprint(um.inShape) || hcfg["dynamic_batching"] != nil {
		t.Errorf("HTTP config: %v %v; want max_batch_size 0, dims %v, no dynamic_batching", hcfg, err, um.inShape)
	}
}

// A batched model's configuration leaves the batch axis out of its dims and
// says max_batch_size N; its metadata shapes keep it as -1.
func TestBatchedModelDescriptions(t *testing.T) {
	f := start(t, options{})
	url, hc := f.serveHTTP(t, 0)
	_, hm, err := httpJSON(hc, "GET", url+"/v2/models/digits_mlp", nil)
	if err != nil || fmt.Sprint(hm["inputs"]) != "[map[datatype:FP32 name:input shape:[-1 64]]]" {
		t.Errorf("HTTP metadata: %v %v", hm["inputs"], err)
	}
	_, hcfg, err := httpJSON(hc, "GET", url+"/v2/models/digits_mlp/config", nil)
	in, _ := hcfg["input"].([]any)
	if err != nil || hcfg["max_batch_size"] != float64(64) || len(in) != 1 || fmt.Sprint(in[0].(map[string]any)["dims"]) != "[64]" || hcfg["dynamic_batching"] == nil {
		t.Errorf("HTTP config: %v %v; want max_batch_size 64, dims [64], dynamic_batching", hcfg, err)
	}
	md, err := f.client.ModelMetadata(callCtx(t), &pb.ModelMetadataRequest{Name: "digits_mlp"})
	if err != nil || fmt.Sprint(md.Inputs[0].Shape) != "[-1 64]" {
		t.Errorf("gRPC metadata: %v %v", md, err)
	}
}

// Stateful sequences are not served yet: a request with sequence_id,
// sequence_start or sequence_end is refused over both protocols (HTTP
// answered it statelessly, gRPC named whichever parameter its map gave
// first), with the same message naming every one given, sorted, every time.
func TestSequenceParametersRefusedAlike(t *testing.T) {
	f := start(t, options{})
	url, hc := f.serveHTTP(t, 0)
	ctx := callCtx(t)
	x := rows(1, 64)
	for _, c := range []struct {
		params []string
		want   string
	}{
		{[]string{"sequence_start", "sequence_id", "sequence_end", "priority"},
			`request parameters "sequence_end", "sequence_id", "sequence_start" are for stateful sequences, and model "digits_mlp" has no sequence batching (fw answers each request on its own); send the request without them`},
		{[]string{"sequence_id"},
			`request parameter "sequence_id" is for stateful sequences, and model "digits_mlp" has no sequence batching (fw answers each request on its own); send the request without it`},
		{[]string{"sequence_end", "sequence_start"},
			`request parameters "sequence_end", "sequence_start" are for stateful sequences, and model "digits_mlp" has no sequence batching (fw answers each request on its own); send the request without them`},
	} {
		gp := map[string]*pb.InferParameter{}
		hp := map[string]any{}
		for _, p := range c.params {
			switch p {
			case "sequence_id":
				gp[p] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 7}}
				hp[p] = 7
			case "priority": // the queue's: not a sequence parameter
				gp[p] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 1}}
				hp[p] = 1
			default:
				gp[p] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}
				hp[p] = true
			}
		}
		for i := 0; i < 50; i++ { // a map's order changes from call to call; the answer must not
			_, err := f.client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "digits_mlp", Parameters: gp,
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 64}}},
				RawInputContents: [][]byte{f32bytes(x)}})
			if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != c.want {
				t.Fatalf("gRPC with %v (try %d): %v\nwant InvalidArgument: %s", c.params, i, err, c.want)
			}
		}
		for i := 0; i < 5; i++ {
			code, v, err := httpJSON(hc, "POST", url+"/v2/models/digits_mlp/infer", map[string]any{"parameters": hp,
				"inputs": []any{map[string]any{"name": "input", "datatype": "FP32", "shape": []int{1, 64}, "data": x}}})
			if err != nil || code != 400 || v["error"] != c.want || v["code"] != "bad_request" {
				t.Fatalf("HTTP with %v: %d %v %v\nwant 400 bad_request: %s", c.params, code, v, err, c.want)
			}
		}
	}
	// Other parameters are still accepted, and nothing refused was counted.
	code, v, err := httpJSON(hc, "POST", url+"/v2/models/digits_mlp/infer", map[string]any{"parameters": map[string]any{"priority": 1},
		"inputs": []any{map[string]any{"name": "input", "datatype": "FP32", "shape": []int{1, 64}, "data": x}}})
	if err != nil || code != 200 {
		t.Fatalf("HTTP with priority: %d %v %v", code, v, err)
	}
	if snap := f.stats.Snapshot(); snap.Success.Count != 1 || snap.Fail.Count != 0 {
		t.Errorf("statistics: success %d, fail %d; want 1, 0", snap.Success.Count, snap.Fail.Count)
	}
}
