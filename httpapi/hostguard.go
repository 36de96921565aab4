package httpapi

import (
	"bytes"
	"fmt"

	"github.com/valyala/fasthttp"
)

// hostAllowed refuses (403, the error shape; V2's under /v2) a request whose Host header
// Config.Hosts does not accept: a page on another name reaching a
// loopback-bound server through DNS rebinding. The health paths stay open
// (probes use the pod IP as Host).
func (s *Server) hostAllowed(ctx *fasthttp.RequestCtx) bool {
	if p := ctx.Path(); bytes.Equal(p, []byte("/health")) || bytes.HasPrefix(p, []byte("/health/")) {
		return true
	}
	if s.cfg.Hosts.Allow(ctx.Host()) {
		return true
	}
	writeError(ctx, newError(403, CodeForbidden, fmt.Sprintf("this server is not served under the name %q (a page on another name may be reaching it through DNS rebinding); call it as localhost or 127.0.0.1, or start fw serve with --allowed-hosts naming this host (FW_ALLOWED_HOSTS)", ctx.Host()), nil))
	if bytes.HasPrefix(ctx.Path(), []byte("/v2")) {
		v2ErrorBody(ctx) // Triton's clients read {"error": message}
	}
	return false
}
