package grpcapi

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"math"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/modelhost"
	"github.com/fw-serve/fw/serving"
	"github.com/fw-serve/fw/sharedmem"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const deadline = 30 * time.Second

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fixture is a real fw gRPC front end on a loopback socket over a real
// model host, and a client connected to it.
type fixture struct {
	host    *modelhost.Host
	srv     *Server
	client  pb.GRPCInferenceServiceClient
	health  healthpb.HealthClient
	reg     *prometheus.Registry
	stats   *serving.Stats
	metrics *httpapi.Metrics // the host's, which an HTTP front end on it shares
	addr    string           // the server's host:port
}

type options struct {
	model   string // under testmodels.Dir, or an absolute path
	keys    []string
	maxRows int
	maxMsg  int
	slot    func(serving.Slot) serving.Slot // wraps the host's slot
	name    string                          // the served name (a repository's), else the file's
	shm     *sharedmem.Registry
	prepare func(*serving.Instance) error // edits the instance before it serves (a repository's labels)
	// unbatched serves the model as a configuration with max_batch_size 0
	// does, whatever axes its file has.
	unbatched bool
}

func start(t testing.TB, o options) *fixture {
	t.Helper()
	if o.model == "" {
		o.model = "digits_mlp.onnx"
	}
	reg := prometheus.NewRegistry()
	metrics := httpapi.NewMetrics(reg)
	path := o.model
	if !filepath.IsAbs(path) {
		path = filepath.Join(testmodels.Dir(t), o.model)
	}
	bc := batcher.DefaultConfig()
	bc.Unbatched = o.unbatched
	h := modelhost.New(modelhost.Config{Path: path, Engine: engine.Options{Threads: 1},
		Batcher: bc, SkipWarmup: true, Name: o.name, Prepare: o.prepare}, metrics, quietLog())
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("start the model host: %v", err)
	}
	var slot serving.Slot = h
	if o.slot != nil {
		slot = o.slot(h)
	}
	base, cancel := context.WithCancel(context.Background())
	srv := New(base, Config{MaxRows: o.maxRows, MaxMessageBytes: o.maxMsg, APIKeys: o.keys, Version: "test", SharedMemory: o.shm}, serving.One(slot), reg, quietLog())
	gs := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		<-served
		cancel()
		if err := h.Shutdown(context.Background(), deadline); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &fixture{host: h, srv: srv, client: pb.NewGRPCInferenceServiceClient(conn), health: healthpb.NewHealthClient(conn), reg: reg, stats: h.Current().Stats, metrics: metrics, addr: ln.Addr().String()}
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func rows(n, width int) []float32 {
	v := make([]float32, n*width)
	for i := range v {
		v[i] = float32(i%17) / 16
	}
	return v
}

// wantCode fails unless err is a status with code and a message containing hint.
func wantCode(t *testing.T, err error, code codes.Code, hint string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code || !strings.Contains(st.Message(), hint) {
		t.Fatalf("got %v, want %s with %q in the message", err, code, hint)
	}
}

