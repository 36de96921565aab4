// Package grpcapi is the model server's gRPC front end: the Open Inference
// Protocol's GRPCInferenceService (KServe V2, as Triton serves it) with
// Triton's ModelConfig and ModelStatistics calls, and gRPC health checking
// (grpc.health.v1) for orchestrators' probes. Requests take the same path as
// HTTP ones (serving.Infer: the batcher, then the engine), under the same
// limits and API keys, and are recorded in the same statistics. Messages may
// be compressed with gzip or deflate, and are answered in the encoding of the
// request (compress.go).
package grpcapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/payloadlog"
	"github.com/fw-serve/fw/reqtrace"
	"github.com/fw-serve/fw/serving"
	"github.com/fw-serve/fw/sharedmem"
	"github.com/fw-serve/fw/telemetry"
)

// Config holds the gRPC front end's limits and options.
type Config struct {
	// MaxMessageBytes bounds a request message (ResourceExhausted beyond it),
	// as --max-body-bytes bounds an HTTP body: as sent, and decompressed
	// when it is compressed (compress.go).
	MaxMessageBytes int
	// MaxRows bounds the first axis of every input (ResourceExhausted).
	MaxRows int
	// Timeout bounds one request's wait for its result, as over HTTP; a
	// shorter client deadline wins.
	Timeout time.Duration
	// APIKeys, when any, are required on every inference and metadata call
	// as the metadata "authorization: Bearer KEY"; liveness, readiness and
	// health checks stay open.
	APIKeys []string
	// Version is the fw version ServerMetadata reports.
	Version string
	// Name is the server's name in ServerMetadata (tritonserver's --id);
	// "" is "fw".
	Name string
	// ForwardHeaders picks the call metadata that reaches the model as
	// request parameters (--grpc-header-forward-pattern); nil forwards none.
	ForwardHeaders *regexp.Regexp
	// StreamConcurrency bounds the requests of one ModelStreamInfer stream
	// in flight at once.
	StreamConcurrency int
	// MaxStreams bounds the concurrent calls on one HTTP/2 connection (grpc-go
	// leaves it unbounded), so one client connection cannot hold an unbounded
	// number of decoded messages.
	MaxStreams int
	// SharedMemory is the system shared memory registry (shared with the
	// HTTP front end); nil turns the extension off.
	SharedMemory *sharedmem.Registry
	// Tracer is Triton's trace extension (the TraceSetting call) and the
	// sampler answered requests are recorded to; nil: not served.
	Tracer *reqtrace.Tracer
	// Telemetry, when set, traces calls (OpenTelemetry: a W3C traceparent
	// in the call's metadata is the parent); a stream's requests are traced
	// one by one. Nil traces none.
	Telemetry *telemetry.Tracer
	// Payloads, when set, logs a sample of the inferences (payloadlog).
	Payloads *payloadlog.Logger
	// Logging is Triton's logging extension (the LogSettings call); nil
	// answers UNIMPLEMENTED.
	Logging *serving.LogSettings
	// Restricted are the API categories that need a header
	// (--grpc-restricted-protocol, tritonserver's flag; the header is the
	// key with the prefix "triton-grpc-protocol-", as Triton reads it).
	Restricted serving.Restrictions
}

// Server implements the inference and health services over the models served.
type Server struct {
	pb.UnimplementedGRPCInferenceServiceServer
	healthpb.UnimplementedHealthServer

	cfg     Config
	models  serving.Models
	log     *slog.Logger
	base    context.Context
	keys    serving.Keys
	metrics *metrics
	// closing is closed by BeginShutdown: long-lived streams (health
	// watches, inference streams) end so that a graceful stop need not wait
	// for their clients.
	closing   chan struct{}
	closeOnce sync.Once
}

// New creates the front end over models (shared with the HTTP front end).
// base is cancelled on shutdown and bounds every request; the gRPC metrics
// are registered on reg.
func New(base context.Context, cfg Config, models serving.Models, reg prometheus.Registerer, log *slog.Logger) *Server {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = 64 << 20
	}
	if cfg.StreamConcurrency <= 0 {
		cfg.StreamConcurrency = 64
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 256
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Name == "" {
		cfg.Name = "fw"
	}
	s := &Server{cfg: cfg, models: models, log: log, base: base, metrics: newMetrics(reg), closing: make(chan struct{}),
		keys: serving.NewKeys(cfg.APIKeys)}
	return s
}

// streamWorkers is how many calls at once run on grpc-go's long-lived
// stream workers, whose stacks have grown to what a call needs; past
// them, each call gets a fresh goroutine. With one worker per CPU, 16
// concurrent ModelInfer calls spent 14 % of fw's CPU in runtime.copystack;
// with 256, 1-1.6 µs less per call at fw serve's --gc-percent 400, though
// more at Go's default 100, whose collections shrink a parked worker's
// stack before each call grows it again (docs/benchmarks.md). An idle
// worker is a parked goroutine: 256 of them hold a few MiB of stacks.
const streamWorkers = 256

// ServerOptions are the grpc.Server options the front end needs: its
// message size and per-connection stream limits and its interceptors (panic
// recovery, API keys, metrics).
func (s *Server) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(1 << 30),
		grpc.MaxConcurrentStreams(uint32(s.cfg.MaxStreams)),
		grpc.NumStreamWorkers(uint32(max(runtime.GOMAXPROCS(0), streamWorkers))),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
	}
}

// BeginShutdown ends the long-lived streams: a health Watch ends after
// telling NOT_SERVING, an inference stream stops reading requests and ends
// once the ones in flight are answered. Call it before grpc.Server's
// GracefulStop, which otherwise waits for clients to close them.
func (s *Server) BeginShutdown() { s.closeOnce.Do(func() { close(s.closing) }) }

// Register adds the inference and health services to gs.
func (s *Server) Register(gs *grpc.Server) {
	pb.RegisterGRPCInferenceServiceServer(gs, s)
	healthpb.RegisterHealthServer(gs, s)
}

