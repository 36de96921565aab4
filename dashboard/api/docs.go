package api

import (
	_ "embed"
	"io/fs"

	"github.com/fw-serve/fw/httpapi"
	"github.com/valyala/fasthttp"
)

// The dashboard API's description: a static OpenAPI 3.1 document, served at
// GET /openapi.json and shown by Swagger UI at GET /docs.
//
//go:embed openapi.json
var openAPIJSON []byte

// newDocsSite serves /docs, /docs/<asset> and /openapi.json with the Swagger
// UI that httpapi embeds (one copy of the assets in the binary), or with
// assets when not nil (tests).
func newDocsSite(assets fs.FS) *httpapi.DocsSite {
	return httpapi.NewDocsSite("fw dashboard: API", openAPIJSON, assets)
}

// docs answers GET /openapi.json, /docs, /docs/ and /docs/<asset>, open
// without the token like /health.
func (s *Server) docs(ctx *fasthttp.RequestCtx, path string) {
	if !s.allow(ctx, string(ctx.Method()), "GET") {
		return
	}
	d := s.docsSite
	switch path {
	case "/openapi.json":
		d.ServeSpec(ctx)
	case "/docs", "/docs/":
		d.ServePage(ctx)
	default:
		d.ServeAsset(ctx)
	}
}
