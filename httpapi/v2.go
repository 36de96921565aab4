package httpapi

import "github.com/valyala/fasthttp"

// routeV2 serves the Open Inference Protocol (placeholder until it lands).
func (s *Server) routeV2(ctx *fasthttp.RequestCtx) string {
	writeError(ctx, newError(404, CodeNotFound, "V2 is not built yet", nil))
	return "v2"
}