// direct runs the model in-process, for the expected outputs.
func direct(t testing.TB, model string, in engine.Tensor) engine.Tensor {
	t.Helper()
	m, err := engine.Load(context.Background(), filepath.Join(testmodels.Dir(t), model), engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out, err := m.Run(context.Background(), []engine.Tensor{in})
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

func TestProbesMetadataConfig(t *testing.T) {
	f := start(t, options{})
	ctx := callCtx(t)
	if r, err := f.client.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Fatalf("ServerLive: %v %v", r, err)
	}
	if r, err := f.client.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || !r.Ready {
		t.Fatalf("ServerReady: %v %v", r, err)
	}
	if r, err := f.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: "digits_mlp"}); err != nil || !r.Ready {
		t.Fatalf("ModelReady: %v %v", r, err)
	}
	if r, err := f.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: "nope"}); err != nil || r.Ready {
		t.Fatalf("ModelReady of a model not served: %v %v, want not ready (as Triton)", r, err)
	}
	sm, err := f.client.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	if err != nil || sm.Name != "fw" || sm.Version != "test" || !strings.Contains(strings.Join(sm.Extensions, ","), "statistics") {
		t.Fatalf("ServerMetadata: %v %v", sm, err)
	}
	md, err := f.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "digits_mlp"})
	if err != nil || md.Platform != "onnxruntime_onnx" || len(md.Inputs) != 1 || md.Inputs[0].Datatype != "FP32" || len(md.Inputs[0].Shape) != 2 {
		t.Fatalf("ModelMetadata: %v %v", md, err)
	}
	_, err = f.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "digits_mlp", Version: "9"})
	wantCode(t, err, codes.NotFound, `version 9 is not found; this server serves version 1`)
	cfg, err := f.client.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "digits_mlp"})
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	bc := batcher.DefaultConfig()
	if c.Name != "digits_mlp" || c.Backend != "onnxruntime" || int(c.MaxBatchSize) != bc.MaxBatchRows ||
		c.Input[0].DataType != pb.DataType_TYPE_FP32 || len(c.Input[0].Dims) != 1 || c.Input[0].Dims[0] != 64 ||
		c.GetDynamicBatching().GetMaxQueueDelayMicroseconds() != uint64(bc.MaxDelay.Microseconds()) ||
		c.InstanceGroup[0].Kind != pb.ModelInstanceGroup_KIND_CPU || c.InstanceGroup[0].Count != 1 || c.DefaultModelFilename != "digits_mlp.onnx" {
		t.Fatalf("ModelConfig: %v", c)
	}
	hc, err := f.health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hc, err)
	}
	hc, err = f.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "inference.GRPCInferenceService"})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of the service: %v %v", hc, err)
	}
	_, err = f.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "other"})
	wantCode(t, err, codes.NotFound, "unknown service")
}

// TestInferRawAndTyped: the same rows sent as raw bytes and as typed
// contents give the engine's own outputs, and the statistics count them.
func TestInferRawAndTyped(t *testing.T) {
	f := start(t, options{})
	ctx := callCtx(t)
	x := rows(3, 64)
	want := direct(t, "digits_mlp.onnx", engine.FromFloat32([]int64{3, 64}, x))
	raw := &pb.ModelInferRequest{ModelName: "digits_mlp", Id: "r1",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{3, 64}}},
		RawInputContents: [][]byte{f32bytes(x)}}
	typed := &pb.ModelInferRequest{ModelName: "digits_mlp", ModelVersion: "1", Id: "t1",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{3, 64},
			Contents: &pb.InferTensorContents{Fp32Contents: x}}}}
	for _, req := range []*pb.ModelInferRequest{raw, typed} {
		r, err := f.client.ModelInfer(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", req.Id, err)
		}
		if r.Id != req.Id || r.ModelName != "digits_mlp" || len(r.Outputs) != 1 || len(r.RawOutputContents) != 1 {
			t.Fatalf("%s: response %v", req.Id, r)
		}
		o := r.Outputs[0]
		if o.Datatype != "FP32" || len(o.Shape) != 2 || o.Shape[0] != 3 || string(r.RawOutputContents[0]) != string(want.Data) {
			t.Fatalf("%s: output %v differs from the engine's %v", req.Id, o, want.Shape)
		}
	}
	// Asking for the output by name returns the same.
	raw.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}}
	if r, err := f.client.ModelInfer(ctx, raw); err != nil || string(r.RawOutputContents[0]) != string(want.Data) {
		t.Fatalf("named output: %v", err)
	}
	st, err := f.client.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "digits_mlp"})
	if err != nil {
		t.Fatal(err)
	}
	ms := st.ModelStats[0]
	is := ms.InferenceStats
	if is.Success.Count != 3 || is.Success.Ns == 0 || is.ComputeInfer.Count != 3 || is.Queue.Count != 3 ||
		ms.InferenceCount != 9 || ms.ExecutionCount != 3 || ms.LastInference == 0 || len(ms.BatchStats) != 1 || ms.BatchStats[0].BatchSize != 3 {
		t.Fatalf("statistics after 3 requests of 3 rows: %v", ms)
	}
	if n := testutil.ToFloat64(f.srv.metrics.requests.WithLabelValues("ModelInfer", "OK")); n != 3 {
		t.Fatalf("fw_grpc_requests_total{ModelInfer,OK} = %v, want 3", n)
	}
}