// open are the calls that need no API key: probes.
var open = map[string]bool{
	"/inference.GRPCInferenceService/ServerLive":  true,
	"/inference.GRPCInferenceService/ServerReady": true,
	"/inference.GRPCInferenceService/ModelReady":  true,
	"/grpc.health.v1.Health/Check":                true,
	"/grpc.health.v1.Health/Watch":                true,
	"/grpc.health.v1.Health/List":                 true,
}

// methodCategory is the API category of a call, as Triton's
// --grpc-restricted-protocol names them.
func methodCategory(method string) string {
	name := method[strings.LastIndexByte(method, '/')+1:]
	switch {
	case strings.HasPrefix(method, "/grpc.health.v1."), name == "ServerLive", name == "ServerReady", name == "ModelReady":
		return "health"
	case name == "ServerMetadata", name == "ModelMetadata":
		return "metadata"
	case name == "ModelInfer", name == "ModelStreamInfer":
		return "inference"
	case name == "ModelConfig":
		return "model-config"
	case name == "ModelStatistics":
		return "statistics"
	case strings.HasPrefix(name, "Repository"):
		return "model-repository"
	case strings.HasSuffix(name, "SharedMemoryStatus"), strings.HasSuffix(name, "SharedMemoryRegister"), strings.HasSuffix(name, "SharedMemoryUnregister"):
		return "shared-memory"
	case name == "TraceSetting":
		return "trace"
	case name == "LogSettings":
		return "logging"
	}
	return ""
}

// restrictedPrefix is what Triton puts before a restricted protocol's
// header key in the call's metadata.
const restrictedPrefix = "triton-grpc-protocol-"

// authorize checks the restricted protocols' headers, then the Bearer key
// in constant time when keys are configured.
func (s *Server) authorize(ctx context.Context, method string) error {
	if s.cfg.Restricted.Any() {
		md, _ := metadata.FromIncomingContext(ctx)
		get := func(k string) string {
			if v := md.Get(k); len(v) > 0 {
				return v[0]
			}
			return ""
		}
		if missing := s.cfg.Restricted.Check(methodCategory(method), restrictedPrefix, get); missing != "" {
			return status.Errorf(codes.PermissionDenied, "This protocol is restricted, expecting header '%s' (fw serve --grpc-restricted-protocol restricts the %s protocol)", missing, methodCategory(method))
		}
	}
	if !s.keys.Required() || open[method] {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, h := range md.Get("authorization") {
		switch s.keys.Check([]byte(h)) {
		case serving.KeyValid:
			return nil
		case serving.KeyInvalid:
			return status.Error(codes.Unauthenticated, "the API key is not valid")
		}
	}
	return status.Error(codes.Unauthenticated, `this call needs an API key: send the metadata "authorization: Bearer <key>" (tritonclient: headers={"authorization": "Bearer <key>"})`)
}

// recovered turns a panic into an Internal status, logged and counted: the
// last net under every call, so one missed check cannot end the process.
func (s *Server) recovered(method string, r any, err *error) {
	s.metrics.panics.Inc()
	s.log.Error("panic while serving a gRPC call; answered INTERNAL", "method", method, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	*err = status.Error(codes.Internal, "the server failed on this call because of a bug (it was logged); the call may succeed if retried, and please report it")
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	start := time.Now()
	span := s.startSpan(ctx, start)
	ctx = telemetry.With(ctx, span)
	defer func() {
		if r := recover(); r != nil {
			resp = nil
			s.recovered(info.FullMethod, r, &err)
		}
		s.metrics.observe(info.FullMethod, status.Code(err), time.Since(start), traceID(span))
		endSpan(span, info.FullMethod, err)
	}()
	if err := s.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			s.recovered(info.FullMethod, r, &err)
		}
		s.metrics.observe(info.FullMethod, status.Code(err), time.Since(start), "")
	}()
	if err := s.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// ServerLive implements GRPCInferenceService: the process answers.
func (s *Server) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

// ready reports whether the server is ready (not draining) with the
// models it must serve.
func (s *Server) ready() bool {
	st, _ := s.models.State()
	return st == serving.StateReady
}

// ServerReady implements GRPCInferenceService: the model is loaded, warm and
// not draining.
func (s *Server) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: s.ready()}, nil
}

// model returns the serving instance of name (and version, if given).
func (s *Server) model(name, version string) (*serving.Instance, error) {
	inst, err := s.models.Get(name, version)
	if err != nil {
		return nil, modelStatus(err)
	}
	return inst, nil
}

// modelStatus maps a failure to find, load or unload a model
// (*serving.ModelError) to a status whose code matches the HTTP answer's.
func modelStatus(err error) error {
	me, ok := serving.AsModelError(err)
	if !ok {
		return status.Error(codes.Internal, err.Error())
	}
	switch me.Kind {
	case serving.ModelUnknown:
		return status.Error(codes.NotFound, me.Message)
	case serving.ModelNotReady:
		return status.Error(codes.Unavailable, me.Message)
	case serving.ModelControlDisabled:
		// Triton's status for a load or unload outside explicit mode
		// (python_grpc_aio_test matches it); HTTP answers 400.
		return status.Error(codes.Unavailable, me.Message)
	case serving.ModelRepositoryFailed:
		return status.Error(codes.Internal, me.Message)
	}
	return status.Error(codes.InvalidArgument, me.Message)
}

// ModelReady implements GRPCInferenceService.
func (s *Server) ModelReady(ctx context.Context, req *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	if err := s.models.Probe(ctx, req.GetName(), req.GetVersion()); err != nil {
		if msg, ok := serving.FailedCheck(err); ok {
			s.log.Warn(msg) // a model's own check failed, as Triton logs it
		}
		err = modelStatus(err)
		if c := status.Code(err); c == codes.Unavailable || c == codes.NotFound {
			// As Triton: a model that is not loaded is not ready, not an error.
			return &pb.ModelReadyResponse{Ready: false}, nil
		}
		return nil, err
	}
	st, _ := s.models.State()
	return &pb.ModelReadyResponse{Ready: st.Serving()}, nil
}

