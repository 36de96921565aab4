package grpcapi

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/fw-serve/fw/telemetry"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/reqtrace"
)

// TraceSetting serves Triton's trace extension: the settings of the
// request's model ("" for the server's), changed by its settings (a value
// with no strings clears a model's own: it follows the server's).
func (s *Server) TraceSetting(_ context.Context, req *pb.TraceSettingRequest) (*pb.TraceSettingResponse, error) {
	if s.cfg.Tracer == nil {
		return nil, status.Error(codes.Unimplemented, "the server does not support tracing (this fw serve was started without a tracer)")
	}
	model := req.GetModelName()
	if model != "" {
		if err := s.models.Ready(model, ""); err != nil {
			return nil, modelStatus(err)
		}
	}
	out := s.cfg.Tracer.Get(model)
	if len(req.GetSettings()) > 0 {
		u := reqtrace.Update{}
		for k, v := range req.GetSettings() {
			u[k] = v.GetValue()
		}
		var err error
		if out, err = s.cfg.Tracer.Set(model, u); err != nil {
			var se *reqtrace.SettingError
			if errors.As(err, &se) && se.Unsupported {
				return nil, status.Error(codes.Unimplemented, err.Error())
			}
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	resp := &pb.TraceSettingResponse{Settings: map[string]*pb.TraceSettingResponse_SettingValue{}}
	for k, v := range out {
		resp.Settings[k] = &pb.TraceSettingResponse_SettingValue{Value: v}
	}
	return resp, nil
}

// startSpan decides whether a call that began at start is traced, from the
// W3C trace context in its metadata; nil when it is not.
func (s *Server) startSpan(ctx context.Context, start time.Time) *telemetry.Span {
	if s.cfg.Telemetry == nil {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var tp, ts []byte
	if v := md.Get("traceparent"); len(v) > 0 {
		tp = []byte(v[0])
	}
	if v := md.Get("tracestate"); len(v) > 0 {
		ts = []byte(strings.Join(v, ","))
	}
	return s.cfg.Telemetry.Start(tp, ts, start)
}

// endSpan sends a traced call's spans, named by its full method as
// OpenTelemetry's RPC conventions do; a status that is the server's fault
// (not a refusal of the request) marks it an error.
func endSpan(span *telemetry.Span, fullMethod string, err error) {
	if span == nil {
		return
	}
	name := strings.TrimPrefix(fullMethod, "/")
	service, method, _ := strings.Cut(name, "/")
	st := status.Convert(err)
	attrs := make([]attribute.KeyValue, 0, 5+telemetry.ModelAttrs) // room for End's
	attrs = append(attrs,
		attribute.String("rpc.system", "grpc"),
		attribute.String("rpc.service", service),
		attribute.String("rpc.method", method),
		attribute.Int("rpc.grpc.status_code", int(st.Code())),
	)
	failed := false
	switch st.Code() {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		failed = true
		attrs = append(attrs, attribute.String("error.type", st.Code().String()))
	}
	span.End(name, trace.SpanKindServer, attrs, time.Now(), failed, st.Message())
}

// traceID is span's trace ID, "" when the call is not traced.
func traceID(span *telemetry.Span) string {
	if span == nil {
		return ""
	}
	return span.SpanContext().TraceID().String()
}
