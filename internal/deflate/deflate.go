// Package deflate reads the "deflate" content coding as HTTP (RFC 9110
// 8.4.1.2) and gRPC name it: a zlib stream (RFC 1950) around deflate data
// (RFC 1951). That is what tritonclient (Python's zlib.compress), gRPC's C
// core and grpc-java send, but some clients send bare deflate data under the
// same name, so NewReader reads both, told apart by the zlib header.
package deflate

import (
	"bufio"
	"compress/flate"
	"compress/zlib"
	"errors"
	"io"
)

// ErrTrailingData is the error of a reader whose input goes on after the
// end of its deflate stream.
var ErrTrailingData = errors.New("deflate: data after the end of the stream")

// NewReader returns a reader of the data r carries, zlib-wrapped (its
// checksum checked at the end) or bare. It reads the first two bytes to tell
// which; an error reading them, or a zlib header zlib cannot read (a preset
// dictionary), is returned. The stream must be the whole of r: at its end
// the reader reads r to its EOF, failing with ErrTrailingData on anything
// more (so a request body is consumed to its end, chunked terminator
// included). Close releases the decompressor, not r.
func NewReader(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 512) // an io.ByteReader: flate reads it without another buffer
	h, err := br.Peek(2)
	if err != nil && len(h) == 0 {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // an empty body is not a deflate stream
		}
		return nil, err
	}
	var dec io.ReadCloser
	if IsZlibHeader(h) {
		if dec, err = zlib.NewReader(br); err != nil {
			return nil, err
		}
	} else {
		dec = flate.NewReader(br)
	}
	return &reader{dec: dec, src: br}, nil
}

type reader struct {
	dec io.ReadCloser
	src *bufio.Reader
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.dec.Read(p)
	if err == io.EOF {
		if _, e := r.src.ReadByte(); e == nil {
			err = ErrTrailingData
		} else if e != io.EOF {
			err = e
		}
	}
	return n, err
}

func (r *reader) Close() error { return r.dec.Close() }

// IsZlibHeader reports whether h starts with a zlib header: compression
// method 8 (deflate) with a window of at most 32 KiB, and the check bits
// that make the first two bytes a multiple of 31. Bare deflate data from a
// real encoder never starts so: its first block would be a stored block
// with nonzero padding bits.
func IsZlibHeader(h []byte) bool {
	return len(h) >= 2 && h[0]&0x0f == 8 && h[0]>>4 <= 7 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0
}
