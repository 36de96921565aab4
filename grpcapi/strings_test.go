package grpcapi

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fw-serve/fw/engine"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/serving"
	"github.com/fw-serve/fw/sharedmem"
	"google.golang.org/grpc/codes"
)

// serialize is tritonclient's serialize_byte_tensor, written out.
func serialize(elems ...string) []byte {
	var b []byte
	for _, s := range elems {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

func deserialize(t testing.TB, b []byte) []string {
	t.Helper()
	var out []string
	for len(b) > 0 {
		if len(b) < 4 || int(binary.LittleEndian.Uint32(b)) > len(b)-4 {
			t.Fatalf("not the serialized form: %q", b)
		}
		n := binary.LittleEndian.Uint32(b)
		out = append(out, string(b[4:4+n]))
		b = b[4+n:]
	}
	return out
}

func bytesInput(name string, shape ...int64) *pb.ModelInferRequest_InferInputTensor {
	return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: "BYTES", Shape: shape}
}

// Triton's simple_string over gRPC: BYTES inputs as raw_input_contents in
// the serialized form (what tritonclient.grpc sends) or as typed
// bytes_contents; outputs as raw_output_contents in the serialized form.
func TestStringModelRawAndTyped(t *testing.T) {
	fx := start(t, options{model: testmodels.Triton(t, "simple_string"), name: "simple_string"})
	a, b := make([]string, 32), make([]string, 32)
	for i := range a {
		a[i], b[i] = strconv.Itoa(i), strconv.Itoa(100*i)
	}
	resp, err := fx.client.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "simple_string",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{bytesInput("INPUT0", 2, 16), bytesInput("INPUT1", 2, 16)},
		RawInputContents: [][]byte{serialize(a...), serialize(b...)}})
	if err != nil {
		t.Fatal(err)
	}
	if o := resp.Outputs[0]; o.Datatype != "BYTES" || serving.ShapeString(o.Shape) != "[2,16]" || len(resp.RawOutputContents) != 2 {
		t.Fatalf("outputs %+v", resp.Outputs)
	}
	sum, diff := deserialize(t, resp.RawOutputContents[0]), deserialize(t, resp.RawOutputContents[1])
	for i := range a {
		if sum[i] != strconv.Itoa(101*i) || diff[i] != strconv.Itoa(-99*i) {
			t.Fatalf("element %d: %q %q", i, sum[i], diff[i])
		}
	}
	typed := func(v []string) *pb.InferTensorContents {
		c := &pb.InferTensorContents{}
		for _, s := range v {
			c.BytesContents = append(c.BytesContents, []byte(s))
		}
		return c
	}
	in0, in1 := bytesInput("INPUT0", 1, 16), bytesInput("INPUT1", 1, 16)
	in0.Contents, in1.Contents = typed(a[:16]), typed(b[:16])
	resp, err = fx.client.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "simple_string", Inputs: []*pb.ModelInferRequest_InferInputTensor{in0, in1},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := deserialize(t, resp.RawOutputContents[0]); len(resp.Outputs) != 1 || got[15] != strconv.Itoa(-99*15) {
		t.Fatalf("typed: %v %q", resp.Outputs, got)
	}
}

