package grpcapi

// Message compression, as tritonclient.grpc's compression_algorithm uses
// it: a request with grpc-encoding gzip or deflate is decompressed by
// grpc-go, and grpc-go answers in the encoding of the request. grpc-go
// ships gzip (registered by importing its encoding/gzip); deflate is
// deflateCompressor below. Both are looked up by name in grpc-go's one
// global registry, so registering them here makes every grpc.Server (and
// client) in the process take them.
//
// The decompressed size is bounded by the server's MaxRecvMsgSize
// (Config.MaxMessageBytes): grpc-go reads at most one byte past it from a
// registered compressor's reader and answers RESOURCE_EXHAUSTED (rpc_util.go
// decompress), so a small message that inflates to gigabytes is refused
// after MaxMessageBytes+1 bytes.

import (
	"compress/flate"
	"compress/zlib"
	"io"
	"sync"

	"github.com/fw-serve/fw/internal/deflate"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/gzip" // its init registers "gzip"
)

// init registers deflate and sets gzip's level to the fastest, as for
// deflate and over HTTP: responses are mostly numbers, which compress
// little more at higher levels, and they are on the latency path. Both are
// process-wide settings of grpc-go, made once, here.
func init() {
	encoding.RegisterCompressor(&deflateCompressor{})
	if err := gzip.SetLevel(flate.BestSpeed); err != nil {
		panic(err)
	}
}

// deflateCompressor is gRPC's "deflate" message encoding: zlib (RFC 1950),
// as gRPC's C core (Python's grpcio, so tritonclient.grpc) and grpc-java
// write and read it. Bare deflate data is read too (internal/deflate).
type deflateCompressor struct {
	writers sync.Pool // *zlibWriter
}

// Name is the grpc-encoding it answers to.
func (*deflateCompressor) Name() string { return "deflate" }

// Compress returns a writer that compresses into w; its Close flushes the
// stream and puts the writer back in the pool.
func (c *deflateCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	if z, ok := c.writers.Get().(*zlibWriter); ok {
		z.Reset(w)
		return z, nil
	}
	z, err := zlib.NewWriterLevel(w, flate.BestSpeed)
	if err != nil {
		return nil, err
	}
	return &zlibWriter{Writer: z, pool: &c.writers}, nil
}

// Decompress returns a reader of the message r carries.
func (*deflateCompressor) Decompress(r io.Reader) (io.Reader, error) {
	return deflate.NewReader(r)
}

type zlibWriter struct {
	*zlib.Writer
	pool *sync.Pool
}

func (z *zlibWriter) Close() error {
	err := z.Writer.Close()
	z.pool.Put(z)
	return err
}
