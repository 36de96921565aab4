// Package testreq runs one HTTP request through a fasthttp handler in
// process, as fasthttp's server would call it, for tests and fuzz targets
// that drive a real router without a socket.
package testreq

import (
	"bytes"
	"net"

	"github.com/valyala/fasthttp"
)

// Serve builds the request (Host 127.0.0.1; the body as a stream of unknown
// length when stream is set, as fasthttp hands a handler a chunked or large
// body; hdr as name, value pairs), runs h on it from 127.0.0.1 and returns
// the finished context: its Response, and the Path the router saw.
func Serve(h fasthttp.RequestHandler, method, uri, ctype string, body []byte, stream bool, hdr ...string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	req.Header.SetHost("127.0.0.1")
	if ctype != "" {
		req.Header.SetContentType(ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if !stream {
		req.SetBody(body)
	}
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}, nil)
	if stream {
		// Set on the context's request: Init copies req without a body
		// stream (Request.CopyTo copies bytes only), so a stream set on req
		// would arrive as an empty body.
		ctx.Request.SetBodyStream(bytes.NewReader(body), -1)
	}
	h(ctx)
	return ctx
}