// Hostile BYTES requests get INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for
// rows) with a message; what goes in well formed comes back byte for byte,
// NUL bytes included (Triton's simple_grpc_string_infer_client sends them).
func TestStringIdentityAndRefusals(t *testing.T) {
	fx := start(t, options{model: testmodels.Triton(t, "simple_identity"), name: "simple_identity", maxRows: 8})
	elems := []string{"", "\xff\xfe not UTF-8", strings.Repeat("z", 100000), "é", "he\x00llo", "\x00\x01\x02\x03"}
	raw := serialize(elems...)
	resp, err := fx.client.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "simple_identity",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{bytesInput("INPUT0", 2, 3)}, RawInputContents: [][]byte{raw}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(resp.RawOutputContents[0], raw) {
		t.Fatalf("identity changed the bytes")
	}
	rawReq := func(r []byte, shape ...int64) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "simple_identity", Inputs: []*pb.ModelInferRequest_InferInputTensor{bytesInput("INPUT0", shape...)}, RawInputContents: [][]byte{r}}
	}
	typedReq := func(v [][]byte, shape ...int64) *pb.ModelInferRequest {
		in := bytesInput("INPUT0", shape...)
		in.Contents = &pb.InferTensorContents{BytesContents: v}
		return &pb.ModelInferRequest{ModelName: "simple_identity", Inputs: []*pb.ModelInferRequest_InferInputTensor{in}}
	}
	two := serialize("ab", "c")
	for _, c := range []struct {
		name string
		req  *pb.ModelInferRequest
		code codes.Code
		hint string
	}{
		{"length beyond the entry", rawReq(two[:len(two)-1], 1, 2), codes.InvalidArgument, "element 1: its length 1 runs past the end"},
		{"4 GiB length", rawReq([]byte{0xff, 0xff, 0xff, 0xff, 'a'}, 1, 1), codes.InvalidArgument, "its length 4294967295 runs past"},
		{"negative int32 length", rawReq([]byte{0, 0, 0, 0x80, 'a'}, 1, 1), codes.InvalidArgument, "its length 2147483648"},
		{"fewer elements", rawReq(two, 1, 3), codes.InvalidArgument, "3 elements need at least 12 bytes"},
		{"more elements", rawReq(two, 1, 1), codes.InvalidArgument, "bytes follow the 1 elements"},
		{"huge shape", rawReq(two, 1<<40, 1<<20), codes.InvalidArgument, "need at least"},
		{"rows", rawReq(serialize("1", "2", "3", "4", "5", "6", "7", "8", "9"), 9, 1), codes.ResourceExhausted, "--max-rows"},
		{"typed count", typedReq([][]byte{[]byte("a")}, 1, 2), codes.InvalidArgument, "needs 2 elements, its contents hold 1 in the field for BYTES (bytes_contents)"},
		{"typed in another field", &pb.ModelInferRequest{ModelName: "simple_identity", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "BYTES", Shape: []int64{1, 1},
			Contents: &pb.InferTensorContents{IntContents: []int32{1}}}}}, codes.InvalidArgument, "in the field for BYTES"},
		{"FP32 for BYTES", &pb.ModelInferRequest{ModelName: "simple_identity", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, 1}}},
			RawInputContents: [][]byte{make([]byte, 4)}}, codes.InvalidArgument, "this model takes BYTES"},
	} {
		_, err := fx.client.ModelInfer(callCtx(t), c.req)
		t.Run(c.name, func(t *testing.T) { wantCode(t, err, c.code, c.hint) })
	}
	// Empty strings, typed: elements like any other.
	resp, err = fx.client.ModelInfer(callCtx(t), typedReq([][]byte{{}, {}, nil}, 1, 3))
	if err != nil || !slices.Equal(deserialize(t, resp.RawOutputContents[0]), []string{"", "", ""}) {
		t.Fatalf("empty strings: %v %v", resp, err)
	}
	// NUL bytes, typed (bytes_contents, as tritonclient.grpc sends BYTES).
	resp, err = fx.client.ModelInfer(callCtx(t), typedReq([][]byte{[]byte("he\x00llo"), {0, 1, 2, 3}, {0}}, 1, 3))
	if err != nil || !slices.Equal(deserialize(t, resp.RawOutputContents[0]), []string{"he\x00llo", "\x00\x01\x02\x03", "\x00"}) {
		t.Fatalf("NUL bytes: %v %v", resp, err)
	}
}

// BYTES in and out of system shared memory over gRPC, the window holding
// the serialized form; malformed windows are refused.
func TestStringSharedMemory(t *testing.T) {
	dir := t.TempDir()
	reg := sharedmem.New(dir, true)
	defer reg.Close()
	fx := start(t, options{model: testmodels.Triton(t, "simple_identity"), name: "simple_identity", shm: reg})
	elems := []string{"grpc", "", "\x80\x81", "shm"}
	in := serialize(elems...)
	obj := make([]byte, 4096)
	copy(obj, in)
	if err := os.WriteFile(filepath.Join(dir, "s"), obj, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("in", "/s", 0, 1024); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("out", "/s", 1024, 1024); err != nil {
		t.Fatal(err)
	}
	param := func(region string, size int64) map[string]*pb.InferParameter {
		return map[string]*pb.InferParameter{
			"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: region}},
			"shared_memory_byte_size": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: size}},
		}
	}
	req := func(inSize, outSize int64) *pb.ModelInferRequest {
		i := bytesInput("INPUT0", 2, 2)
		i.Parameters = param("in", inSize)
		return &pb.ModelInferRequest{ModelName: "simple_identity", Inputs: []*pb.ModelInferRequest_InferInputTensor{i},
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0", Parameters: param("out", outSize)}}}
	}
	resp, err := fx.client.ModelInfer(callCtx(t), req(int64(len(in)), 1024))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Outputs[0].Parameters["shared_memory_byte_size"].GetInt64Param(); got != int64(len(in)) || len(resp.RawOutputContents[0]) != 0 {
		t.Fatalf("shared memory answer %+v", resp.Outputs[0])
	}
	got, _ := os.ReadFile(filepath.Join(dir, "s"))
	if !bytes.Equal(got[1024:1024+len(in)], in) {
		t.Fatalf("the output region holds %q", got[1024:1024+len(in)])
	}
	_, err = fx.client.ModelInfer(callCtx(t), req(int64(len(in)-1), 1024))
	wantCode(t, err, codes.InvalidArgument, "runs past the end")
	_, err = fx.client.ModelInfer(callCtx(t), req(15, 1024))
	wantCode(t, err, codes.InvalidArgument, "needs at least 16 bytes")
	_, err = fx.client.ModelInfer(callCtx(t), req(1<<40, 1024))
	wantCode(t, err, codes.InvalidArgument, "Invalid offset + byte size for shared memory region: 'in'")
	_, err = fx.client.ModelInfer(callCtx(t), req(int64(len(in)), int64(len(in)-1)))
	wantCode(t, err, codes.InvalidArgument, "more than shared_memory_byte_size")
}

