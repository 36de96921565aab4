package grpcapi

// Triton's shared memory extensions over gRPC: system shared memory
// status, register and unregister over the registry the HTTP front end
// shares; CUDA shared memory answers, refusing to register on a server
// without CUDA IPC.

import (
	"context"
	"errors"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/sharedmem"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sharedMemoryStatus maps a sharedmem error to a status, as Triton's:
// NOT_FOUND for a region not registered, INTERNAL for a key that opens no
// object, INVALID_ARGUMENT otherwise.
func sharedMemoryStatus(err error) error {
	switch {
	case errors.Is(err, sharedmem.ErrNotFound):
		return status.Error(codes.NotFound, sharedmem.Message(err))
	case errors.Is(err, sharedmem.ErrOpen):
		return status.Error(codes.Internal, sharedmem.Message(err))
	case errors.Is(err, sharedmem.ErrDisabled):
		return status.Error(codes.Unimplemented, sharedmem.Message(err))
	}
	return status.Error(codes.InvalidArgument, sharedmem.Message(err))
}

func (s *Server) sharedMemory() (*sharedmem.Registry, error) {
	if s.cfg.SharedMemory == nil {
		return nil, status.Error(codes.Unavailable, "system shared memory is turned off on this server (fw serve --shared-memory none)")
	}
	return s.cfg.SharedMemory, nil
}

// SystemSharedMemoryStatus implements GRPCInferenceService.
func (s *Server) SystemSharedMemoryStatus(_ context.Context, req *pb.SystemSharedMemoryStatusRequest) (*pb.SystemSharedMemoryStatusResponse, error) {
	reg, err := s.sharedMemory()
	if err != nil {
		return nil, err
	}
	st, err := reg.Status(req.GetName())
	if err != nil {
		return nil, sharedMemoryStatus(err)
	}
	resp := &pb.SystemSharedMemoryStatusResponse{Regions: map[string]*pb.SystemSharedMemoryStatusResponse_RegionStatus{}}
	for _, r := range st {
		resp.Regions[r.Name] = &pb.SystemSharedMemoryStatusResponse_RegionStatus{Name: r.Name, Key: r.Key, Offset: r.Offset, ByteSize: r.ByteSize}
	}
	return resp, nil
}

// SystemSharedMemoryRegister implements GRPCInferenceService.
func (s *Server) SystemSharedMemoryRegister(_ context.Context, req *pb.SystemSharedMemoryRegisterRequest) (*pb.SystemSharedMemoryRegisterResponse, error) {
	reg, err := s.sharedMemory()
	if err != nil {
		return nil, err
	}
	if err := reg.Register(req.GetName(), req.GetKey(), req.GetOffset(), req.GetByteSize()); err != nil {
		return nil, sharedMemoryStatus(err)
	}
	return &pb.SystemSharedMemoryRegisterResponse{}, nil
}

// SystemSharedMemoryUnregister implements GRPCInferenceService: one
// region, or all for an empty name.
func (s *Server) SystemSharedMemoryUnregister(_ context.Context, req *pb.SystemSharedMemoryUnregisterRequest) (*pb.SystemSharedMemoryUnregisterResponse, error) {
	reg, err := s.sharedMemory()
	if err != nil {
		return nil, err
	}
	if err := reg.Unregister(req.GetName()); err != nil {
		return nil, sharedMemoryStatus(err)
	}
	return &pb.SystemSharedMemoryUnregisterResponse{}, nil
}

// CudaSharedMemoryStatus implements GRPCInferenceService: no region is
// ever registered on this server.
func (s *Server) CudaSharedMemoryStatus(_ context.Context, req *pb.CudaSharedMemoryStatusRequest) (*pb.CudaSharedMemoryStatusResponse, error) {
	if req.GetName() != "" {
		return nil, status.Errorf(codes.NotFound, "Unable to find cuda shared memory region: '%s'", req.GetName())
	}
	return &pb.CudaSharedMemoryStatusResponse{}, nil
}

// CudaSharedMemoryRegister implements GRPCInferenceService: refused with
// Triton's status and sentence for a CUDA IPC handle it cannot open, then
// the reason.
func (s *Server) CudaSharedMemoryRegister(_ context.Context, req *pb.CudaSharedMemoryRegisterRequest) (*pb.CudaSharedMemoryRegisterResponse, error) {
	if s.clientShmOff() {
		return nil, status.Error(codes.Unimplemented, sharedmem.DisabledMessage)
	}
	return nil, status.Errorf(codes.InvalidArgument, "failed to register shared memory region '%s': invalid args: CUDA shared memory is not available on this server (fw does not import CUDA IPC handles, with or without a GPU); use system shared memory or send the data in the request", req.GetName())
}

// CudaSharedMemoryUnregister implements GRPCInferenceService: nothing to
// unregister.
func (s *Server) CudaSharedMemoryUnregister(context.Context, *pb.CudaSharedMemoryUnregisterRequest) (*pb.CudaSharedMemoryUnregisterResponse, error) {
	if s.clientShmOff() {
		return nil, status.Error(codes.Unimplemented, sharedmem.DisabledMessage)
	}
	return &pb.CudaSharedMemoryUnregisterResponse{}, nil
}

// clientShmOff: shared memory is served but clients may not register
// regions (Triton answers its CUDA calls so too).
func (s *Server) clientShmOff() bool {
	return s.cfg.SharedMemory != nil && !s.cfg.SharedMemory.ClientsAllowed()
}

// LogSettings implements GRPCInferenceService (Triton's logging
// extension): the settings, after applying the request's.
func (s *Server) LogSettings(_ context.Context, req *pb.LogSettingsRequest) (*pb.LogSettingsResponse, error) {
	if s.cfg.Logging == nil {
		return nil, status.Error(codes.Unimplemented, "the logging extension is not served")
	}
	if len(req.GetSettings()) > 0 {
		in := map[string]any{}
		for k, v := range req.GetSettings() {
			switch c := v.GetParameterChoice().(type) {
			case *pb.LogSettingsRequest_SettingValue_BoolParam:
				in[k] = c.BoolParam
			case *pb.LogSettingsRequest_SettingValue_Uint32Param:
				in[k] = float64(c.Uint32Param)
			case *pb.LogSettingsRequest_SettingValue_StringParam:
				in[k] = c.StringParam
			}
		}
		if err := s.cfg.Logging.Set(in); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	resp := &pb.LogSettingsResponse{Settings: map[string]*pb.LogSettingsResponse_SettingValue{}}
	for k, v := range s.cfg.Logging.Get() {
		sv := &pb.LogSettingsResponse_SettingValue{}
		switch x := v.(type) {
		case bool:
			sv.ParameterChoice = &pb.LogSettingsResponse_SettingValue_BoolParam{BoolParam: x}
		case int:
			sv.ParameterChoice = &pb.LogSettingsResponse_SettingValue_Uint32Param{Uint32Param: uint32(x)}
		case string:
			sv.ParameterChoice = &pb.LogSettingsResponse_SettingValue_StringParam{StringParam: x}
		}
		resp.Settings[k] = sv
	}
	return resp, nil
}
