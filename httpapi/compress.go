package httpapi

// Request and response compression, as Triton's HTTP clients use it
// (tritonclient.http's request_compression_algorithm and
// response_compression_algorithm): a request body with Content-Encoding gzip
// or deflate is decoded before any handler reads it, and an inference
// response is compressed when Accept-Encoding asks for gzip or deflate.
// "deflate" is the zlib format (RFC 9110 8.4.1.2), what tritonclient sends
// and reads; bare deflate data is read too (internal/deflate).

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/internal/deflate"
	"github.com/valyala/fasthttp"
)

// acceptedEncodings are the request Content-Encodings fw reads, as 415
// lists them.
var acceptedEncodings = []string{"gzip", "deflate", "identity"}

// minCompressBytes is the smallest response body worth compressing: below
// it the saving is a few hundred bytes at most, the body fits one packet
// either way, and the client's decompression costs more than it saves.
// Clients read the Content-Encoding of the response, so an uncompressed
// answer to a request that asked for compression is still understood.
const minCompressBytes = 1024

// compressLevel favours speed: inference responses are mostly numbers,
// which compress little more at higher levels, and they are on the
// latency path.
const compressLevel = fasthttp.CompressBestSpeed

// contentEncoding returns the content coding of the request body: "" when
// none (or identity), else "gzip" or "deflate"; any other, or two codings
// stacked, is a 415.
func contentEncoding(ctx *fasthttp.RequestCtx) (string, *APIError) {
	h := ctx.Request.Header.Peek(fasthttp.HeaderContentEncoding)
	if len(h) == 0 {
		return "", nil
	}
	enc := ""
	for _, c := range strings.Split(string(h), ",") {
		c = strings.ToLower(strings.TrimSpace(c))
		switch c {
		case "", "identity":
			continue
		case "x-gzip":
			c = "gzip"
		}
		if c != "gzip" && c != "deflate" {
			return "", newError(415, CodeUnsupportedMedia,
				fmt.Sprintf("Content-Encoding %q is not accepted; send the body uncompressed, or compressed with gzip or deflate (zlib)", h),
				map[string]any{"accepted_encodings": acceptedEncodings, "content_encoding": string(h)})
		}
		if enc != "" {
			return "", newError(415, CodeUnsupportedMedia,
				fmt.Sprintf("Content-Encoding %q compresses the body more than once; compress it once, with gzip or deflate", h),
				map[string]any{"accepted_encodings": acceptedEncodings, "content_encoding": string(h)})
		}
		enc = c
	}
	return enc, nil
}

// decodedBody reads a compressed request body decoded, and at most max
// bytes of it: the read that would pass max fails with a 413, so a small
// body that inflates to gigabytes (a decompression bomb) is refused after
// max+1 bytes, in memory bounded by what the caller keeps. Every error it
// returns is an *APIError: 413 past max, 400 for a body that is not what
// its Content-Encoding says or that could not be read.
type decodedBody struct {
	enc string
	src *sourceReader // the bytes as sent
	dec io.Reader     // decoding src
	max int64
	n   int64 // decoded bytes read
}

// sourceReader records the first error reading the body as sent, so that a
// broken connection is not reported as a corrupt stream.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return n, err
}

// requestBody is the one place where a handler's request body comes from:
// a reader of the body as sent (a stream, or the bytes fasthttp read; on
// /v2, a chunked one is refused past maxBodyChunks chunks), or,
// when Content-Encoding is gzip or deflate, a decodedBody bounded by
// MaxBodyBytes decoded (compressed is then true). Another encoding is a
// 415; a body that does not start as its encoding says, a 400.
func (s *Server) requestBody(ctx *fasthttp.RequestCtx) (r io.Reader, compressed bool, aerr *APIError) {
	enc, aerr := contentEncoding(ctx)
	if aerr != nil {
		return nil, false, aerr
	}
	var raw io.Reader
	if ctx.Request.IsBodyStream() {
		raw = ctx.RequestBodyStream()
		if ctx.Request.Header.ContentLength() == -1 && isV2Path(ctx.Path()) {
			raw = countChunks(ctx, raw) // chunked: at most maxBodyChunks, as Triton
		}
	} else {
		raw = bytes.NewReader(ctx.Request.Body())
	}
	if enc == "" {
		return raw, false, nil
	}
	d, aerr := openDecoded(raw, enc, s.cfg.MaxBodyBytes)
	if aerr != nil {
		return nil, false, aerr
	}
	return d, true, nil
}

// openDecoded starts decoding raw, compressed with enc (gzip or deflate),
// bounded by max decoded bytes. The coding's header is read here, so a
// body that does not start as enc says fails now.
func openDecoded(raw io.Reader, enc string, max int64) (*decodedBody, *APIError) {
	b := &decodedBody{enc: enc, src: &sourceReader{r: raw}, max: max}
	var err error
	switch enc {
	case "gzip":
		var z *gzip.Reader
		if z, err = gzip.NewReader(b.src); err == nil {
			b.dec = z
		}
	default:
		b.dec, err = deflate.NewReader(b.src)
	}
	if err != nil {
		return nil, b.fail(err)
	}
	return b, nil
}

