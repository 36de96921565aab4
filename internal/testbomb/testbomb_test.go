package testbomb

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"testing"
)

// Both bombs are small and inflate to zeros, as many as they claim (read
// through 3 MiB of a small one: each MiB repeated is the same).
func TestBombs(t *testing.T) {
	if n := len(Gzip(10)); n > 16<<20 {
		t.Errorf("10 GiB as gzip takes %d bytes", n)
	}
	if n := len(Zlib(10)); n > 16<<20 {
		t.Errorf("10 GiB as zlib takes %d bytes", n)
	}
	g, err := gzip.NewReader(bytes.NewReader(Gzip(1)))
	if err != nil {
		t.Fatal(err)
	}
	z, err := zlib.NewReader(bytes.NewReader(Zlib(1)))
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]io.Reader{"gzip": g, "zlib": z} {
		got, err := io.ReadAll(io.LimitReader(r, 3*mib))
		if err != nil || len(got) != 3*mib || bytes.IndexFunc(got, func(r rune) bool { return r != 0 }) >= 0 {
			t.Errorf("%s: %d bytes, %v, or not all zeros", name, len(got), err)
		}
	}
	// gzip's members add up to exactly 1 GiB.
	n, err := io.Copy(io.Discard, g)
	if n += 3 * mib; err != nil || n != 1<<30 {
		t.Errorf("gzip: %d bytes, %v", n, err)
	}
}
