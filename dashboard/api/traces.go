package api

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	collpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/otlpbody"
	"github.com/fw-serve/fw/payloadlog"
)

// The dashboard's trace store: an OTLP/HTTP receiver (POST /v1/traces) for
// the request spans of fw serve (the deployments it manages send theirs
// here), and the API the deployment page reads them with.

// otlpTracesPath is OTLP/HTTP's traces path, where the receiver listens.
const otlpTracesPath = "/v1/traces"

// mlflowExperimentHeader on a POST /v1/traces sends its spans to an MLflow
// experiment's traces (package mlflow's ExperimentHeader), not to this
// trace store.
const mlflowExperimentHeader = "X-Mlflow-Experiment-Id"

// Limits on what one received span keeps: anything beyond is dropped (the
// span keeps the rest), never an error.
const (
	maxSpanAttrs      = 64
	maxSpanLinks      = 64
	maxAttrValueBytes = 2048
	maxSpanNameBytes  = 512
	// DefaultTraceRetention and DefaultTraceMaxSpans bound the trace store
	// unless configured (Config.TraceRetention, TraceMaxSpans).
	DefaultTraceRetention = 24 * time.Hour
	DefaultTraceMaxSpans  = 1_000_000
	// pruneEvery is how often the receiver prunes the store.
	pruneEvery = time.Minute
)

// traceStore is the receiver's state.
type traceStore struct {
	lastPrune atomic.Int64 // Unix nanoseconds
}

// receiveTraces is POST /v1/traces: OTLP/HTTP in protobuf or JSON (gzip
// or not).
// It answers OTLP's ExportTraceServiceResponse, with the spans it could
// not keep counted as rejected (a malformed ID), and errors in OTLP's
// Status message.
func (s *Server) receiveTraces(c *call) {
	ctx := c.rc
	isJSON, known, ct := otlpbody.Format(string(ctx.Request.Header.ContentType()))
	fail := func(status int, msg string) {
		if isJSON {
			out, _ := json.Marshal(map[string]any{"code": grpcCodeOf(status), "message": msg})
			ctx.SetStatusCode(status)
			ctx.SetContentType("application/json")
			ctx.SetBody(out)
			return
		}
		otlpError(ctx, status, msg)
	}
	if !known {
		otlpError(ctx, 415, fmt.Sprintf("Content-Type %q: send OTLP/HTTP in protobuf, application/x-protobuf (OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf), or JSON, application/json", ct))
		return
	}
	body, e := s.readBody(ctx)
	if e != nil {
		fail(e.Status, e.Message)
		return
	}
	req, bad := otlpbody.Read(body, isJSON, string(ctx.Request.Header.ContentEncoding()), s.cfg.MaxBodyBytes)
	if bad != nil {
		fail(bad.Status, bad.Msg)
		return
	}
	spans, rejected := spansOf(req)
	if len(spans) > store.MaxSpansPerBatch {
		fail(413, fmt.Sprintf("%d spans in one request; send at most %d (OTEL_BSP_MAX_EXPORT_BATCH_SIZE)", len(spans), store.MaxSpansPerBatch))
		return
	}
	if len(spans) > 0 {
		if err := s.st.PutSpans(c.ctx, spans); err != nil {
			fail(503, "storing the spans failed: "+err.Error())
			return
		}
		s.pruneTraces(c)
	}
	resp := &collpb.ExportTraceServiceResponse{}
	if rejected > 0 {
		resp.PartialSuccess = &collpb.ExportTracePartialSuccess{RejectedSpans: int64(rejected),
			ErrorMessage: fmt.Sprintf("%d spans had a trace ID that is not 16 bytes or a span ID that is not 8 (or all zeros)", rejected)}
	}
	out, ctype := otlpbody.Answer(resp, isJSON)
	ctx.SetStatusCode(200)
	ctx.SetContentType(ctype)
	ctx.SetBody(out)
}

// pruneTraces removes old spans, at most once every pruneEvery.
func (s *Server) pruneTraces(c *call) {
	now := time.Now()
	last := s.traces.lastPrune.Load()
	if now.UnixNano()-last < int64(pruneEvery) || !s.traces.lastPrune.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	retention, keep := s.cfg.TraceRetention, s.cfg.TraceMaxSpans
	if retention <= 0 {
		retention = DefaultTraceRetention
	}
	if keep <= 0 {
		keep = DefaultTraceMaxSpans
	}
	if n, err := s.st.PruneSpans(c.ctx, now.Add(-retention), keep); err != nil {
		s.log.Warn("pruning the trace store", "err", err)
	} else if n > 0 {
		s.log.Debug("pruned the trace store", "spans", n)
	}
}

