package grpcapi

// Triton's status codes and sentences over gRPC where its clients and
// examples match them (issue #21).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/sharedmem"
	"google.golang.org/grpc/codes"
)

// A model whose configuration says max_batch_size 0 has no rows to count,
// though its file has a variable first axis: --max-rows does not bound its
// first axis (the message size does), over gRPC and HTTP alike. Triton's
// string_identity takes 10,485,760 elements so.
func TestUnbatchedConfigHasNoRowLimit(t *testing.T) {
	f := start(t, options{model: tritonModel(t, "simple_identity"), maxRows: 2, unbatched: true})
	elems := make([][]byte, 10)
	for i := range elems {
		elems[i] = []byte{'a' + byte(i)}
	}
	r, err := f.client.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "simple_identity",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "BYTES", Shape: []int64{10, 1},
			Contents: &pb.InferTensorContents{BytesContents: elems}}}})
	if err != nil {
		t.Fatalf("10 rows of a model without a batch axis, --max-rows 2: %v", err)
	}
	if got := r.Outputs[0].Shape; len(got) != 2 || got[0] != 10 {
		t.Fatalf("output shape %v", got)
	}
	url, hc := f.serveHTTP(t, 2)
	code, v, err := httpJSON(hc, "POST", url+"/v2/models/simple_identity/infer", map[string]any{
		"inputs": []any{map[string]any{"name": "INPUT0", "datatype": "BYTES", "shape": []int{10, 1}, "data": []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}}}})
	if err != nil || code != 200 {
		t.Fatalf("HTTP, 10 rows: %d %v %v", code, v, err)
	}
}

// Shared memory as Triton answers it: a key that opens no object is
// INTERNAL "Unable to open shared memory region: '<key>'", checked before
// the window (byte_size 0 included); a window past the object is
// INVALID_ARGUMENT "failed to register shared memory region '<name>':
// invalid args"; CUDA shared memory is INVALID_ARGUMENT with Triton's
// sentence, then why.
func TestSharedMemoryTritonStatuses(t *testing.T) {
	dir := t.TempDir()
	reg := sharedmem.New(dir, true)
	defer reg.Close()
	f := start(t, options{shm: reg})
	ctx := callCtx(t)
	for _, size := range []uint64{0, 64} {
		_, err := f.client.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "test_shm", Key: "/test_shm", ByteSize: size})
		wantCode(t, err, codes.Internal, "Unable to open shared memory region: '/test_shm'")
	}
	if err := os.WriteFile(filepath.Join(dir, "small"), make([]byte, 64), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := f.client.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "r", Key: "/small", ByteSize: 65})
	wantCode(t, err, codes.InvalidArgument, "failed to register shared memory region 'r': invalid args")
	_, err = f.client.CudaSharedMemoryRegister(ctx, &pb.CudaSharedMemoryRegisterRequest{})
	wantCode(t, err, codes.InvalidArgument, "failed to register shared memory region '': invalid args")
}

// Client shared memory off (tritonserver's --allow-client-shm default):
// register and unregister, system and CUDA, are UNIMPLEMENTED with
// Triton's sentence; the status answers, empty.
func TestSharedMemoryClientsNotAllowed(t *testing.T) {
	reg := sharedmem.New(t.TempDir(), false)
	defer reg.Close()
	f := start(t, options{shm: reg})
	ctx := callCtx(t)
	_, err := f.client.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "in", Key: "/in", ByteSize: 8})
	wantCode(t, err, codes.Unimplemented, sharedmem.DisabledMessage)
	_, err = f.client.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{})
	wantCode(t, err, codes.Unimplemented, sharedmem.DisabledMessage)
	_, err = f.client.CudaSharedMemoryRegister(ctx, &pb.CudaSharedMemoryRegisterRequest{Name: "c"})
	wantCode(t, err, codes.Unimplemented, sharedmem.DisabledMessage)
	_, err = f.client.CudaSharedMemoryUnregister(ctx, &pb.CudaSharedMemoryUnregisterRequest{})
	wantCode(t, err, codes.Unimplemented, sharedmem.DisabledMessage)
	st, err := f.client.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{})
	if err != nil || len(st.GetRegions()) != 0 {
		t.Fatalf("status: %v %v", st, err)
	}
}

// A load's file override fw does not take: one whose path no file system
// can hold is INTERNAL "failed to poll from model repository" (Triton's
// status and sentence), any other INVALID_ARGUMENT "failed to load".
func TestLoadFileOverrideStatus(t *testing.T) {
	f := start(t, options{})
	ctx := callCtx(t)
	_, err := f.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "digits_mlp", Parameters: map[string]*pb.ModelRepositoryParameter{
		"config":                           {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: "{}"}},
		"file:" + strings.Repeat("A", 256): {ParameterChoice: &pb.ModelRepositoryParameter_BytesParam{BytesParam: []byte("a")}},
	}})
	wantCode(t, err, codes.Internal, "failed to poll from model repository")
	_, err = f.client.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "digits_mlp", Parameters: map[string]*pb.ModelRepositoryParameter{
		"file:1/model.onnx": {ParameterChoice: &pb.ModelRepositoryParameter_BytesParam{BytesParam: []byte("a")}},
	}})
	wantCode(t, err, codes.InvalidArgument, "failed to load 'digits_mlp'")
}
