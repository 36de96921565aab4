//go:build cgo

package engine

import (
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/testmodels"
	ort "github.com/yalue/onnxruntime_go"
)

// fillStrings checks the serialized data itself, whatever its caller
// checked: a length past the end, data cut inside a length, bytes after the
// last element and an element count that is not the tensor's are refused
// with the reason, and the tensor is released on every error path
// (ortStringInput).
func TestFillStringsRefusesBadData(t *testing.T) {
	mustLoad(t, testmodels.Identity(t, t.TempDir(), "s.onnx", testmodels.ONNXString, "batch", "n"), Options{})
	good := ser("a\x00", "")
	for _, c := range []struct {
		name  string
		shape []int64
		data  []byte
		want  string
	}{
		{"length past the end", []int64{1, 2}, good[:len(good)-1], "element 1: the data ends inside its 4-byte length"},
		{"4 GiB length", []int64{1, 1}, []byte{0xff, 0xff, 0xff, 0xff, 'a'}, "element 0: its length 4294967295 runs past the end of the data (1 bytes left)"},
		{"cut element", []int64{1, 1}, ser("abc")[:6], "element 0: its length 3 runs past the end of the data (2 bytes left)"},
		{"bytes after", []int64{1, 1}, ser("a", "b"), "5 bytes follow the 1 elements"},
		{"fewer bytes than elements", []int64{1, 3}, good, "element 2: the data ends inside its 4-byte length"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := ortStringInput(Tensor{DType: String, Shape: c.shape, Data: c.data})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				if v != nil {
					v.Destroy()
				}
				t.Fatalf("%v, want %q", err, c.want)
			}
		})
	}
	v, err := ort.NewStringTensor(ort.NewShape(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := fillStrings(ortRuntime.api, v, good, 3); err == nil || !strings.Contains(err.Error(), "the tensor has 2 elements, the data 3") {
		t.Fatalf("a count that is not the tensor's: %v", err)
	}
	if err := fillStrings(ortRuntime.api, v, good, 2); err != nil {
		t.Fatal(err)
	}
	if got, err := v.GetContents(); err != nil || len(got) != 2 || got[0] != "a\x00" || got[1] != "" {
		t.Fatalf("filled %q %v", got, err)
	}
	v.Destroy()
	if err := fillStrings(ortRuntime.api, v, good, 2); err == nil || !strings.Contains(err.Error(), "has no OrtValue") {
		t.Fatalf("a destroyed tensor: %v", err)
	}
}
