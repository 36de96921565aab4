package httpapi

import (
	_ "embed"
	"strings"
	"sync"

	"github.com/fw-serve/fw/internal/docsite"
	"github.com/valyala/fasthttp"
)

// The API description: a static OpenAPI 3.1 document, valid on its own and
// generic (it describes any model fw serves). GET /openapi.json answers it
// completed with the models served (openapi_served.go).
//
//go:embed openapi.json
var openAPIJSON []byte

// defaultDocs serves /docs, /docs/<asset> and /openapi.json: Swagger UI (the
// assets internal/docsite embeds) on this package's openapi.json.
var defaultDocs = sync.OnceValue(func() *docsite.Site {
	return docsite.New("fw model server: API", openAPIJSON, nil)
})

// handleDocs serves GET /docs: Swagger UI on /openapi.json, loaded from the
// server itself (no CDN), or a plain page saying how to get it.
func (s *Server) handleDocs(ctx *fasthttp.RequestCtx) { defaultDocs().ServePage(ctx) }

// handleDocsAsset serves GET /docs/<asset> from the embedded Swagger UI.
func (s *Server) handleDocsAsset(ctx *fasthttp.RequestCtx) {
	defaultDocs().ServeAsset(ctx, strings.TrimPrefix(string(ctx.Path()), "/docs/"))
}

// handleOpenAPI serves GET /openapi.json: openapi.json completed with the
// models served now (openapi_served.go).
func (s *Server) handleOpenAPI(ctx *fasthttp.RequestCtx) { s.openAPISpec().Serve(ctx) }
