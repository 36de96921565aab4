package grpcapi

// Triton's model repository extension over gRPC: RepositoryIndex,
// RepositoryModelLoad and RepositoryModelUnload, over the same
// serving.Models as the HTTP routes.

import (
	"context"
	"strings"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/serving"
)

// RepositoryIndex implements GRPCInferenceService: the repository's models
// and their versions' states (only the ready ones when asked).
func (s *Server) RepositoryIndex(_ context.Context, req *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	resp := &pb.RepositoryIndexResponse{}
	for _, m := range s.models.Index() {
		if req.GetReady() && m.State != serving.ModelReady {
			continue
		}
		resp.Models = append(resp.Models, &pb.RepositoryIndexResponse_ModelIndex{Name: m.Name, Version: m.Version, State: m.State, Reason: m.Reason})
	}
	return resp, nil
}

// RepositoryModelLoad implements GRPCInferenceService: load or reload a
// model, with its configuration replaced by the "config" parameter (JSON).
func (s *Server) RepositoryModelLoad(ctx context.Context, req *pb.RepositoryModelLoadRequest) (*pb.RepositoryModelLoadResponse, error) {
	var opts serving.LoadOptions
	for k, p := range req.GetParameters() {
		switch {
		case k == "config":
			opts.Config = []byte(p.GetStringParam())
		case strings.HasPrefix(k, "file:"):
			return nil, modelStatus(serving.FileOverride(req.GetModelName(), k))
		}
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := s.models.Load(rctx, req.GetModelName(), opts); err != nil {
		return nil, modelStatus(err)
	}
	return &pb.RepositoryModelLoadResponse{}, nil
}

// RepositoryModelUnload implements GRPCInferenceService: unload every
// version of a model once its accepted requests are answered.
func (s *Server) RepositoryModelUnload(ctx context.Context, req *pb.RepositoryModelUnloadRequest) (*pb.RepositoryModelUnloadResponse, error) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	opts := serving.UnloadOptions{Dependents: req.GetParameters()["unload_dependents"].GetBoolParam()}
	if err := s.models.Unload(rctx, req.GetModelName(), opts); err != nil {
		return nil, modelStatus(err)
	}
	return &pb.RepositoryModelUnloadResponse{}, nil
}
