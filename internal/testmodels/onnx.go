package testmodels

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// ONNX element types (TensorProto.DataType), as engine.DType numbers them.
const (
	ONNXFloat    = 1
	ONNXUint8    = 2
	ONNXInt8     = 3
	ONNXUint16   = 4
	ONNXInt16    = 5
	ONNXInt32    = 6
	ONNXInt64    = 7
	ONNXString   = 8
	ONNXBool     = 9
	ONNXFloat16  = 10
	ONNXDouble   = 11
	ONNXUint32   = 12
	ONNXUint64   = 13
	ONNXBFloat16 = 16
	ONNXComplex  = 14
	ONNXFloat8   = 17 // float8e4m3fn: ONNX Runtime takes it, fw does not
)

// ValueInfo is a graph input or output: its name, element type and dims,
// each an int (a fixed size) or a string (a named dynamic axis).
type ValueInfo struct {
	Name string
	Type int
	Dims []any
}

// Node is one operator of a graph; IntAttrs are its integer attributes
// (Cast's "to").
type Node struct {
	Op       string
	Inputs   []string
	Outputs  []string
	IntAttrs map[string]int64
}

// WriteONNX writes a small ONNX model (IR 9, opset 19) of nodes to
// dir/name and returns its path: tests make models of any element type
// without Python (the protobuf is written field by field).
func WriteONNX(t testing.TB, dir, name string, nodes []Node, inputs, outputs []ValueInfo) string {
	t.Helper()
	var graph []byte
	for _, n := range nodes {
		var nb []byte
		for _, in := range n.Inputs {
			nb = protowire.AppendTag(nb, 1, protowire.BytesType)
			nb = protowire.AppendString(nb, in)
		}
		for _, out := range n.Outputs {
			nb = protowire.AppendTag(nb, 2, protowire.BytesType)
			nb = protowire.AppendString(nb, out)
		}
		nb = protowire.AppendTag(nb, 4, protowire.BytesType)
		nb = protowire.AppendString(nb, n.Op)
		for k, v := range n.IntAttrs {
			var ab []byte
			ab = protowire.AppendTag(ab, 1, protowire.BytesType)
			ab = protowire.AppendString(ab, k)
			ab = protowire.AppendTag(ab, 3, protowire.VarintType)
			ab = protowire.AppendVarint(ab, uint64(v))
			ab = protowire.AppendTag(ab, 20, protowire.VarintType)
			ab = protowire.AppendVarint(ab, 2) // AttributeProto.INT
			nb = protowire.AppendTag(nb, 5, protowire.BytesType)
			nb = protowire.AppendBytes(nb, ab)
		}
		graph = protowire.AppendTag(graph, 1, protowire.BytesType)
		graph = protowire.AppendBytes(graph, nb)
	}
	graph = protowire.AppendTag(graph, 2, protowire.BytesType)
	graph = protowire.AppendString(graph, name)
	for _, vi := range inputs {
		graph = protowire.AppendTag(graph, 11, protowire.BytesType)
		graph = protowire.AppendBytes(graph, valueInfo(vi))
	}
	for _, vi := range outputs {
		graph = protowire.AppendTag(graph, 12, protowire.BytesType)
		graph = protowire.AppendBytes(graph, valueInfo(vi))
	}
	var model []byte
	model = protowire.AppendTag(model, 1, protowire.VarintType)
	model = protowire.AppendVarint(model, 9) // ir_version
	model = protowire.AppendTag(model, 2, protowire.BytesType)
	model = protowire.AppendString(model, "fw.testmodels")
	model = protowire.AppendTag(model, 7, protowire.BytesType)
	model = protowire.AppendBytes(model, graph)
	var opset []byte
	opset = protowire.AppendTag(opset, 1, protowire.BytesType)
	opset = protowire.AppendString(opset, "")
	opset = protowire.AppendTag(opset, 2, protowire.VarintType)
	opset = protowire.AppendVarint(opset, 19)
	model = protowire.AppendTag(model, 8, protowire.BytesType)
	model = protowire.AppendBytes(model, opset)
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, model, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Identity writes dir/name: INPUT0 -> OUTPUT0 = INPUT0, of element type typ
// and dims (Triton's simple_identity is Identity(ONNXString, "batch", "n")).
func Identity(t testing.TB, dir, name string, typ int, dims ...any) string {
	t.Helper()
	return WriteONNX(t, dir, name, []Node{{Op: "Identity", Inputs: []string{"INPUT0"}, Outputs: []string{"OUTPUT0"}}},
		[]ValueInfo{{Name: "INPUT0", Type: typ, Dims: dims}}, []ValueInfo{{Name: "OUTPUT0", Type: typ, Dims: dims}})
}

func valueInfo(vi ValueInfo) []byte {
	var shape []byte
	for _, d := range vi.Dims {
		var db []byte
		switch d := d.(type) {
		case int:
			db = protowire.AppendTag(db, 1, protowire.VarintType)
			db = protowire.AppendVarint(db, uint64(d))
		case string:
			db = protowire.AppendTag(db, 2, protowire.BytesType)
			db = protowire.AppendString(db, d)
		}
		shape = protowire.AppendTag(shape, 1, protowire.BytesType)
		shape = protowire.AppendBytes(shape, db)
	}
	var tensor []byte
	tensor = protowire.AppendTag(tensor, 1, protowire.VarintType)
	tensor = protowire.AppendVarint(tensor, uint64(vi.Type))
	tensor = protowire.AppendTag(tensor, 2, protowire.BytesType)
	tensor = protowire.AppendBytes(tensor, shape)
	var typ []byte
	typ = protowire.AppendTag(typ, 1, protowire.BytesType)
	typ = protowire.AppendBytes(typ, tensor)
	var out []byte
	out = protowire.AppendTag(out, 1, protowire.BytesType)
	out = protowire.AppendString(out, vi.Name)
	out = protowire.AppendTag(out, 2, protowire.BytesType)
	return protowire.AppendBytes(out, typ)
}
