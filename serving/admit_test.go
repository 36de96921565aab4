package serving

import (
	"strings"
	"testing"

	"github.com/fw-serve/fw/engine"
)

func TestInputAndOutputSets(t *testing.T) {
	ins := []engine.TensorSpec{{Name: "a", DType: engine.Float32, Shape: []int64{-1, 2}}, {Name: "b", DType: engine.Int64, Shape: []int64{-1}}}
	s := NewInputSet(ins)
	if i, e := s.Take("b"); i != 1 || e != nil {
		t.Fatalf("take b: %d %v", i, e)
	}
	if e := s.Missing(); e == nil || !e.Invalid || e.Details["input"] != "a" || !strings.Contains(e.Message, `input "a" is missing`) {
		t.Fatalf("missing: %+v", e)
	}
	if _, e := s.Take("b"); e == nil || e.Invalid || !strings.HasPrefix(e.Message, "input 'b' already exists in request") {
		t.Fatalf("twice: %+v", e)
	}
	if _, e := s.Take("c"); e == nil || !e.Invalid || !strings.HasPrefix(e.Message, `unknown input "c"; this model takes`) {
		t.Fatalf("unknown: %+v", e)
	}
	if _, e := s.Take("a"); e != nil || s.Missing() != nil {
		t.Fatalf("all given: %v %v", e, s.Missing())
	}
	o := NewOutputSet(ins)
	if i, e := o.Take("a"); i != 0 || e != nil {
		t.Fatalf("output a: %d %v", i, e)
	}
	if _, e := o.Take("a"); e == nil || !strings.HasPrefix(e.Message, "output 'a' already exists in request") {
		t.Fatalf("output twice: %+v", e)
	}
	if _, e := o.Take("z"); e == nil || e.Details["output"] != "z" {
		t.Fatalf("unknown output: %+v", e)
	}
}

func TestInputDatatypeAndAxes(t *testing.T) {
	spec := engine.TensorSpec{Name: "x", DType: engine.Float32}
	if dt, e := InputDatatype("x", "FP32", spec); dt != engine.Float32 || e != nil {
		t.Fatalf("FP32: %v %v", dt, e)
	}
	if _, e := InputDatatype("x", "INT64", spec); e == nil || !strings.Contains(e.Message, "has datatype INT64 but this model takes FP32") {
		t.Fatalf("INT64: %+v", e)
	}
	if _, e := InputDatatype("x", "FLOAT", spec); e == nil || !strings.Contains(e.Message, `datatype "FLOAT" is not one of the protocol's`) {
		t.Fatalf("FLOAT: %+v", e)
	}
	if dt, e := InputDatatype("x", "INT8", engine.TensorSpec{Name: "x"}); dt != engine.Int8 || e != nil {
		t.Fatalf("any dtype: %v %v", dt, e)
	}
	if TooManyAxes("x", MaxAxes) != nil || TooManyAxes("x", MaxAxes+1) == nil {
		t.Fatal("axes limit")
	}
	if e := SharedMemoryOff(`output "y"`); !strings.HasPrefix(e.Message, `output "y": system shared memory is turned off`) {
		t.Fatalf("shm off: %+v", e)
	}
}

// An optional input may be left out; a required one may not.
func TestOptionalInputs(t *testing.T) {
	specs := []engine.TensorSpec{{Name: "A", DType: engine.Int32}, {Name: "B", DType: engine.Int32, Optional: true}}
	s := NewInputSet(specs)
	if _, err := s.Take("A"); err != nil {
		t.Fatal(err)
	}
	if err := s.Missing(); err != nil {
		t.Fatalf("optional B left out: %v", err)
	}
	s = NewInputSet(specs)
	if _, err := s.Take("B"); err != nil {
		t.Fatal(err)
	}
	if err := s.Missing(); err == nil || !strings.Contains(err.Message, `"A" is missing`) {
		t.Fatalf("required A left out: %v", err)
	}
}