// ServerMetadata implements GRPCInferenceService.
func (s *Server) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: s.cfg.Name, Version: s.cfg.Version, Extensions: serving.Extensions()}, nil
}

func tensorMetas(specs []engine.TensorSpec) []*pb.ModelMetadataResponse_TensorMetadata {
	out := make([]*pb.ModelMetadataResponse_TensorMetadata, len(specs))
	for i, sp := range specs {
		out[i] = &pb.ModelMetadataResponse_TensorMetadata{Name: sp.Name, Datatype: serving.DatatypeName(sp.DType), Shape: append([]int64{}, sp.Shape...)}
	}
	return out
}

// ModelMetadata implements GRPCInferenceService.
func (s *Server) ModelMetadata(_ context.Context, req *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	inst, err := s.model(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	return &pb.ModelMetadataResponse{
		Name: inst.Name(), Versions: []string{inst.Version()}, Platform: inst.Config.Platform,
		Inputs: tensorMetas(inst.Inputs()), Outputs: tensorMetas(inst.Outputs()),
	}, nil
}

// ModelConfig implements GRPCInferenceService (Triton's extension).
func (s *Server) ModelConfig(_ context.Context, req *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	inst, err := s.model(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	return &pb.ModelConfigResponse{Config: configPB(inst.Config)}, nil
}

// configPB renders a model configuration as Triton's ModelConfig message.
func configPB(c serving.ModelConfig) *pb.ModelConfig {
	dtype := func(t serving.TensorConfig) pb.DataType { return pb.DataType(pb.DataType_value[t.DataType]) }
	reshape := func(t serving.TensorConfig) *pb.ModelTensorReshape {
		if t.Reshape == nil {
			return nil
		}
		return &pb.ModelTensorReshape{Shape: t.Reshape}
	}
	var ins []*pb.ModelInput
	for _, t := range c.Inputs {
		ins = append(ins, &pb.ModelInput{Name: t.Name, DataType: dtype(t), Dims: t.Dims, Reshape: reshape(t),
			Format: pb.ModelInput_Format(pb.ModelInput_Format_value[t.Format]), Optional: t.Optional, AllowRaggedBatch: t.AllowRaggedBatch})
	}
	var outs []*pb.ModelOutput
	for _, t := range c.Outputs {
		outs = append(outs, &pb.ModelOutput{Name: t.Name, DataType: dtype(t), Dims: t.Dims, Reshape: reshape(t), LabelFilename: t.LabelFilename})
	}
	group := &pb.ModelInstanceGroup{Name: c.Name, Count: int32(c.Instances), Kind: pb.ModelInstanceGroup_KIND_CPU}
	if c.InstanceKind == "KIND_GPU" || len(c.GPUs) > 0 {
		group.Kind = pb.ModelInstanceGroup_KIND_GPU
		for _, g := range c.GPUs {
			group.Gpus = append(group.Gpus, int32(g))
		}
	}
	policy := &pb.ModelVersionPolicy{PolicyChoice: &pb.ModelVersionPolicy_Latest_{Latest: &pb.ModelVersionPolicy_Latest{NumVersions: 1}}}
	if p, ok := c.VersionPolicy["latest"].(map[string]any); ok {
		if n, ok := p["num_versions"].(int); ok {
			policy.PolicyChoice = &pb.ModelVersionPolicy_Latest_{Latest: &pb.ModelVersionPolicy_Latest{NumVersions: uint32(n)}}
		}
	} else if _, ok := c.VersionPolicy["all"]; ok {
		policy.PolicyChoice = &pb.ModelVersionPolicy_All_{All: &pb.ModelVersionPolicy_All{}}
	} else if p, ok := c.VersionPolicy["specific"].(map[string]any); ok {
		vs, _ := p["versions"].([]int64)
		policy.PolicyChoice = &pb.ModelVersionPolicy_Specific_{Specific: &pb.ModelVersionPolicy_Specific{Versions: vs}}
	}
	var params map[string]*pb.ModelParameter
	for k, v := range c.Parameters {
		if params == nil {
			params = map[string]*pb.ModelParameter{}
		}
		params[k] = &pb.ModelParameter{StringValue: v}
	}
	cfg := &pb.ModelConfig{
		Name: c.Name, Platform: c.Platform, Backend: c.Backend, MaxBatchSize: int32(c.MaxBatchSize),
		Input: ins, Output: outs, InstanceGroup: []*pb.ModelInstanceGroup{group}, VersionPolicy: policy,
		DefaultModelFilename: c.DefaultModelFilename, Parameters: params,
		ModelTransactionPolicy: &pb.ModelTransactionPolicy{Decoupled: c.Decoupled},
		ResponseCache:          &pb.ModelResponseCache{Enable: c.ResponseCache},
	}
	for _, bi := range c.BatchInputs {
		cfg.BatchInput = append(cfg.BatchInput, &pb.BatchInput{Kind: pb.BatchInput_Kind(pb.BatchInput_Kind_value[bi.Kind]),
			TargetName: bi.TargetNames, DataType: pb.DataType(pb.DataType_value[bi.DataType]), SourceInput: bi.SourceInputs})
	}
	for _, bo := range c.BatchOutputs {
		cfg.BatchOutput = append(cfg.BatchOutput, &pb.BatchOutput{Kind: pb.BatchOutput_Kind(pb.BatchOutput_Kind_value[bo.Kind]),
			TargetName: bo.TargetNames, SourceInput: bo.SourceInputs})
	}
	if c.Ensemble != nil {
		es := &pb.ModelEnsembling{}
		for _, st := range c.Ensemble {
			es.Step = append(es.Step, &pb.ModelEnsembling_Step{ModelName: st.Model, ModelVersion: st.Version, InputMap: st.InputMap, OutputMap: st.OutputMap})
		}
		cfg.SchedulingChoice = &pb.ModelConfig_EnsembleScheduling{EnsembleScheduling: es}
		cfg.InstanceGroup = nil // no engine instances of its own
	} else if c.SequenceBatching != nil {
		cfg.SchedulingChoice = &pb.ModelConfig_SequenceBatching{SequenceBatching: sequenceBatchingPB(c.SequenceBatching)}
	} else if c.MaxBatchSize > 0 { // max_batch_size 0 turns dynamic batching off, as in Triton
		db := queuesPB(c.Queues)
		db.MaxQueueDelayMicroseconds, db.PreferredBatchSize = uint64(max(c.MaxQueueDelay, 0)), int32s(c.PreferredBatchSizes)
		db.PreserveOrdering = c.PreserveOrdering
		cfg.SchedulingChoice = &pb.ModelConfig_DynamicBatching{DynamicBatching: db}
	}
	return cfg
}

// queuesPB is dynamic_batching with the priority levels and queue
// policies of their JSON form (serving.ModelConfig.Queues, the one the
// HTTP configuration shows, so both say the same).
func queuesPB(m map[string]any) *pb.ModelDynamicBatching {
	db := &pb.ModelDynamicBatching{}
	if m == nil {
		return db
	}
	b, err := json.Marshal(m)
	if err == nil {
		err = protojson.Unmarshal(b, db)
	}
	if err != nil { // fw wrote m: a bug, reported rather than hidden
		panic(fmt.Sprintf("grpcapi: dynamic_batching's queues %s: %v", b, err))
	}
	return db
}

// sequenceBatchingPB is sequence_batching from its JSON form (the one the
// HTTP configuration shows, so both say the same).
func sequenceBatchingPB(m map[string]any) *pb.ModelSequenceBatching {
	sb := &pb.ModelSequenceBatching{}
	b, err := json.Marshal(m)
	if err == nil {
		err = protojson.Unmarshal(b, sb)
	}
	if err != nil {
		panic("grpcapi: sequence_batching does not render: " + err.Error()) // built by modelrepo from a parsed configuration
	}
	return sb
}

func int32s(v []int64) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

func durationPB(d serving.Duration) *pb.StatisticDuration {
	return &pb.StatisticDuration{Count: d.Count, Ns: d.NS}
}

// ModelStatistics implements GRPCInferenceService (Triton's extension):
// a model's statistics, or every loaded model's for an empty name.
func (s *Server) ModelStatistics(_ context.Context, req *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	if req.GetName() == "" {
		resp := &pb.ModelStatisticsResponse{}
		for _, inst := range s.models.Loaded() {
			resp.ModelStats = append(resp.ModelStats, statsPB(inst))
		}
		return resp, nil
	}
	if all := serving.Versions(s.models, req.GetName()); req.GetVersion() == "" && len(all) > 0 {
		resp := &pb.ModelStatisticsResponse{}
		for _, inst := range all { // every loaded version, as Triton's
			resp.ModelStats = append(resp.ModelStats, statsPB(inst))
		}
		return resp, nil
	}
	inst, err := s.model(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	return &pb.ModelStatisticsResponse{ModelStats: []*pb.ModelStatistics{statsPB(inst)}}, nil
}

// statsPB is one model version's statistics as Triton's message.
func statsPB(inst *serving.Instance) *pb.ModelStatistics {
	snap := inst.Stats.Snapshot()
	ms := &pb.ModelStatistics{
		Name: inst.Name(), Version: inst.Version(),
		LastInference: snap.LastInference, InferenceCount: snap.InferenceCount, ExecutionCount: snap.ExecutionCount,
		InferenceStats: &pb.InferStatistics{
			Success: durationPB(snap.Success), Fail: durationPB(snap.Fail), Queue: durationPB(snap.Queue),
			ComputeInput: durationPB(snap.ComputeInput), ComputeInfer: durationPB(snap.ComputeInfer),
			ComputeOutput: durationPB(snap.ComputeOutput), CacheHit: durationPB(snap.CacheHit), CacheMiss: durationPB(snap.CacheMiss),
		},
	}
	for _, b := range snap.Batches {
		ms.BatchStats = append(ms.BatchStats, &pb.InferBatchStatistics{
			BatchSize: b.BatchSize, ComputeInput: durationPB(b.ComputeInput), ComputeInfer: durationPB(b.ComputeInfer), ComputeOutput: durationPB(b.ComputeOutput),
		})
	}
	return ms
}

// ModelInfer implements GRPCInferenceService: one inference request.
func (s *Server) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	return s.infer(ctx, req)
}

// admission is a request's model instance, its decoded inputs and, for a
// stateful model, its place in its sequence, or why it has none.
type admission struct {
	inst   *serving.Instance
	dec    *request
	ticket *serving.SequenceTicket
	seq    serving.SequenceParams
	params serving.Parameters // its other parameters and forwarded metadata, for its model
	err    error
}

// admit finds a request's model, decodes it and admits it to its sequence.
// A stream admits the requests that name a sequence in the order they
// arrive, before running them concurrently, so that the requests of one
// sequence run in stream order; a request refused here (a wrong input) has
// not entered its sequence, as in Triton.
func (s *Server) admit(ctx context.Context, req *pb.ModelInferRequest) admission {
	inst, err := s.model(req.GetModelName(), req.GetModelVersion())
	if err != nil {
		return admission{err: err}
	}
	if st, reason := s.models.State(); !st.Serving() {
		return admission{err: status.Errorf(codes.Unavailable, "the server is not ready (%s: %s); retry", st, reason)}
	}
	dec, err := decode(req, inst.Inputs(), inst.Outputs(), serving.RowLimit(inst, s.cfg.MaxRows), s.cfg.SharedMemory)
	if err != nil {
		return admission{err: err}
	}
	admitted := false
	defer func() {
		if !admitted {
			dec.holds.Release()
		}
	}()
	var p serving.SequenceParams
	for name, v := range req.GetParameters() {
		if _, err := p.Set(name, paramValue(v)); err != nil {
			return admission{err: status.Error(codes.InvalidArgument, err.Error())}
		}
	}
	params, err := s.modelParameters(ctx, req)
	if err != nil {
		return admission{err: status.Error(codes.InvalidArgument, err.Error())}
	}
	ticket, err := serving.EnterSequence(inst, p, dec.inputs)
	if err != nil {
		return admission{err: s.inferError(ctx, err)}
	}
	admitted = true
	return admission{inst: inst, dec: dec, ticket: ticket, seq: p, params: params}
}

// release ends an admission: its place in its sequence and the shared
// memory regions its request holds. It may be called more than once.
func (a *admission) release() {
	a.ticket.Release()
	if a.dec != nil {
		a.dec.holds.Release()
	}
}

// admitRecovered is admit for a stream's reading loop: a panic (a bug)
// fails the request, not the stream.
func (s *Server) admitRecovered(ctx context.Context, req *pb.ModelInferRequest) (a admission) {
	defer func() {
		if r := recover(); r != nil {
			var perr error
			s.recovered("/inference.GRPCInferenceService/ModelStreamInfer", r, &perr)
			a = admission{err: perr}
		}
	}()
	return s.admit(ctx, req)
}

// paramValue is a request parameter's value as serving.SequenceParams.Set
// reads it.
func paramValue(v *pb.InferParameter) any {
	switch c := v.GetParameterChoice().(type) {
	case *pb.InferParameter_BoolParam:
		return c.BoolParam
	case *pb.InferParameter_Int64Param:
		return c.Int64Param
	case *pb.InferParameter_Uint64Param:
		return c.Uint64Param
	case *pb.InferParameter_StringParam:
		return c.StringParam
	case *pb.InferParameter_DoubleParam:
		return serving.OtherValue("a double_param")
	}
	return serving.OtherValue("an empty parameter")
}

// infer serves one request from ModelInfer.
func (s *Server) infer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	began := time.Now()
	return s.inferAdmitted(ctx, req, s.admit(ctx, req), began)
}

// inferAdmitted serves one admitted request (a ModelInfer call, or one
// request of a stream).
func (s *Server) inferAdmitted(ctx context.Context, req *pb.ModelInferRequest, a admission, began time.Time) (*pb.ModelInferResponse, error) {
	defer a.release()
	if a.err != nil {
		return nil, a.err
	}
	inst, dec := a.inst, a.dec
	ctx, cancelDL := beforeDeadline(ctx)
	defer cancelDL()
	if s.cfg.Payloads.Sample() {
		ctx = payloadlog.With(ctx, s.cfg.Payloads)
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	stop := context.AfterFunc(s.base, cancel)
	defer stop()
	if len(dec.outputs) < len(inst.Outputs()) && inst.SkipsOutputs() {
		rctx = serving.WithOutputs(rctx, dec.outputs)
	}
	rctx = serving.WithRequestInfo(rctx, req.GetId(), &a.params)
	rctx, sink := serving.WithResponseSink(rctx, inst)
	rec := serving.Request{Began: began, Submitted: time.Now(), TraceBegun: true, Trace: s.traceID(ctx, inst)}
	out, timing, err := serving.InferSequence(rctx, s.models, inst, dec.inputs, a.ticket)
	rec.Timing = timing
	if err != nil {
		rec.Encoded, rec.Err = time.Now(), err
		inst.Stats.Record(rec)
		s.untrace(rec)
		return nil, s.inferError(ctx, err)
	}
	resp := &pb.ModelInferResponse{ModelName: inst.Name(), ModelVersion: inst.Version(), Id: req.GetId()}
	if sp, ok := serving.SequenceEcho(inst, a.seq); ok {
		id := &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(sp.ID.N)}}
		if sp.ID.S != "" {
			id = &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: sp.ID.S}}
		}
		resp.Parameters = map[string]*pb.InferParameter{
			"sequence_id":    id,
			"sequence_start": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: sp.Start}},
			"sequence_end":   {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: sp.End}},
		}
	}
	addResponseParameters(resp, sink)
	if err := s.encodeOutputs(inst, dec, out, resp); err != nil {
		rec.Encoded = time.Now()
		inst.Stats.Record(rec)
		s.untrace(rec)
		return nil, err
	}
	rec.OK, rec.Encoded, rec.ID = true, time.Now(), req.GetId()
	inst.Stats.Record(rec)
	if err := s.cfg.Tracer.Record(serving.TraceOf(inst, rec)); err != nil {
		s.log.Error("tracing", "err", err)
	}
	return resp, nil
}