// TestInferINT64: an integer model (textcls) through typed and raw contents.
func TestInferINT64(t *testing.T) {
	f := start(t, options{model: "textcls.onnx"})
	ctx := callCtx(t)
	md, err := f.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "textcls"})
	if err != nil {
		t.Fatal(err)
	}
	in := md.Inputs[0]
	if in.Datatype != "INT64" {
		t.Fatalf("textcls input is %s, want INT64", in.Datatype)
	}
	width := in.Shape[1]
	tokens := make([]int64, 2*width)
	raw := make([]byte, 8*len(tokens))
	for i := range tokens {
		tokens[i] = int64(i % 50)
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(tokens[i]))
	}
	tin, _ := engine.NewTensor(engine.Int64, []int64{2, width})
	copy(tin.Data, raw)
	want := direct(t, "textcls.onnx", tin)
	for _, req := range []*pb.ModelInferRequest{
		{ModelName: "textcls", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: in.Name, Datatype: "INT64", Shape: []int64{2, width}}}, RawInputContents: [][]byte{raw}},
		{ModelName: "textcls", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: in.Name, Datatype: "INT64", Shape: []int64{2, width}, Contents: &pb.InferTensorContents{Int64Contents: tokens}}}},
	} {
		r, err := f.client.ModelInfer(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.RawOutputContents[0]) != string(want.Data) {
			t.Fatalf("textcls output differs from the engine's")
		}
	}
}

// TestInferErrors: every malformed request is answered with the status code
// matching the HTTP answer and a message that says how to fix it.
func TestInferErrors(t *testing.T) {
	f := start(t, options{maxRows: 8, maxMsg: 1 << 20})
	ctx := callCtx(t)
	in := func(dt string, shape ...int64) []*pb.ModelInferRequest_InferInputTensor {
		return []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: dt, Shape: shape}}
	}
	cases := []struct {
		name string
		req  *pb.ModelInferRequest
		code codes.Code
		hint string
	}{
		{"unknown model", &pb.ModelInferRequest{ModelName: "resnet"}, codes.NotFound, "Request for unknown model: 'resnet' is not found"},
		{"no inputs", &pb.ModelInferRequest{ModelName: "digits_mlp"}, codes.InvalidArgument, `input "input" is missing`},
		{"unknown input", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 64}}}}, codes.InvalidArgument, `unknown input "x"`},
		{"wrong datatype", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("INT64", 1, 64), RawInputContents: [][]byte{make([]byte, 512)}}, codes.InvalidArgument, "this model takes FP32"},
		{"unknown datatype", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP8", 1, 64)}, codes.InvalidArgument, "not one of the protocol's (BOOL, UINT8"},
		{"another datatype", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("BYTES", 1, 64)}, codes.InvalidArgument, "has datatype BYTES but this model takes FP32"},
		{"raw size", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP32", 1, 64), RawInputContents: [][]byte{make([]byte, 100)}}, codes.InvalidArgument, "needs 256 bytes"},
		{"raw count", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP32", 1, 64), RawInputContents: [][]byte{{}, {}}}, codes.InvalidArgument, "2 entries for 1 inputs"},
		{"typed count", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 64}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1}}}}}, codes.InvalidArgument, "needs 64 elements"},
		{"typed wrong field", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 1}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1}, Int64Contents: []int64{1}}}}}, codes.InvalidArgument, "other than fp32_contents"},
		{"wrong shape", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP32", 1, 63), RawInputContents: [][]byte{make([]byte, 252)}}, codes.InvalidArgument, "input"},
		{"negative dim", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP32", -1, 64)}, codes.InvalidArgument, "negative dimension"},
		{"overflowing shape", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP32", math.MaxInt64, math.MaxInt64, 64), RawInputContents: [][]byte{{1}}}, codes.InvalidArgument, "bytes"},
		{"too many axes", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP32", make([]int64, 40)...)}, codes.InvalidArgument, "at most 32"},
		{"rows over --max-rows", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP32", 9, 64), RawInputContents: [][]byte{make([]byte, 9*256)}}, codes.ResourceExhausted, "--max-rows"},
		{"message over the limit", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP32", 8, 64), RawInputContents: [][]byte{make([]byte, 2<<20)}}, codes.ResourceExhausted, "larger than max"},
		{"unknown output", &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP32", 1, 64), RawInputContents: [][]byte{make([]byte, 256)}, Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "probs"}}}, codes.InvalidArgument, `unknown output "probs"`},
		{"shared memory", &pb.ModelInferRequest{ModelName: "digits_mlp", Parameters: map[string]*pb.InferParameter{"shared_memory_region": {}}}, codes.InvalidArgument, "not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.client.ModelInfer(ctx, c.req)
			wantCode(t, err, c.code, c.hint)
		})
	}
	// Still serving after all of them.
	if _, err := f.client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP32", 1, 64), RawInputContents: [][]byte{make([]byte, 256)}}); err != nil {
		t.Fatal(err)
	}
	st, _ := f.client.ModelStatistics(ctx, &pb.ModelStatisticsRequest{})
	if st.ModelStats[0].InferenceStats.Success.Count != 1 {
		t.Fatalf("statistics count refused requests as successes: %v", st.ModelStats[0].InferenceStats)
	}
}

func TestAPIKeys(t *testing.T) {
	f := start(t, options{keys: []string{"k1"}})
	ctx := callCtx(t)
	req := &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 64}}}, RawInputContents: [][]byte{make([]byte, 256)}}
	_, err := f.client.ModelInfer(ctx, req)
	wantCode(t, err, codes.Unauthenticated, "needs an API key")
	_, err = f.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "digits_mlp"})
	wantCode(t, err, codes.Unauthenticated, "needs an API key")
	_, err = f.client.ModelInfer(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer k2"), req)
	wantCode(t, err, codes.Unauthenticated, "not valid")
	if _, err := f.client.ModelInfer(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer k1"), req); err != nil {
		t.Fatalf("with the key: %v", err)
	}
	// Probes stay open.
	if _, err := f.client.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil {
		t.Fatalf("ServerReady without a key: %v", err)
	}
	if _, err := f.health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health without a key: %v", err)
	}
}