// The classification extension over gRPC: InferRequestedOutputTensor's
// classification int64_param answers a BYTES output of Triton's strings,
// with the model's labels (fw.json's "0".."9" for digits_mlp) or a
// repository's (Instance.Config); wrong parameter types and outputs
// without an order are INVALID_ARGUMENT.
func TestClassification(t *testing.T) {
	fx := start(t, options{})
	x := rows(2, 64)
	cls := func(p *pb.InferParameter) (*pb.ModelInferResponse, error) {
		return fx.client.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "digits_mlp",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{2, 64}}},
			RawInputContents: [][]byte{f32bytes(x)},
			Outputs:          []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits", Parameters: map[string]*pb.InferParameter{"classification": p}}}})
	}
	resp, err := cls(&pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if o := resp.Outputs[0]; o.Datatype != "BYTES" || serving.ShapeString(o.Shape) != "[2,3]" {
		t.Fatalf("output %+v", o)
	}
	logits := direct(t, "digits_mlp.onnx", engine.FromFloat32([]int64{2, 64}, x))
	got := deserialize(t, resp.RawOutputContents[0])
	for r := 0; r < 2; r++ {
		best, bi := float32(-1e30), 0
		for c, v := range logits.Float32s()[r*10 : r*10+10] {
			if v > best {
				best, bi = v, c
			}
		}
		if want := strconv.FormatFloat(float64(best), 'f', 6, 64) + ":" + strconv.Itoa(bi) + ":" + strconv.Itoa(bi); got[r*3] != want {
			t.Fatalf("row %d: %q, want %q", r, got[r*3], want)
		}
	}
	resp, err = cls(&pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 50}})
	if err != nil || serving.ShapeString(resp.Outputs[0].Shape) != "[2,10]" {
		t.Fatalf("50 of 10 classes: %v %v", resp, err)
	}
	_, err = cls(&pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: "3"}})
	wantCode(t, err, codes.InvalidArgument, "expected int64_param")
	_, err = cls(&pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: -1}})
	wantCode(t, err, codes.InvalidArgument, `parameter "classification" is -1`)

	// A repository's label file, on Triton's simple (INT32).
	simple := start(t, options{model: testmodels.Triton(t, "simple"), name: "simple", prepare: func(inst *serving.Instance) error {
		inst.Config.Outputs[1].Labels = []string{"a", "b", "c"}
		return nil
	}})
	a := make([]byte, 64)
	for i := 0; i < 16; i++ {
		binary.LittleEndian.PutUint32(a[i*4:], uint32(i%3))
	}
	resp, err = simple.client.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "simple",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}}, {Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}}},
		RawInputContents: [][]byte{a, make([]byte, 64)},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT1", Parameters: map[string]*pb.InferParameter{
			"classification": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 2}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	// OUTPUT1 = INPUT0 - 0 = i mod 3: 2 first at i = 2 (label "c"), then at i = 5 (no label).
	if got := deserialize(t, resp.RawOutputContents[0]); !slices.Equal(got, []string{"2:2:c", "2:5"}) {
		t.Fatalf("simple classes %q", got)
	}
	str := start(t, options{model: testmodels.Triton(t, "simple_identity"), name: "simple_identity"})
	_, err = str.client.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "simple_identity",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{bytesInput("INPUT0", 1, 1)}, RawInputContents: [][]byte{serialize("a")},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0", Parameters: map[string]*pb.InferParameter{
			"classification": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 1}}}}}})
	wantCode(t, err, codes.InvalidArgument, "class result not available for output due to unsupported type 'BYTES'")
}