// encodeOutputs adds the outputs the request asked for to resp: raw
// contents, classes (Triton's classification extension), or written into
// the request's shared memory regions.
func (s *Server) encodeOutputs(inst *serving.Instance, dec *request, out []engine.Tensor, resp *pb.ModelInferResponse) error {
	specs := inst.Outputs()
	for _, idx := range dec.outputs {
		if idx >= len(out) {
			continue // the engine returned fewer outputs than the model declares
		}
		t := out[idx]
		if t.Absent() {
			continue // the model's response left it out (a Python model may): not in the response, as in Triton's
		}
		if n := dec.classes[idx]; n > 0 {
			var err error
			if t, err = inst.Classes(t, specs[idx].Name, n); err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
		}
		o := &pb.ModelInferResponse_InferOutputTensor{Name: specs[idx].Name, Datatype: serving.DatatypeName(t.DType), Shape: t.Shape}
		if ref, ok := dec.shm[idx]; ok {
			if err := s.cfg.SharedMemory.Write(ref, t.Data); err != nil {
				return sharedMemoryStatus(err)
			}
			o.Parameters = map[string]*pb.InferParameter{
				"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: ref.Region}},
				"shared_memory_byte_size": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(len(t.Data))}},
			}
			resp.Outputs = append(resp.Outputs, o)
			// An empty entry keeps raw_output_contents aligned with outputs,
			// which clients index by position.
			resp.RawOutputContents = append(resp.RawOutputContents, nil)
			continue
		}
		resp.Outputs = append(resp.Outputs, o)
		resp.RawOutputContents = append(resp.RawOutputContents, t.Data)
	}
	return nil
}