// TestDrainingTurnsProbesNotReady: after the shutdown began, readiness and
// health say so while inference is still answered.
func TestDrainingTurnsProbesNotReady(t *testing.T) {
	f := start(t, options{})
	ctx := callCtx(t)
	watch := watchServing(t, f, ctx)
	f.host.BeginShutdown()
	if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch after BeginShutdown: %v %v", r, err)
	}
	if r, _ := f.client.ServerReady(ctx, &pb.ServerReadyRequest{}); r.Ready {
		t.Fatal("ServerReady stays true while draining")
	}
	if hc, _ := f.health.Check(ctx, &healthpb.HealthCheckRequest{}); hc.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health while draining: %v", hc.Status)
	}
	if _, err := f.client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 64}}}, RawInputContents: [][]byte{make([]byte, 256)}}); err != nil {
		t.Fatalf("inference while draining: %v", err)
	}
}

// watchServing starts a health Watch and checks its first status is SERVING.
func watchServing(t *testing.T, f *fixture, ctx context.Context) healthpb.Health_WatchClient {
	t.Helper()
	watch, err := f.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch status: %v %v", r, err)
	}
	return watch
}

func TestStream(t *testing.T) {
	f := start(t, options{})
	ctx := callCtx(t)
	stream, err := f.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	good := func(id string) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "digits_mlp", Id: id, Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 64}}}, RawInputContents: [][]byte{f32bytes(rows(1, 64))}}
	}
	bad := &pb.ModelInferRequest{ModelName: "digits_mlp", Id: "bad", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 64}}}, RawInputContents: [][]byte{{1, 2}}}
	for _, r := range []*pb.ModelInferRequest{good("a"), bad, good("b"), good("c")} {
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[r.InferResponse.GetId()] = r.ErrorMessage
		if r.ErrorMessage == "" && len(r.InferResponse.RawOutputContents) != 1 {
			t.Fatalf("stream response %v has no output", r)
		}
	}
	if len(got) != 4 || got["a"] != "" || got["b"] != "" || got["c"] != "" || !strings.Contains(got["bad"], "needs 256 bytes") {
		t.Fatalf("stream answers by id: %v", got)
	}
}

