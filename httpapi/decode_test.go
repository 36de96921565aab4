package httpapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/sharedmem"
)

// rowsBody builds {"data": [[...], ...]}: rows rows of width numbers.
func rowsBody(rows, width int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"data": [`)
	row := "[" + strings.TrimSuffix(strings.Repeat("0.5,", width), ",") + "]"
	for r := 0; r < rows; r++ {
		if r > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// allocated runs fn and returns the bytes it allocated on the heap.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func dataOf(t *testing.T, body []byte) jv {
	t.Helper()
	v, err := scanDoc(body)
	if err != nil {
		t.Fatalf("scanDoc: %v", err)
	}
	d := get(v.members(), "data")
	if d == nil {
		t.Fatal("no data")
	}
	return d
}

var mlpSpec = engine.TensorSpec{Name: "input", DType: engine.Float32, Shape: []int64{-1, 64}}

// A body of far more rows than --max-rows is refused with the exact count,
// and refusing it allocates (almost) nothing: the tree parser it replaces
// allocated about 80 bytes per number (gigabytes for 64 MB) before looking.
func TestDecodeRowsRefusesTooManyRowsWithoutAllocating(t *testing.T) {
	body := rowsBody(200_000, 64)
	var aerr *APIError
	n := allocated(func() {
		v, err := scanDoc(body)
		if err != nil {
			t.Fatal(err)
		}
		_, aerr = decodeRows(get(v.members(), "data"), mlpSpec, 4096)
	})
	if aerr == nil || aerr.Status != 413 {
		t.Fatalf("got %+v", aerr)
	}
	if d, _ := aerr.Details.(map[string]any); d["rows"] != 200_000 || d["max_rows"] != 4096 {
		t.Fatalf("details %v", aerr.Details)
	}
	if n > 64<<10 {
		t.Fatalf("refusing a %d-byte body allocated %d bytes", len(body), n)
	}
}

// At the row limit, decoding allocates the tensor once: within 4 times the
// body (here about 1x: 4-byte floats from 4-byte "0.5,").
func TestDecodeRowsAllocatesAboutTheTensor(t *testing.T) {
	body := rowsBody(4096, 64)
	var x engine.Tensor
	var aerr *APIError
	n := allocated(func() { x, aerr = decodeRows(dataOf(t, body), mlpSpec, 4096) })
	if aerr != nil {
		t.Fatal(aerr)
	}
	if want := 4096 * 64 * 4; len(x.Data) != want {
		t.Fatalf("%d bytes, want %d", len(x.Data), want)
	}
	if n > uint64(len(x.Data))+64<<10 || n > 4*uint64(len(body)) {
		t.Fatalf("decoding %d bytes allocated %d (tensor %d)", len(body), n, len(x.Data))
	}
	for i, f := range x.Float32s() {
		if f != 0.5 {
			t.Fatalf("element %d = %v", i, f)
		}
	}
}

// The same answers as before for the accepted shapes and dtypes.
func TestDecodeRowsValues(t *testing.T) {
	cases := []struct {
		doc   string
		spec  engine.TensorSpec
		shape []int64
		want  []float64
	}{
		{`[[1, 2.5, -3e2, 1e999]]`, engine.TensorSpec{Name: "x", DType: engine.Float32, Shape: []int64{-1, 4}}, []int64{1, 4}, []float64{1, 2.5, -300, math.Inf(1)}},
		{`[[[1,2],[3,4]]]`, engine.TensorSpec{Name: "x", DType: engine.Float32, Shape: []int64{-1, 4}}, []int64{1, 4}, []float64{1, 2, 3, 4}},
		{` [ [1,2,3,4] , [5,6,7,8] ] `, engine.TensorSpec{Name: "x", DType: engine.Float32, Shape: []int64{-1, 2, 2}}, []int64{2, 2, 2}, []float64{1, 2, 3, 4, 5, 6, 7, 8}},
		{`[[1, 2.0, -9007199254740992]]`, engine.TensorSpec{Name: "t", DType: engine.Int64, Shape: []int64{-1, 3}}, []int64{1, 3}, []float64{1, 2, -9007199254740992}},
		{`[[true, 0, false, 1]]`, engine.TensorSpec{Name: "m", DType: engine.Bool, Shape: []int64{-1, 4}}, []int64{1, 4}, []float64{1, 0, 0, 1}},
		{`[[255, 0]]`, engine.TensorSpec{Name: "u", DType: engine.Uint8, Shape: []int64{-1, 2}}, []int64{1, 2}, []float64{255, 0}},
		{`[[0.5, -2]]`, engine.TensorSpec{Name: "h", DType: engine.Float16, Shape: []int64{-1, 2}}, []int64{1, 2}, []float64{0.5, -2}},
		{`[[1.5], [2]]`, engine.TensorSpec{Name: "d", DType: engine.Float64, Shape: []int64{-1, 1}}, []int64{2, 1}, []float64{1.5, 2}},
		{`[1, 2, 3]`, engine.TensorSpec{Name: "any"}, []int64{3}, []float64{1, 2, 3}},
	}
	for _, c := range cases {
		v, err := scanDoc([]byte(c.doc))
		if err != nil {
			t.Fatalf("%s: %v", c.doc, err)
		}
		x, aerr := decodeRows(v, c.spec, 10)
		if aerr != nil {
			t.Fatalf("%s: %+v", c.doc, aerr)
		}
		if engine.FormatShape(x.Shape) != engine.FormatShape(c.shape) {
			t.Fatalf("%s: shape %v, want %v", c.doc, x.Shape, c.shape)
		}
		for i, w := range c.want {
			if got := x.At(i); got != w {
				t.Fatalf("%s: element %d = %v, want %v", c.doc, i, got, w)
			}
		}
	}
}

// Errors keep their classes and messages; none of these allocates a tensor
// for what the first row claims.
func TestDecodeRowsErrors(t *testing.T) {
	spec := engine.TensorSpec{Name: "x", DType: engine.Float32, Shape: []int64{-1, 4}}
	// Row 0 claims 1000^8 numbers per row along its first elements (which
	// overflowed int64 before, and sized the tensor from it).
	deep := "1"
	for d := 0; d < 8; d++ {
		deep = "[" + deep + strings.Repeat(",0", 999) + "]"
	}
	cases := []struct {
		doc      string
		spec     engine.TensorSpec
		status   int
		contains string
	}{
		{`{"a":1}`, spec, 422, "must be a JSON array of rows, got object"},
		{`[]`, spec, 422, "has no rows"},
		{`[[1,2,3,4],[1,2,3,4],[1,2,3,4]]`, spec, 413, "3 rows exceed the limit of 2"},
		{`[[1,2,3]]`, spec, 422, "per-sample shape [4] or hold 4 numbers"},
		{`[[1,2,3,4],[1,2]]`, spec, 422, "row 1 is ragged"},
		{`[[1,2,3,4],[1,2,3,4,5]]`, spec, 422, "row 1 is ragged"},
		{`[[1,2,3,"a"]]`, spec, 422, "holds a string where a number belongs"},
		{`[[1,2,3,null]]`, spec, 422, "holds a null where a number belongs"},
		{`[[1,2,3,[4]]]`, spec, 422, "holds a array where a number belongs"},
		{`[[1,2,3,1-2]]`, spec, 400, "is not a number"},
		{`[[[]]]`, spec, 422, "contains an empty array"},
		{`[[[[[[[[[[[1]]]]]]]]]]]`, spec, 422, "nested deeper than 9 levels"},
		{`[[1.5, 2]]`, engine.TensorSpec{Name: "t", DType: engine.Int64, Shape: []int64{-1, 2}}, 422, "row 0 holds 1.5"},
		{`[[300, 2]]`, engine.TensorSpec{Name: "u", DType: engine.Uint8, Shape: []int64{-1, 2}}, 422, "out of range"},
		{"[" + deep + "]", engine.TensorSpec{Name: "any"}, 422, "row 0 is ragged"},
		{"[[1,2,3,4]," + deep + "]", spec, 422, "row 1 holds a array"},
	}
	for _, c := range cases {
		v, err := scanDoc([]byte(c.doc))
		if err != nil {
			t.Fatalf("%.40s: %v", c.doc, err)
		}
		var aerr *APIError
		n := allocated(func() { _, aerr = decodeRows(v, c.spec, 2) })
		if aerr == nil || aerr.Status != c.status || !strings.Contains(aerr.Message, c.contains) {
			t.Fatalf("%.40s: got %+v, want %d %q", c.doc, aerr, c.status, c.contains)
		}
		if n > 64<<10 {
			t.Fatalf("%.40s: allocated %d bytes", c.doc, n)
		}
	}
}

// scanDoc accepts what fastjson accepted and refuses the rest with an offset.
func TestScanDoc(t *testing.T) {
	for _, ok := range []string{`{}`, ` [1, -2.5e3, NaN, -inf, +Infinity] `, `{"a":{"b":[true,false,null]},"c":"x\"y"}`, `"s"`, `0`} {
		if _, err := scanDoc([]byte(ok)); err != nil && !strings.Contains(ok, "Infinity") {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{``, `{`, `[1,]`, `{"a" 1}`, `{"a":1,}`, `[1] x`, `"abc`, `tru`, `{1:2}`, strings.Repeat("[", 301) + strings.Repeat("]", 301)} {
		if _, err := scanDoc([]byte(bad)); err == nil {
			t.Errorf("%.20q accepted", bad)
		}
	}
	v, _ := scanDoc([]byte(`{"d\u0061ta": [1], "id": "a\nb", "x": 1}`))
	ms := v.members()
	if len(ms) != 3 || string(get(ms, "data")) != "[1]" || string(rawID(get(ms, "id"))) != `"a\u000ab"` {
		t.Fatalf("members %v", ms)
	}
}

// v2Doc builds a V2 request with one input.
func v2Doc(t *testing.T, in map[string]any) []byte {
	b, err := json.Marshal(map[string]any{"inputs": []any{in}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every size a V2 request states is checked before it is used: shape
// products, the batch axis against --max-rows, binary_data_size and the
// header, with no allocation for what the request only claims.
func TestV2SizesChecked(t *testing.T) {
	ins := []engine.TensorSpec{{Name: "input", DType: engine.Float32, Shape: []int64{-1, 64}}}
	outs := []engine.TensorSpec{{Name: "logits", DType: engine.Float32, Shape: []int64{-1, 10}}}
	raw := make([]byte, 2*64*4)
	bin := func(shape []int64, size any) ([]byte, string) {
		j := v2Doc(t, map[string]any{"name": "input", "datatype": "FP32", "shape": shape, "parameters": map[string]any{"binary_data_size": size}})
		return append(j, raw...), strconv.Itoa(len(j))
	}
	type tc struct {
		name     string
		body     []byte
		hdr      string
		status   int
		contains string
	}
	var cases []tc
	add := func(name string, body []byte, hdr string, status int, contains string) {
		cases = append(cases, tc{name, body, hdr, status, contains})
	}
	b, h := bin([]int64{2, 64}, 512)
	add("binary ok", b, h, 0, "")
	b, h = bin([]int64{2, 64}, "9223372036854775807")
	add("size not an integer", b, h, 400, `"binary_data_size" must be a non-negative integer`)
	b, h = bin([]int64{2, 64}, int64(math.MaxInt64))
	add("size beyond the body", b, h, 400, "only 512 bytes of binary data remain")
	b, h = bin([]int64{2, 64}, -4)
	add("negative size", b, h, 400, "non-negative integer")
	b, h = bin([]int64{2, 64}, 256)
	add("size short of the body", b, h, 422, "needs 512 bytes of binary data, binary_data_size is 256")
	b, h = bin([]int64{1 << 62, 64}, 512)
	add("shape overflows", b, h, 400, "causes total element count to exceed maximum size of")
	b, h = bin([]int64{1 << 60, 4}, 512)
	add("shape bytes overflow", b, h, 400, "byte size overflow for input 'input': element count (4611686018427387904) * data type size (4)")
	b, h = bin([]int64{1 << 20, 1 << 20}, 512)
	add("shape beyond the size", b, h, 422, "binary_data_size is 512")
	b, _ = bin([]int64{2, 64}, 512)
	add("header negative", b, "-5", 400, v2HeaderLength)
	add("header beyond body", b, strconv.Itoa(len(b)+1), 400, v2HeaderLength)
	add("header overflows", b, "99999999999999999999", 400, v2HeaderLength)
	// 5000 rows of 64 FP32 on the batch axis, sizes consistent: --max-rows.
	big := make([]byte, 5000*64*4)
	j := v2Doc(t, map[string]any{"name": "input", "datatype": "FP32", "shape": []int64{5000, 64}, "parameters": map[string]any{"binary_data_size": len(big)}})
	add("binary rows above max", append(j, big...), strconv.Itoa(len(j)), 413, "--max-rows")
	add("json rows above max", v2Doc(t, map[string]any{"name": "input", "datatype": "FP32", "shape": []int64{5000, 64}, "data": make([]int, 5000*64)}), "", 413, "--max-rows")
	add("json shape beyond data", v2Doc(t, map[string]any{"name": "input", "datatype": "FP32", "shape": []int64{1 << 40, 64}, "data": make([]int, 64)}), "", 422, `"data" holds 64`)
	add("json shape vs data", v2Doc(t, map[string]any{"name": "input", "datatype": "FP32", "shape": []int64{2, 64}, "data": make([]int, 129)}), "", 422, `needs 128 elements, "data" holds 129`)
	add("shape not integers", v2Doc(t, map[string]any{"name": "input", "datatype": "FP32", "shape": []any{2.5, 64}, "data": []int{1}}), "", 500, "Unable to parse 'shape'")
	add("too many axes", v2Doc(t, map[string]any{"name": "input", "datatype": "FP32", "shape": make([]int, 40), "data": []int{}}), "", 400, "at most 32")
	for _, c := range cases {
		var h []byte
		if c.hdr != "" {
			h = []byte(c.hdr)
		}
		var req *v2Request
		var aerr *APIError
		n := allocated(func() { req, aerr = parseV2Request(c.body, h, ins, outs, v2Limits{maxRows: 4096}, nil) })
		if c.status == 0 {
			if aerr != nil || len(req.inputs[0].Data) != 512 {
				t.Fatalf("%s: %+v", c.name, aerr)
			}
			continue
		}
		if aerr == nil || aerr.Status != c.status || !strings.Contains(aerr.Message, c.contains) {
			t.Fatalf("%s: got %+v, want %d %q", c.name, aerr, c.status, c.contains)
		}
		if n > 64<<10 {
			t.Fatalf("%s: refusing it allocated %d bytes", c.name, n)
		}
	}
}

// A V2 JSON request decodes straight into the tensor: nested or flat data,
// bools, integers.
func TestV2JSONValues(t *testing.T) {
	ins := []engine.TensorSpec{{Name: "x", DType: engine.Float32, Shape: []int64{-1, 2}}, {Name: "m", DType: engine.Bool, Shape: []int64{-1, 2}}, {Name: "t", DType: engine.Int32, Shape: []int64{-1, 2}}}
	outs := []engine.TensorSpec{{Name: "y", DType: engine.Float32, Shape: []int64{-1}}}
	body := []byte(`{"id":"r\u0031","inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3.5,-4]]},` +
		`{"name":"m","shape":[1,2],"datatype":"BOOL","data":[true,0]},{"name":"t","shape":[1,2],"datatype":"INT32","data":[7,-2.0]}],"outputs":[{"name":"y","parameters":{"binary_data":true}}]}`)
	req, aerr := parseV2Request(body, nil, ins, outs, v2Limits{maxRows: 10}, nil)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if string(req.id) != `"r1"` || len(req.outputs) != 1 || !req.outputs[0].binary {
		t.Fatalf("id %s outputs %+v", req.id, req.outputs)
	}
	if got := req.inputs[0].Float32s(); got[0] != 1 || got[2] != 3.5 || got[3] != -4 {
		t.Fatalf("x = %v", got)
	}
	if d := req.inputs[1].Data; d[0] != 1 || d[1] != 0 {
		t.Fatalf("m = %v", d)
	}
	if a, b := int32(binary.LittleEndian.Uint32(req.inputs[2].Data)), int32(binary.LittleEndian.Uint32(req.inputs[2].Data[4:])); a != 7 || b != -2 {
		t.Fatalf("t = %d %d", a, b)
	}
}

// The NDJSON byte budget holds a line back until the lines in flight leave
// room, and always lets one line through alone.
func TestByteBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newByteBudget(100)
		b.acquire(60)
		done := make(chan struct{})
		go func() { b.acquire(50); close(done) }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("50 bytes admitted while 60 of 100 are held")
		default:
		}
		b.release(60)
		<-done
		b.release(50)
		b.acquire(1000) // alone, any size passes
		b.release(1000)
	})
}

