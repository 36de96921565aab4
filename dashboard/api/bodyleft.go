package api

import (
	"io"

	"github.com/valyala/fasthttp"
)

// maxDrainBytes bounds how much of an unread request body is read and
// dropped after the answer, so a client still sending gets to read it.
const maxDrainBytes = 1 << 20

// closeUnreadBody runs after every route. A route that answers without
// reading the whole streamed body (a 401, 403, 404 or 405 before the body,
// a 413 past the limit) would otherwise leave the rest on a keep-alive
// connection, where it is parsed as the client's next request (431 or 400
// in place of that request's answer). A small rest is read and dropped; a
// larger one closes the connection after the answer.
func closeUnreadBody(ctx *fasthttp.RequestCtx) {
	if ctx.Hijacked() || !ctx.Request.IsBodyStream() {
		return
	}
	if _, err := io.CopyN(io.Discard, ctx.RequestBodyStream(), maxDrainBytes); err != io.EOF {
		ctx.SetConnectionClose()
	}
}
