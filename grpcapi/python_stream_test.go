package grpcapi

import (
	"encoding/binary"
	"testing"

	"github.com/fw-serve/fw/batcher"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/modelrepo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Python models for stream tests: "slow" answers IN after IN/100 seconds;
// "errs" (decoupled) sends IN, then an error response, then, later, the
// final flag alone.
var streamModels = map[string][2]string{
	"slow": {`backend: "python"
max_batch_size: 8
input [{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }]
output [{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }]
`, `
import time
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            time.sleep(int(x.flat[0]) / 100)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return out
`},
	"errs": {`backend: "python"
input [{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }]
output [{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }]
model_transaction_policy { decoupled: true }
`, `
import threading, time
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            s = r.get_response_sender()
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            def run(s=s, x=x):
                s.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
                s.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("An error occurred during execution")))
                time.sleep(0.3)
                s.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            threading.Thread(target=run, daemon=True).start()
        return None
`},
}

func startPythonRepo(t *testing.T) pb.GRPCInferenceServiceClient {
	t.Helper()
	py := testmodels.NumpyPython(t)
	root := t.TempDir()
	for name, m := range streamModels {
		testmodels.WritePython(t, root, name, m[0], m[1])
	}
	return startRepoWith(t, modelrepo.Config{Roots: []string{root}, Mode: modelrepo.ModeExplicit, LoadModels: []string{"*"},
		Batcher: batcher.DefaultConfig(), SkipWarmup: true, Python: py})
}

func intRequest(model, id string, x int32) *pb.ModelInferRequest {
	raw := make([]byte, 4)
	binary.LittleEndian.PutUint32(raw, uint32(x))
	shape := []int64{1, 1}
	if model == "errs" {
		shape = []int64{1}
	}
	return &pb.ModelInferRequest{ModelName: model, Id: id,
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: shape}},
		RawInputContents: [][]byte{raw}}
}

// A stream answers a model's requests in the order they came, as Triton's
// answers a batch (L0_backend_python/lifecycle's test_batch_error): a slow
// first request's answer comes before a fast second one's.
func TestStreamAnswersInOrder(t *testing.T) {
	client := startPythonRepo(t)
	stream, err := client.ModelStreamInfer(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range []int32{30, 0, 10, 0} {
		if err := stream.Send(intRequest("slow", string(rune('a'+i)), x)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if id := r.GetInferResponse().GetId(); id != string(rune('a'+i)) || r.GetErrorMessage() != "" {
			t.Fatalf("answer %d: id %q (%s), want %q", i, id, r.GetErrorMessage(), string(rune('a'+i)))
		}
	}
	_ = stream.CloseSend()
}

// With triton_grpc_error, a decoupled model's error response ends the
// stream with its status, as Triton's does, and nothing follows it.
func TestStreamGRPCErrorDecoupled(t *testing.T) {
	client := startPythonRepo(t)
	ctx := metadata.AppendToOutgoingContext(callCtx(t), "triton_grpc_error", "true")
	stream, err := client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(intRequest("errs", "e", 5)); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil { // half-closed before the error: the status still ends the stream
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil || r.GetErrorMessage() != "" || len(r.GetInferResponse().GetRawOutputContents()) != 1 {
		t.Fatalf("first response: %v, %v", r, err)
	}
	_, err = stream.Recv()
	if st, _ := status.FromError(err); st.Code() != codes.Internal || st.Message() != "An error occurred during execution" {
		t.Fatalf("the error response: %v, want INTERNAL with the model's message", err)
	}
	// Without it, the error is a response and the stream goes on.
	stream, err = client.ModelStreamInfer(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(intRequest("errs", "e", 5)); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		r, err := stream.Recv()
		if err != nil || (i == 1) != (r.GetErrorMessage() != "") {
			t.Fatalf("response %d: %v, %v", i, r, err)
		}
	}
	_ = stream.CloseSend()
}

// A decoupled request that is still streaming does not hold up the answer
// to a later request of its model (here refused for its input).
func TestStreamDecoupledDoesNotHoldUpOthers(t *testing.T) {
	client := startPythonRepo(t)
	stream, err := client.ModelStreamInfer(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	first := intRequest("errs", "first", 5)
	first.Parameters = map[string]*pb.InferParameter{"triton_enable_empty_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}}
	bad := intRequest("errs", "bad", 5)
	bad.Inputs[0].Name = "NOPE"
	for _, r := range []*pb.ModelInferRequest{first, bad} {
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	var order []string
	for range 4 { // first: a response, an error, the empty final 0.3 s later; bad: its error
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		id := r.GetInferResponse().GetId()
		if id == "first" && r.GetInferResponse().GetParameters()["triton_final_response"].GetBoolParam() {
			id = "first final"
		}
		order = append(order, id)
	}
	if order[3] != "first final" {
		t.Fatalf("answers in order %v: the refused request waited for the streaming one", order)
	}
	_ = stream.CloseSend()
}
