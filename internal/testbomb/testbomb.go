// Package testbomb builds decompression bombs for tests: a few megabytes of
// gzip or zlib that inflate to gigabytes of zeros, built in milliseconds
// without compressing the gigabytes. A server that bounds what it
// decompresses refuses them after its limit; one that does not runs out of
// memory or time.
package testbomb

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
)

const mib = 1 << 20

// Gzip returns a gzip stream of whole MiB of zeros, about gib GiB of them:
// one member holding a MiB of zeros (about 1 KiB), repeated. gzip readers
// read concatenated members as one stream (RFC 1952 2.2).
func Gzip(gib int) []byte {
	var b bytes.Buffer
	w, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	w.Write(make([]byte, mib))
	w.Close()
	return bytes.Repeat(b.Bytes(), gib<<10)
}

// Zlib returns the start of a zlib stream of about gib GiB of zeros: the
// zlib header, then the deflate blocks of one MiB of zeros ended by a sync
// flush (so the next ones start on a byte), the same blocks repeated, and
// no end: no final block and no checksum, which a bounded reader never
// reaches. The repeated blocks copy from the zeros before them, which any
// earlier MiB of zeros provides. Bare deflate data is the same without the
// first two bytes.
func Zlib(gib int) []byte {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestCompression)
	zeros := make([]byte, mib)
	w.Write(zeros)
	w.Flush()
	first := bytes.Clone(b.Bytes())
	b.Reset()
	w.Write(zeros)
	w.Flush()
	out := append([]byte{0x78, 0xda}, first...)
	return append(out, bytes.Repeat(b.Bytes(), gib<<10-1)...)
}
