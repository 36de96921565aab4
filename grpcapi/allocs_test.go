package grpcapi

import (
	"context"
	"testing"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
)

// Allocation budget of a raw ModelInfer call through the real handler,
// batcher and engine (issue #24's guard; see httpapi/allocs_test.go for how
// budgets are set and changed). The gRPC transport's own allocations
// (framing, protobuf decoding of the request) are not counted.
//
// Measured 2026-11-26 (digits_mlp.onnx, one row of 64 floats, raw FP32): 30.
const budgetModelInferRaw = 36

func TestAllocationBudgetModelInfer(t *testing.T) {
	fx := start(t, options{})
	req := &pb.ModelInferRequest{ModelName: "digits_mlp", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 64}}},
		RawInputContents: [][]byte{f32bytes(rows(1, 64))}}
	ctx := context.Background()
	call := func() {
		if _, err := fx.srv.ModelInfer(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 50; i++ {
		call()
	}
	got := testing.AllocsPerRun(300, call)
	t.Logf("ModelInfer raw: %.1f allocations per call (budget %d)", got, budgetModelInferRaw)
	if got > budgetModelInferRaw {
		t.Errorf("ModelInfer raw: %.1f allocations per call, over the budget of %d (httpapi/allocs_test.go says how budgets change)", got, budgetModelInferRaw)
	}
}