// otlpError answers an OTLP/HTTP request that failed: the status and
// OTLP's Status message (google.rpc.Status: code, message) in protobuf.
func otlpError(ctx interface {
	SetStatusCode(int)
	SetContentType(string)
	SetBody([]byte)
}, status int, msg string) {
	// google.rpc.Status: field 1 code (int32), field 2 message (string).
	b := []byte{0x08}
	b = appendUvarint(b, uint64(grpcCodeOf(status)))
	b = append(b, 0x12)
	b = appendUvarint(b, uint64(len(msg)))
	b = append(b, msg...)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/x-protobuf")
	ctx.SetBody(b)
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// grpcCodeOf is the gRPC status code OTLP pairs with an HTTP status.
func grpcCodeOf(status int) int {
	switch status {
	case 400:
		return 3 // INVALID_ARGUMENT
	case 401:
		return 16 // UNAUTHENTICATED
	case 405, 415:
		return 3
	case 413:
		return 8 // RESOURCE_EXHAUSTED
	case 503:
		return 14 // UNAVAILABLE
	}
	return 13 // INTERNAL
}

// spansOf converts a request's spans to the store's, and counts those it
// cannot keep (malformed IDs).
func spansOf(req *collpb.ExportTraceServiceRequest) ([]store.Span, int) {
	var out []store.Span
	rejected := 0
	for _, rs := range req.GetResourceSpans() {
		service, deployment := "", ""
		for _, kv := range rs.GetResource().GetAttributes() {
			switch kv.GetKey() {
			case "service.name":
				service = payloadlog.Clip(kv.GetValue().GetStringValue(), 256)
			case "fw.deployment":
				deployment = payloadlog.Clip(kv.GetValue().GetStringValue(), 256)
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				st, ok := spanOfOTLP(sp, service, deployment)
				if !ok {
					rejected++
					continue
				}
				out = append(out, st)
			}
		}
	}
	return out, rejected
}

// spanOfOTLP is an OTLP span as the store keeps it (its attributes and
// links bounded); false when its IDs are malformed.
func spanOfOTLP(sp *tracepb.Span, service, deployment string) (store.Span, bool) {
	tid, sid, pid := sp.GetTraceId(), sp.GetSpanId(), sp.GetParentSpanId()
	if len(tid) != 16 || len(sid) != 8 || allZero(tid) || allZero(sid) || (len(pid) != 0 && len(pid) != 8) {
		return store.Span{}, false
	}
	parent := ""
	if len(pid) == 8 && !allZero(pid) {
		parent = hex.EncodeToString(pid)
	}
	start, end := clampNanos(sp.GetStartTimeUnixNano()), clampNanos(sp.GetEndTimeUnixNano())
	if end < start {
		end = start
	}
	attrs := map[string]any{}
	for i, kv := range sp.GetAttributes() {
		if i == maxSpanAttrs {
			break
		}
		attrs[payloadlog.Clip(kv.GetKey(), 256)] = valueOf(kv.GetValue(), 0)
	}
	ab, _ := json.Marshal(attrs)
	links := []map[string]string{}
	for i, l := range sp.GetLinks() {
		if i == maxSpanLinks {
			break
		}
		if len(l.GetTraceId()) == 16 && len(l.GetSpanId()) == 8 {
			links = append(links, map[string]string{"trace_id": hex.EncodeToString(l.GetTraceId()), "span_id": hex.EncodeToString(l.GetSpanId())})
		}
	}
	lb, _ := json.Marshal(links)
	return store.Span{
		TraceID: hex.EncodeToString(tid), SpanID: hex.EncodeToString(sid), ParentID: parent,
		Service: service, Deployment: deployment, Name: payloadlog.Clip(sp.GetName(), maxSpanNameBytes), Kind: int(sp.GetKind()),
		Start: start, End: end, Status: int(sp.GetStatus().GetCode()), StatusMessage: payloadlog.Clip(sp.GetStatus().GetMessage(), maxAttrValueBytes),
		Attributes: ab, Links: lb,
	}, true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// clampNanos keeps a time within what int64 nanoseconds hold.
func clampNanos(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// valueOf is an attribute value as JSON takes it: strings clipped, bytes
// in base64, arrays and maps to a depth of 3.
func valueOf(v *commonpb.AnyValue, depth int) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return payloadlog.Clip(x.StringValue, maxAttrValueBytes)
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		if math.IsNaN(x.DoubleValue) || math.IsInf(x.DoubleValue, 0) {
			return fmt.Sprint(x.DoubleValue)
		}
		return x.DoubleValue
	case *commonpb.AnyValue_BytesValue:
		return payloadlog.Clip(base64.StdEncoding.EncodeToString(x.BytesValue), maxAttrValueBytes)
	case *commonpb.AnyValue_ArrayValue:
		if depth >= 3 {
			return nil
		}
		out := []any{}
		for i, e := range x.ArrayValue.GetValues() {
			if i == maxSpanAttrs {
				break
			}
			out = append(out, valueOf(e, depth+1))
		}
		return out
	case *commonpb.AnyValue_KvlistValue:
		if depth >= 3 {
			return nil
		}
		out := map[string]any{}
		for i, kv := range x.KvlistValue.GetValues() {
			if i == maxSpanAttrs {
				break
			}
			out[payloadlog.Clip(kv.GetKey(), 256)] = valueOf(kv.GetValue(), depth+1)
		}
		return out
	}
	return nil
}

// listTraces is GET /api/traces: the requests (server spans) received,
// newest or slowest first, of one deployment or service.
func (s *Server) listTraces(c *call) (any, error) {
	ctx := c.rc
	q := store.RequestQuery{
		Deployment: string(ctx.QueryArgs().Peek("deployment")),
		Service:    string(ctx.QueryArgs().Peek("service")),
	}
	sort := string(ctx.QueryArgs().Peek("sort"))
	if !ctx.QueryArgs().Has("sort") {
		sort = "recent" // absent; present but empty ("?sort=") is refused below
	}
	switch sort {
	case "recent":
	case "slowest":
		q.Slowest = true
	default:
		return nil, apiErr(400, string(store.CodeInvalidArgument), fmt.Sprintf("?sort=%q: use recent (newest first) or slowest (longest first)", sort))
	}
	limit, e := queryInt(ctx, "limit", 50, 1, store.MaxRequestsListed)
	if e != nil {
		return nil, e
	}
	q.Limit = limit
	since, e := queryTime(c, "since")
	if e != nil {
		return nil, e
	}
	q.Since = since
	reqs, err := s.st.ListRequests(c.ctx, q)
	if err != nil {
		return nil, err
	}
	return map[string]any{"requests": reqs}, nil
}

// getTrace is GET /api/traces/{trace_id}: every span of one trace, by
// start: a request trace of this store (32 hex digits), or an MLflow
// trace (tr-..., MLflow's trace API) in the same shape.
func (s *Server) getTrace(c *call) (any, error) {
	if strings.HasPrefix(c.param("trace_id"), "tr-") {
		return s.getMLflowTrace(c)
	}
	id := strings.ToLower(c.param("trace_id"))
	if b, err := hex.DecodeString(id); err != nil || len(b) != 16 {
		return nil, apiErr(400, string(store.CodeInvalidArgument), fmt.Sprintf("trace ID %q: give the 32 hex digits of a W3C trace ID", c.param("trace_id")))
	}
	spans, err := s.st.GetTrace(c.ctx, id)
	if err != nil {
		return nil, err
	}
	if len(spans) == 0 {
		return nil, apiErr(404, CodeNotFound, fmt.Sprintf("no spans of trace %s are kept (older than the retention, or never received)", id))
	}
	return map[string]any{"trace_id": id, "spans": spans}, nil
}

// getMLflowTrace answers GET /api/traces/tr-...: an MLflow trace's spans
// (kept as OTLP's JSON) as this store's spans, for the run page's
// waterfall.
func (s *Server) getMLflowTrace(c *call) (any, error) {
	id := c.param("trace_id")
	if len(id) > 131 {
		return nil, apiErr(400, string(store.CodeInvalidArgument), "an MLflow trace ID is tr- and at most 128 characters")
	}
	kept, err := s.st.GetMLflowSpans(c.ctx, id)
	if err != nil {
		return nil, err
	}
	spans := make([]store.Span, 0, len(kept))
	for _, k := range kept {
		var sp tracepb.Span
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(k.Content, &sp); err != nil {
			return nil, fmt.Errorf("reading span %s of trace %s: %w", k.SpanID, id, err)
		}
		if st, ok := spanOfOTLP(&sp, "mlflow", ""); ok {
			spans = append(spans, st)
		}
	}
	if len(spans) == 0 {
		return nil, apiErr(404, CodeNotFound, fmt.Sprintf("no spans of MLflow trace %s are kept (none were sent to the dashboard, or the trace was deleted)", id))
	}
	return map[string]any{"trace_id": id, "spans": spans}, nil
}

// runTraces is GET /api/runs/{id}/traces: the MLflow traces made in or
// linked to the run, newest first (?limit=, default 50, at most 500).
func (s *Server) runTraces(c *call) (any, error) {
	limit, e := queryInt(c.rc, "limit", 50, 1, 500)
	if e != nil {
		return nil, e
	}
	id := c.param("id")
	if s.cfg.RunTraces == nil {
		if _, err := s.st.GetRun(c.ctx, id); err != nil {
			return nil, err
		}
		return map[string]any{"traces": []store.TraceSummary{}}, nil
	}
	ts, err := s.cfg.RunTraces(c.ctx, id, limit)
	if err != nil {
		return nil, err
	}
	return map[string]any{"traces": ts}, nil
}
