package engine

import (
	"archive/zip"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
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
	f.Fuzz(func(t *testing.T, doc []byte) {
		m, err := ParseMetadata(doc)
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
