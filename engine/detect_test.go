package engine

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func zipBytes(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range files {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func loadCode(t *testing.T, path string) string {
	t.Helper()
	_, err := DetectFile(path)
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("DetectFile(%s) = %v, want a *LoadError", path, err)
	}
	if le.Msg == "" || le.Error() == "" {
		t.Fatalf("empty error message for %s", path)
	}
	return le.Code
}

func TestDetectRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	f := func(name string, data []byte, wantCode string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if data != nil {
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := loadCode(t, p); got != wantCode {
			t.Errorf("%s: code %q, want %q", name, got, wantCode)
		}
	}
	f("missing.onnx", nil, CodeNotFound)
	f("empty.onnx", []byte{}, CodeEmpty)
	f("pickle-proto2.pt", []byte("\x80\x02}q\x00(X\x05\x00\x00\x00layerq\x01"), CodePickle)
	f("pickle-proto4.pt", []byte("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00"), CodePickle)
	f("state_dict.pt", zipBytes(t, map[string]string{"archive/data.pkl": "\x80\x02}.", "archive/version": "3"}), CodePickle)
	f("other.zip", zipBytes(t, map[string]string{"readme.txt": "hi"}), CodeUnknownFormat)
	f("text.onnx", []byte("this is not a model, just some text\n"), CodeUnknownFormat)
	f("html.onnx", []byte("<!doctype html><html>404</html>"), CodeUnknownFormat)
	f("bad-meta.ts.pt", zipBytes(t, map[string]string{"m/code/__torch__/m.py": "", "m/constants.pkl": "", "m/extra/fw.json": "{not json"}), CodeBadMetadata)
	f("zip-truncated.pt", zipBytes(t, map[string]string{"m/code/x.py": "x"})[:30], CodeTruncated)
	// A protobuf-looking file whose first length-delimited field runs past the end.
	f("truncated.onnx", []byte{0x08, 0x07, 0x3a, 0xff, 0x7f, 0x01}, CodeTruncated)
	if got := loadCode(t, dir); got != CodeUnknownFormat {
		t.Errorf("directory: code %q", got)
	}
}

func TestDetectTorchScriptZipWithMetadata(t *testing.T) {
	meta := `{"fw_format":1,"name":"m","version":"2","format":"quantized","inputs":[{"name":"x","dtype":"float32","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"float32","shape":[-1,2]}]}`
	p := writeFile(t, "m.pt", zipBytes(t, map[string]string{"m/code/__torch__/m.py": "", "m/constants.pkl": "", "m/extra/fw.json": meta}))
	info, err := DetectFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if info.Format != FormatQuantized || info.Metadata == nil || info.Metadata.Version != "2" {
		t.Fatalf("got %+v", info)
	}
}

func TestParseMetadataRules(t *testing.T) {
	f := func(doc string, ok bool) {
		t.Helper()
		_, err := ParseMetadata([]byte(doc))
		if (err == nil) != ok {
			t.Errorf("ParseMetadata(%s): err=%v, want ok=%v", doc, err, ok)
		}
	}
	io := `"inputs":[{"name":"x","dtype":"float32","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"float32","shape":[-1,2]}]`
	f(`{"fw_format":1,"name":"m",`+io+`}`, true)
	f(`{"fw_format":3,"name":"m",`+io+`}`, false) // newer than we know
	f(`{"fw_format":0,"name":"m",`+io+`}`, false)
	f(`{"fw_format":1,"name":"../etc/passwd",`+io+`}`, false)
	f(`{"fw_format":1,"name":"m","inputs":[],"outputs":[]}`, false)
	f(`{"fw_format":1,"name":"m","inputs":[{"name":"x","dtype":"complex","shape":[-1]}],"outputs":[{"name":"y","dtype":"float32","shape":[-1]}]}`, false)
	f(`{"fw_format":1,"name":"m","inputs":[{"name":"x","dtype":"float32","shape":[-1,0]}],"outputs":[{"name":"y","dtype":"float32","shape":[-1]}]}`, false)
	f(`{"fw_format":1,"name":"m",`+io+`,"preprocessing":{"image":{"height":8,"width":8,"channels":2}}}`, false)
	f(`{"fw_format":1,"name":"m",`+io+`,"preprocessing":{"image":{"height":8,"width":8,"channels":1,"std":[0]}}}`, false)
	f(`{"fw_format":1,"name":"m",`+io+`,"future_field":{"a":1}}`, true) // unknown fields are kept
	f(`[]`, false)
}

// sameAsEncodingJSON checks ParseMetadata's answer (m, err) for doc against
// decoding all of it with encoding/json, which it replaced for speed: for
// a document in UTF-8 without surrogate escapes and nested at most 300
// deep, both accept it or both refuse it, and what they read (the struct
// and the pass-through copy) is the same.
func sameAsEncodingJSON(t *testing.T, doc []byte, m *Metadata, err error) {
	t.Helper()
	if !utf8.Valid(doc) || bytes.Contains(bytes.ToLower(doc), []byte(`\ud`)) ||
		bytes.Count(doc, []byte("["))+bytes.Count(doc, []byte("{")) > 300 {
		return // encoding/json reads such strings as U+FFFD; fastjson stops at 300 levels
	}
	var ref Metadata
	refErr := json.Unmarshal(doc, &ref)
	if refErr == nil {
		refErr = ref.validate()
	}
	if (err == nil) != (refErr == nil) {
		t.Fatalf("ParseMetadata: %v; encoding/json and validate: %v; for %s", err, refErr, doc)
	}
	if err != nil {
		return
	}
	var refRaw map[string]any
	if err := json.Unmarshal(doc, &refRaw); err != nil {
		t.Fatal(err)
	}
	for k := range refRaw {
		if strings.EqualFold(k, "test_vector") {
			delete(refRaw, k)
		}
	}
	got := *m
	got.raw = nil
	if !reflect.DeepEqual(got, ref) || !reflect.DeepEqual(m.raw, refRaw) {
		t.Fatalf("ParseMetadata read\n%+v\n%v\nencoding/json read\n%+v\n%v\nfrom %s", got, m.raw, ref, refRaw, doc)
	}
}

// realisticMetadata is an image model's fw.json as fw.export writes it,
// with a sample picture of pictureBytes.
func realisticMetadata(t testing.TB, pictureBytes int) []byte {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	pic := make([]byte, pictureBytes)
	for i := range pic {
		pic[i] = byte(r.IntN(256))
	}
	tensor := func(shape []int64) EncodedTensor {
		raw := make([]byte, NumElements(shape)*4)
		for i := range raw {
			raw[i] = byte(r.IntN(256))
		}
		return EncodedTensor{DType: "float32", Shape: shape, B64: base64.StdEncoding.EncodeToString(raw)}
	}
	doc := map[string]any{
		"fw_format": 2, "name": "digits_mlp", "version": "1", "description": "a test", "task": "image-classification",
		"inputs":        []SpecJSON{{Name: "input", DType: "float32", Shape: []int64{-1, 64}}},
		"outputs":       []SpecJSON{{Name: "logits", DType: "float32", Shape: []int64{-1, 10}}},
		"labels":        strings.Split("0 1 2 3 4 5 6 7 8 9", " "),
		"preprocessing": map[string]any{"image": map[string]any{"height": 8, "width": 8, "channels": 1, "flatten": true, "scale": 16}},
		"export":        map[string]any{"opset": 17, "dynamic_batch": true},
		"future_field":  map[string]any{"kept": []any{1, "two"}},
		"test_vector": TestVector{
			Inputs:  map[string]EncodedTensor{"input": tensor([]int64{4, 64})},
			Outputs: map[string]EncodedTensor{"logits": tensor([]int64{4, 10})},
			Atol:    1e-4, Rtol: 1e-3,
			Image: &ImageTestCase{ImageB64: base64.StdEncoding.EncodeToString(pic), Input: tensor([]int64{1, 64}), InputAtol: 1e-5,
				Outputs: map[string]EncodedTensor{"logits": tensor([]int64{1, 10})}},
		},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseMetadataAsEncodingJSON: a realistic document and the corner
// cases of encoding/json's rules (case-insensitive names, repeated members,
// nulls, wrong types) read as encoding/json reads them.
func TestParseMetadataAsEncodingJSON(t *testing.T) {
	io := `"fw_format":1,"name":"m","inputs":[{"name":"x","dtype":"float32","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"float32","shape":[-1]}]`
	docs := []string{
		string(realisticMetadata(t, 60<<10)),
		`{` + io + `}`,
		`{` + io + `,"test_vector":null}`,
		`{` + io + `,"test_vector":{"inputs":{"x":{"dtype":"float32","shape":[1,4],"b64":"AAAAAAAAAAAAAAAAAAAAAA=="}},"atol":0.5}}`,
		`{` + io + `,"test_vector":{"INPUTS":{"x":{"DType":"float32","Shape":[1,null],"B64":"AA=="}},"Atol":1e-3,"rtol":null,"image":null}}`,
		`{` + io + `,"test_vector":{"inputs":{"x":{"dtype":"a"}},"inputs":{"y":{"b64":"AA=="}}},"Test_Vector":{"rtol":2,"outputs":{}}}`,
		`{` + io + `,"test_vector":{"image":{"image_b64":"AA==","input":{"dtype":"float32"},"input":{"shape":[1]}}}}`,
		`{` + io + `,"test_vector":{"inputs":{"x":{"shape":[1.5]}}}}`,
		`{` + io + `,"test_vector":{"inputs":{"x":{"shape":"1"}}}}`,
		`{` + io + `,"test_vector":{"atol":"1"}}`,
		`{` + io + `,"test_vector":{"atol":1e999}}`,
		`{` + io + `,"test_vector":[]}`,
		`{` + io + `,"test_vector":{"inputs":{"x":{"b64":7}}}}`,
		`{` + io + `,"test_vector":{"inputs":{"x\u00e9\n":{"b64":"A\/A="}}}}`,
		`{` + io + `,"test_vector":{"atol":3e-1,"rtol":2.5e-06,"inputs":{"x":{"shape":[5,6],"shape":[null,3]}}}}`,
		`{` + io + `,"test_vector":{"inputs":{"x":{"dtype":"a` + "\x01" + `\n"}}}}`,
		`{` + io + `,"test_vector":{"atol":1.7976931348623157e308}}`,
	}
	for _, doc := range docs {
		m, err := ParseMetadata([]byte(doc))
		sameAsEncodingJSON(t, []byte(doc), m, err)
	}
	if _, err := ParseMetadata(realisticMetadata(t, 60<<10)); err != nil {
		t.Fatalf("a realistic document: %v", err)
	}
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	for _, bad := range []string{`{` + io + `,"test_vector":{"atol":NaN}}`, `{` + io + `,"x":"\q"}`, `{` + io + `} trailing`,
		`{` + io + `,"test_vector":{"inputs":{"x":{"dtype":"a` + "\x01" + `\n"}}}}`, `{` + io + `,"deep":` + deep + `}`,
		`{` + io + `,"many":[` + strings.Repeat("0,", maxMetadataValues) + `0]}`} {
		if _, err := ParseMetadata([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// BenchmarkParseMetadata reads an image model's fw.json with a 60 KB sample
// picture (digits_mlp's is 85 KB in all): part of every load.
func BenchmarkParseMetadata(b *testing.B) {
	doc := realisticMetadata(b, 60<<10)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMetadata(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func TestEncodedTensorDecode(t *testing.T) {
	good := EncodedTensor{DType: "float32", Shape: []int64{2}, B64: "AACAPwAAAEA="} // 1.0, 2.0
	x, err := good.Decode()
	if err != nil || x.At(1) != 2 {
		t.Fatalf("decode: %v %v", x, err)
	}
	for _, bad := range []EncodedTensor{
		{DType: "float32", Shape: []int64{3}, B64: "AACAPwAAAEA="},
		{DType: "float32", Shape: []int64{-2}, B64: ""},
		{DType: "float32", Shape: []int64{2}, B64: "%%%"},
		{DType: "nope", Shape: []int64{2}, B64: "AACAPwAAAEA="},
	} {
		if _, err := bad.Decode(); err == nil {
			t.Errorf("%+v decoded without error", bad)
		}
	}
}

// FuzzDetectFile feeds arbitrary bytes to format detection: it must never
// panic, and anything it accepts as TorchScript must have parsed metadata or none.
func FuzzDetectFile(f *testing.F) {
	f.Add([]byte{0x08, 0x07, 0x12, 0x07, 'p', 'y', 't', 'o', 'r', 'c', 'h', 0x3a, 0x00})
	f.Add([]byte("\x80\x02}q\x00."))
	f.Add(zipBytes(f, map[string]string{"m/code/x.py": "", "m/extra/fw.json": `{"fw_format":1}`}))
	f.Add([]byte("PK\x03\x04garbage"))
	f.Add(zipBytes(f, map[string]string{"p/data/aotinductor/model/a.wrapper.so": "\x7fELF",
		"p/data/aotinductor/model/a.wrapper_metadata.json": `{"AOTI_DEVICE_KEY":"cpu","fw.json":"{\"fw_format\":1}"}`,
		"p/archive_format": "pt2"}))
	f.Add(zipBytes(f, map[string]string{"p/archive_format": "pt2", "p/models/model.json": "{}"}))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<20 {
			return
		}
		p := filepath.Join(dir, "fuzz.bin")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		info, err := DetectFile(p)
		if err == nil && info.Format == "" {
			t.Fatalf("accepted without a format")
		}
	})
}

// FuzzParseMetadata: arbitrary documents never panic the parser, and an
// accepted document's specs convert cleanly.
func FuzzParseMetadata(f *testing.F) {
	f.Add([]byte(`{"fw_format":1,"name":"m","inputs":[{"name":"x","dtype":"float32","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"int64","shape":[-1]}],"test_vector":{"inputs":{"x":{"dtype":"float32","shape":[1,4],"b64":"AAAAAAAAAAAAAAAAAAAAAA=="}}}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"fw_format":2,"name":"m","inputs":[{"name":"x","dtype":"float32","shape":[-1,3,8,8]}],"outputs":[{"name":"y","dtype":"float32","shape":[-1,2]}],"preprocessing":{"image":{"height":8,"width":8,"channels":3,"steps":[{"op":"convert","mode":"RGB"},{"op":"resize","size":[9],"interpolation":"bicubic","antialias":true,"max_size":12},{"op":"center_crop","size":[8,8]},{"op":"to_tensor"},{"op":"normalize","mean":[0.5],"std":[0.25]}]}}}`))
	f.Add([]byte(`{"fw_format":2,"name":"m","inputs":[{"name":"x","dtype":"float32","shape":[-1,1,4,4]}],"outputs":[{"name":"y","dtype":"float32","shape":[-1,2]}],"preprocessing":{"image":{"height":4,"width":4,"channels":1,"steps":[{"op":"convert","mode":"RGB"},{"op":"to_image"},{"op":"grayscale","channels":1},{"op":"resize","size":[4,4],"interpolation":"nearest-exact","antialias":false},{"op":"to_dtype","dtype":"float32","scale":true}]}}},"test_vector":{"inputs":{},"outputs":{},"atol":0,"rtol":0,"image":{"image_b64":"AA==","input":{"dtype":"float32","shape":[1,1,4,4],"b64":""},"input_atol":0,"outputs":{}}}}`))
	f.Add([]byte(`{"fw_format":1,"name":"m","inputs":[{"name":"x","dtype":"float32","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"float32","shape":[-1]}],"test_vector":{"inputs":{"x":{"dtype":"float32","shape":[1,null],"b64":"AA=="}},"Inputs":{"y":{"b64":null}},"ATOL":1e-3,"image":null},"Test_Vector":{"rtol":2}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		m, err := ParseMetadata(doc)
		sameAsEncodingJSON(t, doc, m, err)
		if err != nil {
			return
		}
		for _, s := range specsFromJSON(m.Inputs) {
			if s.DType.Size() == 0 {
				t.Fatalf("accepted invalid dtype in %s", doc)
			}
		}
		if m.TestVector != nil {
			for _, e := range m.TestVector.Inputs {
				e.Decode()
			}
		}
		if p := m.Preprocessing; p != nil && p.Image != nil && p.Image.Steps != nil {
			sum, err := p.Image.CheckSteps()
			if err != nil || sum.Channels != p.Image.Channels || sum.Height != p.Image.Height || sum.Width != p.Image.Width {
				t.Fatalf("accepted steps that CheckSteps refuses (%v) in %s", err, doc)
			}
		}
	})
}
