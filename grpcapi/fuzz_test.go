package grpcapi

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
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

// FuzzBytesDecode feeds arbitrary BYTES inputs, raw (the serialized form)
// or typed (bytes_contents), with arbitrary shapes, to decode: it must
// never panic, and what it accepts must hold exactly its shape's strings.
func FuzzBytesDecode(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 'a', 0, 0, 0, 0}, int64(1), int64(2), false)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 'a'}, int64(1), int64(1), false)
	f.Add([]byte{0, 0, 0, 0x80}, int64(1<<40), int64(1<<40), false)
	f.Add([]byte("a\x00bc"), int64(2), int64(2), true)
	f.Add([]byte{}, int64(0), int64(5), false)
	ins := []engine.TensorSpec{{Name: "s", DType: engine.String, Shape: []int64{-1, -1}}}
	outs := []engine.TensorSpec{{Name: "y", DType: engine.String, Shape: []int64{-1, -1}}}
	f.Fuzz(func(t *testing.T, raw []byte, d0, d1 int64, typed bool) {
		if len(raw) > 1<<16 {
			return
		}
		in := &pb.ModelInferRequest_InferInputTensor{Name: "s", Datatype: "BYTES", Shape: []int64{d0, d1}}
		req := &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in}}
		if typed { // split raw at its NUL bytes into elements
			in.Contents = &pb.InferTensorContents{BytesContents: bytes.Split(raw, []byte{0})}
		} else {
			req.RawInputContents = [][]byte{raw}
		}
		r, err := decode(req, ins, outs, 0, nil)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.ResourceExhausted {
				t.Fatalf("decode answered %v: %v", c, err)
			}
			return
		}
		x := r.inputs[0]
		if err := x.Check(); err != nil || x.DType != engine.String {
			t.Fatalf("accepted a malformed tensor %v: %v", x.Shape, err)
		}
		if len(x.Data) > 5*len(raw)+4 {
			t.Fatalf("%d bytes from %d", len(x.Data), len(raw))
		}
	})
}
