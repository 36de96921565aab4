package httpapi

import "github.com/valyala/fasthttp"

// handleDocs serves GET /docs (placeholder until the OpenAPI work lands).
func (s *Server) handleDocs(ctx *fasthttp.RequestCtx) {
	writeError(ctx, newError(404, CodeNotFound, "docs are not built yet", nil))
}

func (s *Server) handleDocsAsset(ctx *fasthttp.RequestCtx) { s.handleDocs(ctx) }

func (s *Server) handleOpenAPI(ctx *fasthttp.RequestCtx) { s.handleDocs(ctx) }