// streamDecoupled serves one stream request of a decoupled model: each of
// the model's responses is sent as it comes, with the parameter
// triton_final_response; the final one without outputs (Triton's empty
// final response) only when the request asked for it with
// triton_enable_empty_final_response. A failure is an error response that
// ends the request; the stream goes on. emit gets each response and, for an
// error response, its status (triton_grpc_error ends the stream with it).
func (s *Server) streamDecoupled(ctx context.Context, req *pb.ModelInferRequest, a admission, began time.Time, emit func(*pb.ModelStreamInferResponse, error) error) {
	defer a.release()
	header := func(final bool) *pb.ModelInferResponse {
		return &pb.ModelInferResponse{ModelName: req.GetModelName(), ModelVersion: req.GetModelVersion(), Id: req.GetId(),
			Parameters: map[string]*pb.InferParameter{"triton_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: final}}}}
	}
	fail := func(err error, final bool) error { // an error response, with its status
		st := status.Convert(err)
		return emit(&pb.ModelStreamInferResponse{ErrorMessage: st.Message(), InferResponse: header(final)}, st.Err())
	}
	if a.err != nil {
		_ = fail(a.err, true)
		return
	}
	inst, dec := a.inst, a.dec
	emptyFinal := req.GetParameters()["triton_enable_empty_final_response"].GetBoolParam()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.base, cancel)()
	rctx = serving.WithRequestInfo(rctx, req.GetId(), &a.params)
	rctx, sink := serving.WithResponseSink(rctx, inst) // each response's parameters
	rec := serving.Request{Began: began, Submitted: time.Now(), ID: req.GetId()}
	err := serving.InferStream(rctx, inst, dec.inputs, func(out []engine.Tensor, merr error, final bool) error {
		switch {
		case merr != nil:
			return fail(s.inferError(rctx, merr), final)
		case out == nil:
			if !emptyFinal {
				return nil
			}
			return emit(&pb.ModelStreamInferResponse{InferResponse: header(true)}, nil)
		}
		resp := header(final)
		resp.ModelName, resp.ModelVersion = inst.Name(), inst.Version()
		addResponseParameters(resp, sink)
		if err := s.encodeOutputs(inst, dec, out, resp); err != nil {
			return fail(err, final)
		}
		return emit(&pb.ModelStreamInferResponse{InferResponse: resp}, nil)
	})
	rec.OK, rec.Encoded, rec.Err = err == nil, time.Now(), err
	inst.Stats.Record(rec)
	if err != nil && ctx.Err() == nil {
		_ = fail(s.inferError(rctx, err), true)
	}
}

// deadlineMargin is how long before a call's deadline fw gives up on it:
// grpc-go resets the stream at the deadline itself (RST_STREAM CANCEL, no
// status), and a client whose own timer loses that race reads "Stream
// removed" where Triton's clients expect Triton's "Deadline Exceeded". A
// hundredth of the time the call has left, at least 2 ms (a busy machine's
// scheduling delay must not lose the race) and at most 50 ms.
func deadlineMargin(left time.Duration) time.Duration {
	return min(max(left/100, 2*time.Millisecond), 50*time.Millisecond)
}

// beforeDeadline is ctx ending deadlineMargin before its deadline (when it
// has one; else ctx itself, and a cancel that does nothing), so that a call
// past it ends with fw's DEADLINE_EXCEEDED status.
// A context it made already (a stream's, for the stream's requests) is not
// moved again: its requests then end with the stream, which reports it.
func beforeDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && ctx.Value(marginKey{}) == nil {
		c, cancel := context.WithDeadline(ctx, dl.Add(-deadlineMargin(time.Until(dl))))
		return context.WithValue(c, marginKey{}, true), cancel
	}
	return ctx, func() {} // nothing to move: no context made per request
}