// BYTES sizes are checked before they are used, as the fixed-size ones:
// a shape claiming more strings than the data can hold, a binary size
// below the 4-byte lengths, a length prefix of 4 GiB, are refused without
// allocating what they claim.
func TestV2BytesSizesChecked(t *testing.T) {
	ins := []engine.TensorSpec{{Name: "s", DType: engine.String, Shape: []int64{-1, -1}}}
	outs := []engine.TensorSpec{{Name: "y", DType: engine.String, Shape: []int64{-1, -1}}}
	bin := func(shape []int64, raw []byte, size int) ([]byte, []byte) {
		j := v2Doc(t, map[string]any{"name": "s", "datatype": "BYTES", "shape": shape, "parameters": map[string]any{"binary_data_size": size}})
		return append(j, raw...), []byte(strconv.Itoa(len(j)))
	}
	huge := []byte{0xff, 0xff, 0xff, 0xff, 'a', 'b'}
	for _, c := range []struct {
		name     string
		shape    []int64
		raw      []byte
		size     int
		status   int
		contains string
	}{
		{"4 GiB length", []int64{1, 1}, huge, 6, 422, "its length 4294967295 runs past"},
		{"2^40 strings claimed", []int64{1 << 20, 1 << 20}, huge, 6, 422, "needs at least 4398046511104 bytes"},
		{"overflowing shape", []int64{1 << 62, 4}, huge, 6, 400, "causes total element count to exceed maximum size of 9223372036854775807"},
		{"overflowing bytes", []int64{1 << 61, 2}, huge, 6, 400, "byte size overflow for input 's'"},
		{"size below the lengths", []int64{1, 2}, huge[:4], 4, 422, "needs at least 8 bytes"},
	} {
		body, h := bin(c.shape, c.raw, c.size)
		var aerr *APIError
		n := allocated(func() { _, aerr = parseV2Request(body, h, ins, outs, v2Limits{}, nil) })
		if aerr == nil || aerr.Status != c.status || !strings.Contains(aerr.Message, c.contains) {
			t.Fatalf("%s: got %+v, want %d %q", c.name, aerr, c.status, c.contains)
		}
		if n > 64<<10 {
			t.Fatalf("%s: refusing it allocated %d bytes", c.name, n)
		}
	}
	body := v2Doc(t, map[string]any{"name": "s", "datatype": "BYTES", "shape": []int64{1 << 40, 2}, "data": []string{"a", "b"}})
	var aerr *APIError
	if n := allocated(func() { _, aerr = parseV2Request(body, nil, ins, outs, v2Limits{}, nil) }); aerr == nil || n > 64<<10 {
		t.Fatalf("JSON shape of 2^41 strings: %+v after %d bytes", aerr, n)
	}
}

