package httpapi

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"testing"

	"github.com/fw-serve/fw/engine"
)

// Triton's raw binary request: Inference-Header-Content-Length: 0 and the
// body the one input's bytes; the outputs come back as binary data.
func TestV2RawBinaryRequest(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	x := make([]byte, 64*4)
	for i := range 64 {
		binary.LittleEndian.PutUint32(x[i*4:], math.Float32bits(float32(i%16)/16))
	}
	r := v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/infer", x, "Inference-Header-Content-Length", "0", "Content-Type", "application/octet-stream")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	n, err := strconv.Atoi(r.header.Get("Inference-Header-Content-Length"))
	if err != nil || n <= 0 || n > len(r.body) {
		t.Fatalf("header %q, body %d bytes", r.header.Get("Inference-Header-Content-Length"), len(r.body))
	}
	logits := r.body[n:]
	if len(logits) != 10*4 {
		t.Fatalf("binary output of %d bytes, want 40", len(logits))
	}
	// The same as the engine on a batch of one.
	in, _ := engine.NewTensor(engine.Float32, []int64{1, 64})
	copy(in.Data, x)
	want, err := ts.m.Run(context.Background(), []engine.Tensor{in})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(logits[i*4:])); got != want[0].Float32s()[i] {
			t.Fatalf("logit %d: %v, want %v", i, got, want[0].Float32s()[i])
		}
	}
	// A body that is not one whole input is refused, not padded.
	v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/infer", x[:63*4], "Inference-Header-Content-Length", "0").expectError(t, 400, CodeInvalidInput, "does not fill input")
	v2Do(t, "POST", ts.url+"/v2/models/digits_mlp/infer", x[:7], "Inference-Header-Content-Length", "0").expectError(t, 400, CodeBadRequest, "not a whole number")
}
