package httpapi

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/fw-serve/fw/engine"
)

// FuzzDecodeRows feeds arbitrary JSON to the /predict row decoder for a
// few input specs: it must never panic, and anything it accepts must be a
// tensor whose data matches its shape and dtype.
func FuzzDecodeRows(f *testing.F) {
	f.Add([]byte(`[[1,2,3,4]]`), uint8(0))
	f.Add([]byte(`[[[[1,2],[3,4]]]]`), uint8(1))
	f.Add([]byte(`[[1.5, 2e3, -0, 1e400]]`), uint8(2))
	f.Add([]byte(`[["a"], [null], [true]]`), uint8(0))
	f.Add([]byte(`[[1,2],[3]]`), uint8(3))
	f.Add([]byte(`[[[[[[[[[[[1]]]]]]]]]]]`), uint8(3))
	specs := []engine.TensorSpec{
		{Name: "x", DType: engine.Float32, Shape: []int64{-1, 4}},
		{Name: "img", DType: engine.Float32, Shape: []int64{-1, 1, 2, 2}},
		{Name: "tok", DType: engine.Int64, Shape: []int64{-1, 4}},
		{Name: "any", DType: engine.Invalid},
		{Name: "small", DType: engine.Uint8, Shape: []int64{-1, -1}},
		{Name: "half", DType: engine.Float16, Shape: []int64{-1, 2}},
	}
	f.Fuzz(func(t *testing.T, doc []byte, which uint8) {
		if len(doc) > 1<<16 {
			return
		}
		v, err := scanDoc(doc)
		if err != nil {
			return
		}
		spec := specs[int(which)%len(specs)]
		x, aerr := decodeRows(v, spec, 1000)
		if aerr != nil {
			if aerr.Status < 400 || aerr.Message == "" {
				t.Fatalf("bad error %+v", aerr)
			}
			return
		}
		if want := engine.NumElements(x.Shape) * int64(x.DType.Size()); int64(len(x.Data)) != want {
			t.Fatalf("tensor %v %s holds %d bytes, want %d", x.Shape, x.DType, len(x.Data), want)
		}
		if spec.DType != engine.Invalid && x.DType != spec.DType {
			t.Fatalf("dtype %s, want %s", x.DType, spec.DType)
		}
	})
}

// FuzzReadLine: the NDJSON line reader never panics, never returns a line
// longer than the limit, and reassembles the input's lines.
func FuzzReadLine(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc"), 2)
	f.Add([]byte("{\"id\":1}\r\n{\"id\":2}\n"), 100)
	f.Add(bytes.Repeat([]byte("x"), 70000), 10)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max < 1 || max > 1<<20 || len(data) > 1<<18 {
			return
		}
		r := bufio.NewReaderSize(bytes.NewReader(data), 16)
		var line []byte
		for i := 0; i < len(data)+2; i++ {
			var err error
			line, err = readLine(r, line[:0], max)
			if len(line) > max+1 {
				t.Fatalf("line of %d bytes past limit %d", len(line), max)
			}
			if err != nil && !errors.Is(err, errLineTooLong) {
				if err != io.EOF {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
		}
		t.Fatalf("reader did not reach EOF")
	})
}