// A shared memory input is read only once its window is known to lie in
// its registered region: a request claiming a gigabyte of a small region
// is refused without allocating it (fw once allocated the claimed size
// first, so a hostile request could exhaust memory).
func TestV2SharedMemoryRefusedBeforeAllocating(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "small"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := sharedmem.New(dir, true)
	defer reg.Close()
	if err := reg.Register("small", "/small", 0, 4096); err != nil {
		t.Fatal(err)
	}
	ins := []engine.TensorSpec{{Name: "x", DType: engine.Float32, Shape: []int64{-1, -1}}, {Name: "s", DType: engine.String, Shape: []int64{-1}}}
	outs := []engine.TensorSpec{{Name: "y", DType: engine.Float32, Shape: []int64{-1}}}
	shm := func(name, dt string, shape []int64, size int64) map[string]any {
		return map[string]any{"name": name, "datatype": dt, "shape": shape, "parameters": map[string]any{
			"shared_memory_region": "small", "shared_memory_byte_size": size}}
	}
	for _, body := range [][]byte{
		v2Marshal(t, map[string]any{"inputs": []any{shm("x", "FP32", []int64{1, 1 << 28}, 1<<30), shm("s", "BYTES", []int64{1}, 8)}}),
		v2Marshal(t, map[string]any{"inputs": []any{shm("x", "FP32", []int64{1, 1}, 4), shm("s", "BYTES", []int64{1}, 1<<30)}}),
	} {
		var aerr *APIError
		n := allocated(func() { _, aerr = parseV2Request(body, nil, ins, outs, v2Limits{}, reg) })
		if aerr == nil || aerr.Status != 400 || !strings.Contains(aerr.Message, "Invalid offset + byte size for shared memory region: 'small'") {
			t.Fatalf("got %+v", aerr)
		}
		if n > 64<<10 {
			t.Fatalf("refusing it allocated %d bytes", n)
		}
	}
}
