package httpapi

// The body limits of the /v2 routes, answered as Triton answers them
// (Triton's users' clients and tests match its status and sentences):
// a body over --max-body-bytes (tritonserver's --http-max-input-size) is a
// 400 whose message starts with Triton's sentence for what was too large
// (the raw input, the JSON request, the decompressed data), and a chunked
// body of more than 65,536 non-empty chunks is refused as Triton refuses it.
// fw's own routes keep their 413.

import (
	"bytes"
	"fmt"
	"io"
	"reflect"

	"github.com/valyala/fasthttp"
)

// maxBodyChunks bounds the non-empty chunks of a chunked /v2 request body,
// as Triton bounds them (kMaxChunkedChunks).
const maxBodyChunks = 1 << 16

// isV2Path reports whether path is one of the V2 protocol's (/v2/...).
func isV2Path(path []byte) bool {
	return bytes.Equal(path, []byte("/v2")) || bytes.HasPrefix(path, []byte("/v2/"))
}

// bodyTooLarge is the error for a request body over max bytes: size when
// known (-1 when not: a chunked body, or a decoded one), decoded when the
// decompressed size passed max. fw's routes answer 413; the /v2 routes
// answer Triton's 400 (v2TooLarge).
func (s *Server) bodyTooLarge(ctx *fasthttp.RequestCtx, size, max int64, decoded bool) *APIError {
	if !isV2Path(ctx.Path()) {
		if decoded {
			enc, _ := contentEncoding(ctx)
			return decodedTooLarge(max, enc)
		}
		return tooLarge(size, max)
	}
	return v2TooLarge(ctx, size, max, decoded, max == s.cfg.MaxBodyBytes)
}

// v2TooLarge is Triton's answer to a /v2 body over max bytes: 400 and its
// sentence, raw input (Inference-Header-Content-Length: 0), decompressed
// data, or JSON request. flagBound says whether --max-body-bytes is the
// bound (else the route's own smaller bound is).
func v2TooLarge(ctx *fasthttp.RequestCtx, size, max int64, decoded, flagBound bool) *APIError {
	d := map[string]any{"max_body_bytes": max}
	of := fmt.Sprintf("more than %d bytes", max)
	if size > 0 {
		d["body_bytes"] = size
		of = fmt.Sprintf("%d bytes", size)
	}
	hdr := ctx.Request.Header.Peek(v2HeaderLength)
	var msg string
	switch {
	case decoded:
		d["content_encoding"], _ = contentEncoding(ctx)
		msg = fmt.Sprintf("Decompressed data size exceeds the maximum allowed value of %d bytes.", max)
	case isRawBinary(hdr):
		msg = fmt.Sprintf("Raw input has a byte_size (%s) that exceeds the maximum allowed value of %d bytes.", of, max)
	default:
		msg = fmt.Sprintf("request JSON size of %s exceeds the maximum allowed input size of %d bytes.", of, max)
	}
	if flagBound {
		msg += " Use --http-max-input-size to increase the limit. (fw serve's --http-max-input-size, also named --max-body-bytes, bounds the whole body, counted decompressed when compressed"
		if len(hdr) > 0 && !isRawBinary(hdr) && !decoded {
			msg += ", its JSON and binary data together"
		}
		msg += "; or send fewer rows per request.)"
	} else {
		msg += fmt.Sprintf(" This route takes a body of at most %d bytes: a model configuration override or a shared memory registration is kilobytes, and model files are not accepted over the API.", max)
	}
	return &APIError{Status: 400, Code: CodeTooLarge, Message: msg, Details: d}
}

// v2InputTooLarge is Triton's answer to an input given as JSON "data" whose
// tensor would take more than max bytes (a few bytes of JSON per element
// can become 8 bytes of tensor).
func v2InputTooLarge(name string, nbytes, max int64) *APIError {
	return &APIError{Status: 400, Code: CodeTooLarge,
		Message: fmt.Sprintf("JSON input '%s' has a byte_size (%d bytes) that exceeds the maximum allowed value of %d bytes. Use --http-max-input-size to increase the limit. (fw serve's --http-max-input-size, also named --max-body-bytes, bounds a tensor read from JSON too; send it as binary data or in fewer rows.)", name, nbytes, max),
		Details: map[string]any{"input": name, "input_bytes": nbytes, "max_body_bytes": max}}
}

// chunkCounter counts the non-empty chunks of a chunked request body as it
// is read, and fails the read that would pass maxBodyChunks.
//
// fasthttp decodes the chunked framing inside its body stream and shows no
// chunk boundaries: each Read returns bytes of one chunk, but one chunk may
// take several Reads. So the counter looks at the stream's own count of
// bytes left in the current chunk (its unexported chunkLeft, read through
// reflect): a Read that starts with none left begins a new chunk.
// TestV2ChunkedBodyLimit fails if a fasthttp upgrade renames that field
// (countChunks then leaves the body uncounted rather than miscount it).
type chunkCounter struct {
	ctx  *fasthttp.RequestCtx
	r    io.Reader
	left reflect.Value // the stream's chunkLeft
	n    int
}

// countChunks wraps the body stream r of a chunked request; r as it is
// when it is not fasthttp's stream as countChunks knows it.
func countChunks(ctx *fasthttp.RequestCtx, r io.Reader) io.Reader {
	v := reflect.ValueOf(r)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return r
	}
	f := v.Elem().FieldByName("chunkLeft")
	if !f.IsValid() || !f.CanInt() {
		return r
	}
	return &chunkCounter{ctx: ctx, r: r, left: f}
}

func (c *chunkCounter) Read(p []byte) (int, error) {
	fresh := c.left.Int() == 0
	n, err := c.r.Read(p)
	if fresh && n > 0 {
		if c.n++; c.n > maxBodyChunks {
			c.ctx.SetConnectionClose() // as Triton, once the rest is drained
			return 0, newError(400, CodeBadRequest,
				fmt.Sprintf("Chunked request body exceeds maximum of %d non-empty chunks. Send fewer or larger HTTP chunks. (The client sent the body with Transfer-Encoding: chunked; most clients send one chunk per write, so write it in larger pieces, or send Content-Length.)", maxBodyChunks),
				map[string]any{"max_chunks": maxBodyChunks})
		}
	}
	return n, err
}