func (b *decodedBody) Read(p []byte) (int, error) {
	if b.n > b.max {
		return 0, b.tooLarge()
	}
	if rest := b.max + 1 - b.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := b.dec.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		return n - int(b.n-b.max), b.tooLarge()
	}
	if err != nil && err != io.EOF {
		return n, b.fail(err)
	}
	return n, err
}

func (b *decodedBody) tooLarge() *APIError { return decodedTooLarge(b.max, b.enc) }

// decodedTooLarge is fw's 413 for a body compressed with enc that
// decompresses past max bytes.
func decodedTooLarge(max int64, enc string) *APIError {
	return &APIError{Status: 413, Code: CodeTooLarge,
		Message: fmt.Sprintf("the request body decompresses to more than the limit of %d bytes (--max-body-bytes); send fewer rows per request, or split the work into several requests", max),
		Details: map[string]any{"max_body_bytes": max, "content_encoding": enc}}
}

// fail classifies an error decoding the body: the connection's, or the
// stream's own.
func (b *decodedBody) fail(err error) *APIError {
	if b.src.err != nil {
		var ae *APIError
		if errors.As(b.src.err, &ae) { // the body's own limit (chunkCounter)
			return ae
		}
		return newError(400, CodeBadRequest, "could not read the request body: "+b.src.err.Error(), nil)
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // the gzip header of an empty body
	}
	format := "gzip"
	if b.enc == "deflate" {
		format = "deflate (zlib, RFC 1950, or bare deflate data, RFC 1951)"
	}
	return newError(400, CodeBadRequest,
		fmt.Sprintf("the request body is not valid %s data as its Content-Encoding %q says (%v); compress the whole body with %s, or send it uncompressed without Content-Encoding", format, b.enc, err, b.enc),
		map[string]any{"content_encoding": b.enc})
}

// asAPIError is err as the error shape: decodedBody's own errors as they
// are, anything else as a body that could not be read.
func asAPIError(err error) *APIError {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae
	}
	return newError(400, CodeBadRequest, "could not read the request body: "+err.Error(), nil)
}

// compressResponse compresses a finished 2xx response held in memory (a
// streamed NDJSON response is left alone: compressing it would hold lines
// back until a compressor block fills) when it is at least
// minCompressBytes and the request's Accept-Encoding takes gzip or
// deflate. Inference-Header-Content-Length keeps counting the
// uncompressed JSON, as Triton's clients read it after decompressing.
func (s *Server) compressResponse(ctx *fasthttp.RequestCtx) {
	r := &ctx.Response
	if c := r.StatusCode(); c < 200 || c > 299 || r.IsBodyStream() || len(r.Header.ContentEncoding()) > 0 {
		return
	}
	body := r.Body()
	if len(body) < minCompressBytes {
		return
	}
	enc := preferredEncoding(ctx.Request.Header.Peek(fasthttp.HeaderAcceptEncoding))
	if enc == "" {
		return
	}
	buf := s.getBuf()
	if enc == "gzip" {
		*buf = fasthttp.AppendGzipBytesLevel((*buf)[:0], body, compressLevel)
	} else {
		*buf = fasthttp.AppendDeflateBytesLevel((*buf)[:0], body, compressLevel) // zlib, as "deflate" means
	}
	if len(*buf) < len(body) {
		r.SetBody(*buf)
		r.Header.SetContentEncoding(enc)
		r.Header.Add(fasthttp.HeaderVary, fasthttp.HeaderAcceptEncoding)
	}
	s.putBuf(buf)
}

// preferredEncoding reads an Accept-Encoding header: "gzip" or "deflate",
// whichever has the higher quality (gzip on a tie; "*" stands for either
// when not named), or "" when neither is acceptable.
func preferredEncoding(h []byte) string {
	if len(h) == 0 {
		return ""
	}
	gz, df, star := -1.0, -1.0, -1.0
	for _, part := range strings.Split(string(h), ",") {
		name, params, _ := strings.Cut(part, ";")
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, ok := strings.Cut(p, "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil || f < 0 || f > 1 {
					f = 0 // an unreadable weight does not ask for compression
				}
				q = f
			}
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "gzip", "x-gzip":
			gz = q
		case "deflate":
			df = q
		case "*":
			star = q
		}
	}
	if gz < 0 {
		gz = star
	}
	if df < 0 {
		df = star
	}
	switch {
	case gz > 0 && gz >= df:
		return "gzip"
	case df > 0:
		return "deflate"
	}
	return ""
}
