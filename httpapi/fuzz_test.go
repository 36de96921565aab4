package httpapi

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"strconv"
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
	f.Add([]byte(`[["a", "\u00e9"], ["", "\ud800"]]`), uint8(6))
	f.Add([]byte(`[[18446744073709551615, 0]]`), uint8(7))
	specs := []engine.TensorSpec{
		{Name: "x", DType: engine.Float32, Shape: []int64{-1, 4}},
		{Name: "img", DType: engine.Float32, Shape: []int64{-1, 1, 2, 2}},
		{Name: "tok", DType: engine.Int64, Shape: []int64{-1, 4}},
		{Name: "any", DType: engine.Invalid},
		{Name: "small", DType: engine.Uint8, Shape: []int64{-1, -1}},
		{Name: "half", DType: engine.Float16, Shape: []int64{-1, 2}},
		{Name: "text", DType: engine.String, Shape: []int64{-1, 2}},
		{Name: "u64", DType: engine.Uint64, Shape: []int64{-1, 2}},
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
		if err := x.Check(); err != nil {
			t.Fatalf("tensor %v %s: %v", x.Shape, x.DType, err)
		}
		if spec.DType != engine.Invalid && x.DType != spec.DType {
			t.Fatalf("dtype %s, want %s", x.DType, spec.DType)
		}
	})
}

// FuzzFastFloat: where the one-pass number reader answers, it ends where
// numberEnd does and gives strconv.ParseFloat's value bit for bit.
func FuzzFastFloat(f *testing.F) {
	for _, s := range []string{"0", "-0", "1.5", "0.01", "-12.345e-3", "1e22", "9007199254740993", "123456789012345678901",
		"0.000000000000000000000001", "1E+5,", "1-2", "1.2.3", "01", "1.]", "-.5", "1e", "inf", "0.1e-400"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, end, ok := fastFloat(b, 0)
		if !ok {
			if end != 0 {
				t.Fatalf("%q: not ok but end %d", b, end)
			}
			return
		}
		if want := numberEnd(b, 0); end != want {
			t.Fatalf("%q: end %d, numberEnd %d", b, end, want)
		}
		want, err := strconv.ParseFloat(string(b[:end]), 64)
		if err != nil || math.Float64bits(v) != math.Float64bits(want) {
			t.Fatalf("%q: %v (%x), strconv: %v (%x) %v", b[:end], v, math.Float64bits(v), want, math.Float64bits(want), err)
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

// FuzzV2BytesRequest feeds arbitrary bodies with BYTES inputs, JSON or in
// the binary extension's serialized form, to the V2 request parser: it
// must never panic, allocate only what the body can carry, and accept
// only tensors whose serialized data holds exactly their shape's strings.
func FuzzV2BytesRequest(f *testing.F) {
	ins := []engine.TensorSpec{
		{Name: "s", DType: engine.String, Shape: []int64{-1, -1}},
		{Name: "n", DType: engine.Int32, Shape: []int64{-1, 1}},
	}
	outs := []engine.TensorSpec{{Name: "y", DType: engine.Float32, Shape: []int64{-1, 3}}}
	n := `{"name":"n","shape":[1,1],"datatype":"INT32","data":[1]}`
	f.Add([]byte(`{"inputs":[{"name":"s","shape":[1,2],"datatype":"BYTES","data":["a","\u00e9\ud83d\ude00"]},`+n+`]}`), "")
	f.Add([]byte(`{"inputs":[{"name":"s","shape":[2,1],"datatype":"BYTES","data":[["x\ny"],["\ud800"]]},`+n+`],"outputs":[{"name":"y","parameters":{"classification":2}}]}`), "")
	hdr := `{"inputs":[{"name":"s","shape":[1,2],"datatype":"BYTES","parameters":{"binary_data_size":10}},` + n + `]}`
	raw := []byte{1, 0, 0, 0, 'a', 1, 0, 0, 0, 'b'}
	f.Add(append([]byte(hdr), raw...), strconv.Itoa(len(hdr)))
	f.Add(append([]byte(hdr), 0xff, 0xff, 0xff, 0xff, 'a', 0, 0, 0, 0, 0), strconv.Itoa(len(hdr)))
	f.Add(append([]byte(hdr), 0, 0, 0, 0x80, 'a', 0, 0, 0, 0, 0), strconv.Itoa(len(hdr)))
	f.Add([]byte(`{"inputs":[{"name":"s","shape":[4611686018427387903,2],"datatype":"BYTES","data":["a"]},`+n+`]}`), "")
	f.Add([]byte(`{"inputs":[{"name":"s","shape":[1,1],"datatype":"BYTES","data":["\x"]},`+n+`]}`), "")
	f.Add([]byte(`{"inputs":[{"name":"s","shape":[.],"datatype":"BYTES","data":["a"]},`+n+`]}`), "")
	f.Add([]byte(`{"inputs":[{"name":"s","shape":[-1,1],"datatype":"BYTES","data":["a"]},`+n+`]}`), "")
	f.Fuzz(func(t *testing.T, body []byte, hl string) {
		if len(body) > 1<<20 || len(hl) > 64 {
			return
		}
		var h []byte
		if hl != "" {
			h = []byte(hl)
		}
		req, aerr := parseV2Request(body, h, ins, outs, v2Limits{}, nil)
		if aerr != nil {
			// 500 is Triton's status for a shape its JSON reader cannot
			// take as unsigned integers; fw answers it (code bad_request).
			badShape := aerr.Status == 500 && aerr.Code == CodeBadRequest
			if req != nil || aerr.Message == "" || (aerr.Status != 400 && aerr.Status != 422 && !badShape) {
				t.Fatalf("bad error: %+v", aerr)
			}
			return
		}
		for i, x := range req.inputs {
			if x.DType != ins[i].DType {
				t.Fatalf("input %d: dtype %s", i, x.DType)
			}
			if err := x.Check(); err != nil {
				t.Fatalf("input %d accepted malformed: %v", i, err)
			}
			if len(x.Data) > 4*len(body)+4 {
				t.Fatalf("input %d: %d bytes from a %d-byte body", i, len(x.Data), len(body))
			}
		}
	})
}

// FuzzStringElement: the JSON string decoder never panics, never writes
// more than the string's own length plus its 4-byte prefix, and what it
// accepts is one well-formed element.
func FuzzStringElement(f *testing.F) {
	for _, s := range []string{`""`, `"a"`, `"\u00e9\ud83d\ude00"`, `"\ud800\ud800"`, `"\"\\\/\b\f\n\r\t"`, `"\u12"`, `"\q"`, `"a\"`, "\"\xff\x00\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' || len(s) > 1<<16 {
			return
		}
		out, err := appendStringElement(nil, jv(s))
		if err != nil {
			if len(out) != 0 {
				t.Fatalf("a refused string left %d bytes", len(out))
			}
			return
		}
		if len(out) > len(s)+2 {
			t.Fatalf("%d bytes from a %d-byte string", len(out), len(s))
		}
		if err := engine.CheckStrings(out, 1); err != nil {
			t.Fatalf("malformed element: %v", err)
		}
	})
}
