package grpcapi

// Triton's status codes and sentences over gRPC where its clients and
// examples match them (issue #21).

import (
	"testing"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
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
