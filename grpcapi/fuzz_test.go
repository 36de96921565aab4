package grpcapi

import (
	"context"
	"testing"
	"time"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// FuzzModelInfer feeds arbitrary bytes through the protobuf decoding a gRPC
// server does (proto.Unmarshal of a ModelInferRequest) into the ModelInfer
// handler over the real digits MLP, without the recovery interceptor, so a
// panic fails the target. Every answer is a success or a client error:
// never INTERNAL or UNKNOWN, and never slower than the deadline.
func FuzzModelInfer(f *testing.F) {
	seed := func(m *pb.ModelInferRequest) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	in := func(dt string, shape ...int64) []*pb.ModelInferRequest_InferInputTensor {
		return []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: dt, Shape: shape}}
	}
	seed(&pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP32", 2, 64), RawInputContents: [][]byte{f32bytes(rows(2, 64))}})
	seed(&pb.ModelInferRequest{ModelName: "digits_mlp", Id: "x", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 64}, Contents: &pb.InferTensorContents{Fp32Contents: rows(1, 64)}}},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits", Parameters: map[string]*pb.InferParameter{"classification": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 0}}}}}})
	seed(&pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("INT8", 1, 64), RawInputContents: [][]byte{make([]byte, 64)}})
	seed(&pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP32", 1<<40, 1<<40, 64), RawInputContents: [][]byte{{0}}})
	seed(&pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: in("FP16", 0, 64), RawInputContents: [][]byte{{}}})
	fx := start(f, options{maxRows: 64, maxMsg: 1 << 20})
	allowed := map[codes.Code]bool{codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true, codes.ResourceExhausted: true, codes.Unavailable: true}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req pb.ModelInferRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := fx.srv.ModelInfer(ctx, &req)
		if c := status.Code(err); !allowed[c] {
			t.Fatalf("ModelInfer answered %v: %v", c, err)
		}
	})
}
