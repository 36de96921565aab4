package pybackend

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fw-serve/fw/engine"
)

// countdown is an iterative model (Triton's iterative_sequence): a
// decoupled request IN=n gets responses n-1 .. 0, one per execute, the
// model rescheduling it until the last; a non-decoupled one is answered on
// its third execute.
const countdown = `
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.left = {}
        self.decoupled = args["decoupled"] == "1"
        self.iterative = args["iterative"] == "1"

    def execute(self, requests):
        out = []
        for r in requests:
            key = id(r)
            if self.iterative and (r.correlation_id() == 0 or bool(r.flags() & 1) == (key in self.left)):
                raise pb_utils.TritonModelException(f"sequence {r.correlation_id()} flags {r.flags()}")
            if key in self.left and int(r.inputs()[0].as_numpy().flat[0]) == 99:
                raise pb_utils.TritonModelException("the second pass failed")
            n = self.left.get(key, int(r.inputs()[0].as_numpy().flat[0]) + (0 if self.decoupled else 2)) - 1
            self.left[key] = n
            resp = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([n], np.float32))])
            if n > 0:
                r.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            if self.decoupled:
                r.get_response_sender().send(resp, flags=0 if n > 0 else pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            out.append(None if n > 0 else resp)
        return None if self.decoupled else out
`

func startCountdown(t *testing.T, decoupled, iterative bool, async bool) *Backend {
	t.Helper()
	src := countdown
	if async {
		src = strings.Replace(src, "    def execute", "    async def execute", 1)
	}
	return startModel(t, src, Config{Name: "countdown", Decoupled: decoupled, Iterative: iterative,
		Args:    map[string]string{"decoupled": fmt.Sprint(b2i(decoupled)), "iterative": fmt.Sprint(b2i(iterative))},
		Inputs:  []engine.TensorSpec{{Name: "IN", DType: engine.Float32, Shape: []int64{1}}},
		Outputs: []engine.TensorSpec{{Name: "OUT", DType: engine.Float32, Shape: []int64{1}}}})
}

// b2i is 1 for true, as the test models read their flags.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestReschedule(t *testing.T) {
	in := []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{3})}
	for _, async := range []bool{false, true} { // an async decoupled execute runs again in the background
		var got []float32
		err := streamOne(startCountdown(t, true, true, async), context.Background(), in, func(outs []engine.Tensor, err error, final bool) error {
			if outs != nil {
				got = append(got, outs[0].Float32s()[0])
			}
			return err
		})
		if err != nil || len(got) != 3 || got[0] != 2 || got[2] != 0 {
			t.Fatalf("decoupled (async %v): %v, %v", async, got, err)
		}
	}
	// A pass after the first that raises ends its request, after what it
	// was sent.
	var got []float32
	var last error
	err := streamOne(startCountdown(t, true, true, false), context.Background(), []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{99})}, func(outs []engine.Tensor, err error, final bool) error {
		if outs != nil {
			got = append(got, outs[0].Float32s()[0])
		}
		if final {
			last = err
		}
		return nil
	})
	if err != nil || len(got) != 1 || last == nil || !strings.Contains(last.Error(), "the second pass failed") {
		t.Fatalf("second pass raised: %v, %v, %v", got, last, err)
	}
	out, err := startCountdown(t, false, true, true).Run(context.Background(), in)
	if err != nil || out[0].Float32s()[0] != 0 {
		t.Fatalf("non-decoupled: %v, %v", out, err)
	}
	// Without iterative_sequence a request is not rescheduled: the model
	// hears why.
	_, err = startCountdown(t, false, false, false).Run(context.Background(), in)
	if err == nil || !strings.Contains(err.Error(), "iterative_sequence: true") {
		t.Fatalf("not iterative: %v", err)
	}
}
