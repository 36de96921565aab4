package testmodels

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// RewriteZip copies the zip archive src to dst (an AOTInductor package, say),
// letting edit change or drop each entry (keep false). Entries are stored
// uncompressed with fresh CRCs, as a tool that alters packages would write them.
func RewriteZip(t testing.TB, src, dst string, edit func(name string, data []byte) (out []byte, keep bool)) string {
	t.Helper()
	zr, err := zip.OpenReader(src)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		var data bytes.Buffer
		_, err = data.ReadFrom(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		out, keep := edit(f.Name, data.Bytes())
		if !keep {
			continue
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: f.Name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(out); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// EditPackageMetadata is an edit for RewriteZip that changes every copy of an
// AOTInductor package's metadata (data/aotinductor/model/*_metadata.json, a
// JSON object of strings).
func EditPackageMetadata(t testing.TB, change func(m map[string]string)) func(string, []byte) ([]byte, bool) {
	return func(name string, data []byte) ([]byte, bool) {
		if !strings.HasSuffix(name, "_metadata.json") {
			return data, true
		}
		var m map[string]string
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		change(m)
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return out, true
	}
}

// EditPackageFWJSON is an edit for RewriteZip that changes fw.json inside an
// AOTInductor package's metadata.
func EditPackageFWJSON(t testing.TB, change func(doc map[string]any)) func(string, []byte) ([]byte, bool) {
	return EditPackageMetadata(t, func(m map[string]string) {
		var doc map[string]any
		if err := json.Unmarshal([]byte(m["fw.json"]), &doc); err != nil {
			t.Fatalf("fw.json: %v", err)
		}
		change(doc)
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		m["fw.json"] = string(b)
	})
}