// marginKey marks a context beforeDeadline moved.
type marginKey struct{}

// contextStatus is the status of a call its context ended: Triton's
// "Deadline Exceeded" past the client's deadline (clients match it), else
// CANCELLED.
func contextStatus(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, "Deadline Exceeded")
	}
	return status.FromContextError(err).Err()
}

// inferError maps an inference failure to a status whose code matches the
// HTTP answer's: InvalidArgument (422), Unavailable (503), DeadlineExceeded
// (504), Internal (500).
func (s *Server) inferError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return contextStatus(ctx.Err()) // the client's own deadline or cancellation
	}
	f := serving.Classify(err, s.cfg.Timeout)
	switch f.Kind {
	case serving.KindInvalidInput, serving.KindBadRequest:
		return status.Error(codes.InvalidArgument, f.Message)
	case serving.KindOverloaded, serving.KindNotReady:
		return status.Error(codes.Unavailable, f.Message)
	case serving.KindTimeout:
		return status.Error(codes.DeadlineExceeded, f.Message)
	case serving.KindAnswered:
		return status.Error(answeredCode(f.Code), f.Message)
	}
	s.log.Error("engine failure", "err", err)
	return status.Error(codes.Internal, f.Message)
}

// addResponseParameters adds the model's response parameters in sink (if
// any) to resp's, as Triton's typed parameters.
func addResponseParameters(resp *pb.ModelInferResponse, sink *engine.ResponseSink) {
	keys, vals := serving.ResponseParameters(sink)
	if len(keys) == 0 {
		return
	}
	if resp.Parameters == nil {
		resp.Parameters = make(map[string]*pb.InferParameter, len(keys))
	}
	for _, k := range keys {
		switch v := vals[k].(type) {
		case string:
			resp.Parameters[k] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: v}}
		case int64:
			resp.Parameters[k] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
		case bool:
			resp.Parameters[k] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: v}}
		}
	}
}

