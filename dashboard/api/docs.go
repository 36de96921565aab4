package api

import (
	_ "embed"
	"io/fs"
	"strings"

	"github.com/fw-serve/fw/internal/docsite"
)

// The dashboard API's description: a static OpenAPI 3.1 document, served at
// GET /openapi.json and shown by Swagger UI at GET /docs.
//
//go:embed openapi.json
var openAPIJSON []byte

// newDocsSite serves /docs, /docs/<asset> and /openapi.json with the Swagger
// UI that internal/docsite embeds (one copy of the assets in the binary, shared
// with the model server), or with assets when not nil (tests).
func newDocsSite(assets fs.FS) *docsite.Site {
	return docsite.New("fw dashboard: API", openAPIJSON, assets)
}

// docs answers GET /openapi.json, /docs, /docs/ and /docs/<asset>, open
// without the token like /health.
func (s *Server) docs(c *call) {
	ctx, d := c.rc, s.docsSite
	switch path := string(ctx.Path()); path {
	case "/openapi.json":
		d.ServeSpec(ctx)
	case "/docs", "/docs/":
		d.ServePage(ctx)
	default:
		d.ServeAsset(ctx, strings.TrimPrefix(path, "/docs/"))
	}
}