// panickySlot panics on its n-th Current call: a stand-in for a bug in a
// handler, to prove the recovery net.
type panickySlot struct {
	serving.Slot
	calls, at atomic.Int32
}

func (p *panickySlot) Current() *serving.Instance {
	if p.calls.Add(1) == p.at.Load() {
		panic("deliberate test panic")
	}
	return p.Slot.Current()
}

// TestPanicIsRecovered: a panicking call is answered INTERNAL, counted, and
// the server goes on serving, on a unary call and on a stream.
func TestPanicIsRecovered(t *testing.T) {
	var ps *panickySlot
	f := start(t, options{slot: func(s serving.Slot) serving.Slot { ps = &panickySlot{Slot: s}; return ps }})
	ctx := callCtx(t)
	ps.at.Store(ps.calls.Load() + 1)
	_, err := f.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "digits_mlp"})
	wantCode(t, err, codes.Internal, "because of a bug")
	if _, err := f.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "digits_mlp"}); err != nil {
		t.Fatalf("after the panic: %v", err)
	}
	stream, err := f.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ps.at.Store(ps.calls.Load() + 1)
	if err := stream.Send(&pb.ModelInferRequest{ModelName: "digits_mlp", Id: "p"}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil || r.InferResponse.GetId() != "p" || !strings.Contains(r.ErrorMessage, "because of a bug") {
		t.Fatalf("stream answer to a panicking request: %v %v", r, err)
	}
	stream.CloseSend()
	if n := testutil.ToFloat64(f.srv.metrics.panics); n != 2 {
		t.Fatalf("fw_grpc_panics_total = %v, want 2", n)
	}
}

// TestBeginShutdownEndsStreams: a health watch and an idle inference stream
// end when the shutdown begins, so a graceful stop does not wait for their
// clients; a request in flight on the stream is still answered.
func TestBeginShutdownEndsStreams(t *testing.T) {
	f := start(t, options{})
	ctx := callCtx(t)
	watch := watchServing(t, f, ctx)
	stream, err := f.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.ModelInferRequest{ModelName: "digits_mlp", Id: "before", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 64}}}, RawInputContents: [][]byte{make([]byte, 256)}}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.InferResponse.GetId() != "before" || r.ErrorMessage != "" {
		t.Fatalf("answer before the shutdown: %v %v", r, err)
	}
	f.srv.BeginShutdown()
	for {
		r, err := watch.Recv()
		if err != nil {
			wantCode(t, err, codes.Unavailable, "shutting down")
			break
		}
		if r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("watch after BeginShutdown: %v", r.Status)
		}
	}
	_, err = stream.Recv()
	wantCode(t, err, codes.Unavailable, "shutting down")
	f.srv.BeginShutdown() // idempotent
}

// Triton's sentences where its clients and examples match them: mixed raw
// and typed contents, a version string that is not a number, a repeated
// output.
func TestTritonSentences(t *testing.T) {
	f := start(t, options{})
	ctx := callCtx(t)
	in := &pb.ModelInferRequest_InferInputTensor{Name: "input", Datatype: "FP32", Shape: []int64{1, 64},
		Contents: &pb.InferTensorContents{Fp32Contents: make([]float32, 64)}}
	_, err := f.client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: []*pb.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{make([]byte, 256)}})
	wantCode(t, err, codes.InvalidArgument, "contents field must not be specified when using raw_input_contents for 'input' for model 'digits_mlp'")
	raw := &pb.ModelInferRequest_InferInputTensor{Name: "input", Datatype: "FP32", Shape: []int64{1, 64}}
	_, err = f.client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "digits_mlp", ModelVersion: "wrong_specification", Inputs: []*pb.ModelInferRequest_InferInputTensor{raw}, RawInputContents: [][]byte{make([]byte, 256)}})
	wantCode(t, err, codes.NotFound, "failed to get model version from specified version string 'wrong_specification'")
	out := &pb.ModelInferRequest_InferRequestedOutputTensor{Name: "logits"}
	_, err = f.client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: []*pb.ModelInferRequest_InferInputTensor{raw}, RawInputContents: [][]byte{make([]byte, 256)},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{out, out}})
	wantCode(t, err, codes.InvalidArgument, "output 'logits' already exists in request")
}