// answeredCode is the gRPC status of an error a model answered, by its
// Triton error code, as Triton's gRPC front end maps it.
func answeredCode(code int) codes.Code {
	switch code {
	case 0:
		return codes.Unknown
	case 2:
		return codes.NotFound
	case 3:
		return codes.InvalidArgument
	case 4:
		return codes.Unavailable
	case 5:
		return codes.Unimplemented
	case 6:
		return codes.AlreadyExists
	case 7:
		return codes.Canceled
	case 1:
		return codes.Internal
	}
	return codes.Unknown // a code Triton does not have, as Triton maps it
}

// ModelStreamInfer implements GRPCInferenceService (Triton's streaming
// extension): each request on the stream is answered on it, in the order
// the answers are ready (match them by id); a failed request is answered
// with error_message and the stream goes on.
func (s *Server) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	// With the metadata triton_grpc_error: true (Triton's), a failed
	// request ends the stream with its status instead of an error message.
	md, _ := metadata.FromIncomingContext(stream.Context())
	grpcErrors := slices.Contains(md.Get("triton_grpc_error"), "true")
	ctx, endStream := context.WithCancel(stream.Context())
	defer endStream()
	ctx, stopDeadline := beforeDeadline(ctx)
	defer stopDeadline()
	var (
		sendMu  sync.Mutex
		sendErr error
		fatal   error // the failure that ended the stream (grpcErrors)
		wg      sync.WaitGroup
	)
	failure := func() error { // the failure that ended the stream (triton_grpc_error), if one did
		sendMu.Lock()
		defer sendMu.Unlock()
		return fatal
	}
	ended := func() error { // the stream's status once ctx is done
		if err := failure(); err != nil {
			return err
		}
		return contextStatus(ctx.Err())
	}
	sem := make(chan struct{}, s.cfg.StreamConcurrency)
	// order.last is, per model and version (or model and sequence ID), the
	// channel closed once its latest request's answer is sent.
	type orderKey struct{ model, version, sequence string }
	// order.queued is, per model and version, the channel closed once its
	// latest request is queued in the model's batcher: requests reach the
	// queue in the order they came (batcher.WithTurn), so a batch holds
	// them in stream order, as Triton's.
	order := struct {
		sync.Mutex
		last   map[orderKey]chan struct{}
		queued map[orderKey]chan struct{}
	}{last: map[orderKey]chan struct{}{}, queued: map[orderKey]chan struct{}{}}
	defer wg.Wait()
	// Recv runs apart so that a shutdown can end the stream while it waits.
	type received struct {
		req *pb.ModelInferRequest
		err error
	}
	recv := make(chan received)
	go func() {
		for {
			req, err := stream.Recv()
			select {
			case recv <- received{req, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var req *pb.ModelInferRequest
		select {
		case r := <-recv:
			if r.err != nil {
				wg.Wait()
				if err := failure(); err != nil { // a request failed after the client half-closed
					return err
				}
				if ctx.Err() != nil { // the deadline passed while the last requests ran: they were not answered
					return ended()
				}
				if errors.Is(r.err, io.EOF) || status.Code(r.err) == codes.Canceled {
					return nil
				}
				return r.err
			}
			req = r.req
		case <-s.closing:
			wg.Wait()
			if err := failure(); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "the server is shutting down; open a new stream to another replica")
		case <-ctx.Done(): // the client went away (the reader may have stopped without a word), or a failure ended it
			wg.Wait()
			return ended()
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ended()
		}
		// A request naming a sequence is admitted here, in stream order:
		// the requests of one sequence run in the order they were sent.
		// Others are decoded concurrently.
		began := time.Now()
		var a *admission
		// A model's answers leave in the order its requests came (a
		// sequence's among them, per sequence): each waits for the one
		// before it (prev) to be sent. A decoupled model's responses are
		// sent as they come.
		var prev, mine chan struct{}
		seqKey := orderKey{model: req.GetModelName(), version: req.GetModelVersion()}
		if id, ok := req.GetParameters()["sequence_id"]; ok {
			adm := s.admitRecovered(ctx, req)
			a = &adm
			seqKey = orderKey{model: req.GetModelName(), sequence: "\x00" + id.String()} // never a version's key
		}
		mine = make(chan struct{})
		var qprev, qmine chan struct{} // queueing in stream order (not a sequence's: its ticket orders it)
		if a == nil {
			qmine = make(chan struct{})
		}
		order.Lock()
		prev, order.last[seqKey] = order.last[seqKey], mine
		if qmine != nil {
			qprev, order.queued[seqKey] = order.queued[seqKey], qmine
		}
		order.Unlock()
		st := &streamTrace{id: s.cfg.Tracer.Begin(req.GetModelName())} // numbered on arrival, in stream order
		var qonce sync.Once
		release := func() {
			close(qmine)
			order.Lock()
			if order.queued[seqKey] == qmine {
				delete(order.queued, seqKey)
			}
			order.Unlock()
		}
		// queued: this request is queued, or will never be: the next may
		// queue once the one before this is queued too (a request refused
		// early must not let the next overtake the one before it).
		queued := func() {
			if qmine == nil {
				return
			}
			qonce.Do(func() {
				if qprev == nil {
					release()
					return
				}
				select {
				case <-qprev:
					release()
				default: // the one before is not queued yet: pass the turn on once it is
					go func() {
						select {
						case <-qprev:
						case <-ctx.Done():
						}
						release()
					}()
				}
			})
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			defer queued()
			defer func() {
				if !st.used { // refused, or a decoupled model's (not traced)
					s.untrace(serving.Request{Trace: st.id})
				}
			}()
			released := false
			done := func() { // this request's answer is out: the next may go (once; this goroutine only)
				if released {
					return
				}
				released = true
				close(mine)
				order.Lock()
				if order.last[seqKey] == mine {
					delete(order.last, seqKey)
				}
				order.Unlock()
			}
			defer done()
			var resp *pb.ModelStreamInferResponse
			var failed error  // resp's failure, as a status
			streamed := false // a decoupled model's responses, sent as they came
			func() {
				defer func() {
					if a != nil {
						a.release()
					}
					if r := recover(); r != nil {
						var perr error
						s.recovered("/inference.GRPCInferenceService/ModelStreamInfer", r, &perr)
						resp = &pb.ModelStreamInferResponse{ErrorMessage: status.Convert(perr).Message(),
							InferResponse: &pb.ModelInferResponse{ModelName: req.GetModelName(), Id: req.GetId()}}
					}
				}()
				span := s.startSpan(ctx, began)
				mctx := context.WithValue(telemetry.With(ctx, span), streamTraceKey{}, st)
				if qmine != nil {
					mctx = batcher.WithTurn(mctx, qprev, queued)
				}
				var err error
				defer func() { endSpan(span, "/inference.GRPCInferenceService/ModelStreamInfer", err) }()
				if a == nil {
					adm := s.admit(mctx, req)
					a = &adm
				}
				if a.err == nil && a.inst.Decoupled() {
					streamed = true
					done() // a decoupled model's responses leave as they come: none waits for them
					adm := *a
					a = nil // streamDecoupled releases its ticket
					s.streamDecoupled(mctx, req, adm, began, func(r *pb.ModelStreamInferResponse, failed error) error {
						sendMu.Lock()
						defer sendMu.Unlock()
						switch {
						case fatal != nil: // another request's failure ended the stream: this one is cut short
							return fmt.Errorf("%w: the stream ended: %v", context.Canceled, fatal)
						case failed != nil && ctx.Err() != nil: // the stream's deadline or cancellation: its status says it, once
							return ctx.Err()
						case grpcErrors && failed != nil: // the stream ends with it; the request is cancelled
							fatal = failed
							endStream()
							return fatal
						case sendErr == nil:
							sendErr = stream.Send(r)
						}
						return sendErr
					})
					return
				}
				var out *pb.ModelInferResponse
				out, err = s.inferAdmitted(mctx, req, *a, began)
				if err != nil {
					failed = err
					resp = &pb.ModelStreamInferResponse{ErrorMessage: status.Convert(err).Message(),
						InferResponse: &pb.ModelInferResponse{ModelName: req.GetModelName(), ModelVersion: req.GetModelVersion(), Id: req.GetId()}}
					return
				}
				resp = &pb.ModelStreamInferResponse{InferResponse: out}
			}()
			queued() // answered (or refused) without queueing, as a cache hit is: the next need not wait for its turn to be sent
			if streamed && resp == nil {
				return
			}
			if prev != nil {
				select {
				case <-prev:
				case <-ctx.Done():
				}
			}
			sendMu.Lock()
			switch {
			case failed != nil && ctx.Err() != nil:
				// The stream's deadline passed or it was cancelled: the stream's
				// status says so, once, as Triton's does; an error message per
				// request cut short would reach the client as a second
				// failure (L0_client_timeout's test_grpc_stream_infer).
			case grpcErrors && failed != nil:
				if fatal == nil {
					fatal = failed
				}
				endStream()
			case sendErr == nil && fatal == nil:
				sendErr = stream.Send(resp)
			}
			sendMu.Unlock()
		}()
	}
}

// streamTrace is the trace ID a stream request was given as it arrived
// (its requests are numbered in stream order, as Triton numbers them,
// though they are decoded concurrently); used says a request record took
// it, else the stream ends it.
type streamTrace struct {
	id   uint64
	used bool
}

type streamTraceKey struct{}

// traceID is the trace ID of a request to inst: the one its stream gave
// it on arrival, else one sampled now.
func (s *Server) traceID(ctx context.Context, inst *serving.Instance) uint64 {
	if st, ok := ctx.Value(streamTraceKey{}).(*streamTrace); ok {
		st.used = true
		return st.id
	}
	return s.cfg.Tracer.Begin(inst.Name())
}

// untrace tells the tracer that rec's request ended without an answer to
// trace.
func (s *Server) untrace(rec serving.Request) {
	if err := s.cfg.Tracer.End(rec.Trace); err != nil {
		s.log.Error("tracing", "err", err)
	}
}

// Check implements grpc.health.v1: SERVING while the server is ready (the
// service name empty or "inference.GRPCInferenceService"), NOT_SERVING
// while it starts, drains or is broken.
func (s *Server) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st, err := s.health(req.GetService())
	if err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

func (s *Server) health(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	switch service {
	case "", "inference.GRPCInferenceService":
	default:
		return 0, status.Errorf(codes.NotFound, "unknown service %q; ask for \"\" or \"inference.GRPCInferenceService\"", service)
	}
	if s.ready() {
		return healthpb.HealthCheckResponse_SERVING, nil
	}
	return healthpb.HealthCheckResponse_NOT_SERVING, nil
}

// Watch implements grpc.health.v1: the status now, then each change.
func (s *Server) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	st, err := s.health(req.GetService())
	if err != nil {
		// The protocol wants SERVICE_UNKNOWN sent, not an error, for a
		// service that may appear later; fw's never will.
		return stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVICE_UNKNOWN})
	}
	if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
		return err
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-s.base.Done():
			return status.Error(codes.Unavailable, "the server is shutting down")
		case <-s.closing:
			if st != healthpb.HealthCheckResponse_NOT_SERVING {
				_ = stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})
			}
			return status.Error(codes.Unavailable, "the server is shutting down")
		case <-tick.C:
			now, _ := s.health(req.GetService())
			if now != st {
				st = now
				if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
					return err
				}
			}
		}
	}
}
