package deflate

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"errors"
	"io"
	"strings"
	"testing"
)

func zlibBytes(t testing.TB, p []byte) []byte {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	if _, err := w.Write(p); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func rawBytes(t testing.TB, p []byte, level int) []byte {
	var b bytes.Buffer
	w, err := flate.NewWriter(&b, level)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(p); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func readAll(data []byte) ([]byte, error) {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, 1<<20))
}

// Both forms that clients send as "deflate" read back, at every level
// (level 0 writes stored blocks, the case the zlib header test must not
// mistake).
func TestZlibAndRaw(t *testing.T) {
	for _, p := range [][]byte{{}, []byte("x"), []byte(`{"inputs":[]}`), bytes.Repeat([]byte("0.25,"), 10000)} {
		got, err := readAll(zlibBytes(t, p))
		if err != nil || !bytes.Equal(got, p) {
			t.Fatalf("zlib of %d bytes: %d bytes back, %v", len(p), len(got), err)
		}
		for _, level := range []int{flate.NoCompression, flate.BestSpeed, flate.DefaultCompression, flate.BestCompression, flate.HuffmanOnly} {
			raw := rawBytes(t, p, level)
			if IsZlibHeader(raw) {
				t.Fatalf("raw deflate at level %d of %d bytes starts like zlib: % x", level, len(p), raw[:2])
			}
			got, err := readAll(raw)
			if err != nil || !bytes.Equal(got, p) {
				t.Fatalf("raw deflate at level %d of %d bytes: %d bytes back, %v", level, len(p), len(got), err)
			}
		}
	}
}

func TestCorrupt(t *testing.T) {
	z := zlibBytes(t, []byte(strings.Repeat("hello ", 100)))
	bad := bytes.Clone(z)
	bad[len(bad)-1] ^= 1 // the Adler-32 checksum
	for name, data := range map[string][]byte{
		"empty":     {},
		"one byte":  {0x78},
		"truncated": z[:len(z)/2],
		"checksum":  bad,
		"text":      []byte(`{"inputs": []}`),
		"trailing":  append(bytes.Clone(z), 0),
	} {
		if _, err := readAll(data); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := readAll(append(bytes.Clone(z), "more"...)); !errors.Is(err, ErrTrailingData) {
		t.Errorf("data after the stream: %v, want ErrTrailingData", err)
	}
	if _, err := readAll([]byte{}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("empty: %v, want unexpected EOF", err)
	}
}

// FuzzNewReader: any bytes read as deflate without a panic, and any bytes
// compressed either way read back unchanged.
func FuzzNewReader(f *testing.F) {
	f.Add([]byte{})
	f.Add(zlibBytes(f, []byte(`{"data":[[1,2,3]]}`)))
	f.Add(rawBytes(f, []byte(`{"data":[[1,2,3]]}`), flate.BestSpeed))
	f.Add(rawBytes(f, []byte("abc"), flate.NoCompression))
	f.Add([]byte{0x78, 0x9c, 0xff, 0xff})
	f.Add([]byte{0x78, 0xbb, 0, 0, 0, 1}) // a preset dictionary
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		_, _ = readAll(data)
		for _, c := range [][]byte{zlibBytes(t, data), rawBytes(t, data, flate.BestSpeed), rawBytes(t, data, flate.NoCompression)} {
			got, err := readAll(c)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("round trip of %d bytes: %d bytes back, %v", len(data), len(got), err)
			}
		}
	})
}
