package imageprep

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/testmodels"
)

// loadWithImageCase loads a reference model whose file carries an image
// test case.
func loadWithImageCase(t *testing.T, name string) *engine.Model {
	t.Helper()
	m, err := engine.Load(context.Background(), filepath.Join(testmodels.Dir(t), name), engine.Options{Threads: 1})
	if err != nil {
		testmodels.Require(t, "load "+name+": "+err.Error())
		t.Skip()
	}
	t.Cleanup(func() { m.Close() })
	if m.Meta == nil || m.Meta.TestVector == nil || m.Meta.TestVector.Image == nil {
		t.Fatalf("%s has no image test case", name)
	}
	return m
}

// A cached sample gives the same check as a decoded one; another recipe
// for the same picture is another entry and is checked on its own; the
// model's outputs are compared on a hit too.
func TestSampleCache(t *testing.T) {
	ctx := context.Background()
	m := loadWithImageCase(t, "digits_cnn.onnx")
	pl, err := Compile(*m.Meta.Preprocessing.Image)
	if err != nil {
		t.Fatal(err)
	}
	cache := NewSampleCache(8 << 20)
	plain, err := VerifyImage(ctx, m, pl, nil)
	if err != nil || !plain.Passed {
		t.Fatalf("without a cache: %+v, %v", plain, err)
	}
	for i := range 2 {
		got, err := VerifyImage(ctx, m, pl, cache)
		if err != nil {
			t.Fatal(err)
		}
		if *got != *plain {
			t.Fatalf("call %d with the cache: %+v, want %+v", i, got, plain)
		}
		if cache.Len() != 1 {
			t.Fatalf("call %d: the cache holds %d samples, want 1", i, cache.Len())
		}
	}

	// The same picture under another recipe: a miss, checked for itself
	// (the changed resize no longer reproduces the exported transform).
	other := *m.Meta.Preprocessing.Image
	if other.Resize == "nearest" {
		other.Resize = "bilinear"
	} else {
		other.Resize = "nearest"
	}
	pl2, err := Compile(other)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := VerifyImage(ctx, m, pl2, cache)
	if err != nil {
		t.Fatal(err)
	}
	if bad.Passed || bad.InputMaxAbsError <= bad.InputAtol || cache.Len() != 2 {
		t.Fatalf("another recipe: %+v, cache %d; want a failed preprocessing check and a second entry", bad, cache.Len())
	}
	if again, _ := VerifyImage(ctx, m, pl2, cache); again == nil || *again != *bad {
		t.Fatalf("another recipe from the cache: %+v, want %+v", again, bad)
	}

	// Other recorded outputs with the cached picture: still compared.
	c := *m.Meta.TestVector.Image
	c.Outputs = map[string]engine.EncodedTensor{}
	for k, e := range m.Meta.TestVector.Image.Outputs {
		raw, err := base64.StdEncoding.DecodeString(e.B64)
		if err != nil {
			t.Fatal(err)
		}
		v := math.Float32frombits(binary.LittleEndian.Uint32(raw))
		binary.LittleEndian.PutUint32(raw, math.Float32bits(v+1000))
		e.B64 = base64.StdEncoding.EncodeToString(raw)
		c.Outputs[k] = e
	}
	saved := m.Meta.TestVector.Image
	m.Meta.TestVector.Image = &c
	defer func() { m.Meta.TestVector.Image = saved }()
	res, err := VerifyImage(ctx, m, pl, cache)
	if err != nil {
		t.Fatal(err)
	}
	if res.Passed || res.OutputMaxAbsError < 999 || res.InputMaxAbsError != plain.InputMaxAbsError {
		t.Fatalf("changed outputs from a cached picture: %+v, want the outputs to fail and the input to pass", res)
	}
}

// The budget drops the least recently used samples; one larger than the
// budget is not kept.
func TestSampleCacheBudget(t *testing.T) {
	c := NewSampleCache(40)
	put := func(b byte, n int) {
		c.put(&sample{key: [32]byte{b}, x: make([]float32, n)})
	}
	put(1, 4)                      // 16 bytes
	put(2, 4)                      // 32
	if c.get([32]byte{1}) == nil { // 1 is now the most recent
		t.Fatal("1 missing")
	}
	put(3, 4) // 48 > 40: 2, the least recent, goes
	if c.get([32]byte{2}) != nil || c.get([32]byte{1}) == nil || c.get([32]byte{3}) == nil {
		t.Fatalf("after the budget: %d samples; want 1 and 3", c.Len())
	}
	put(4, 11) // 44 bytes: over the whole budget, not kept
	if c.get([32]byte{4}) != nil || c.Len() != 2 {
		t.Fatalf("a sample over the budget was kept (%d samples)", c.Len())
	}
	var none *SampleCache
	if none.get([32]byte{1}) != nil {
		t.Fatal("a nil cache returned a sample")
	}
	none.put(&sample{x: make([]float32, 1)})
}
