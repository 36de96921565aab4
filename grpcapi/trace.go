package grpcapi

import (
	"context"
	"errors"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/reqtrace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
