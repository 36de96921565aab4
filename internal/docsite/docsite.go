// Package docsite serves the interactive documentation of fw's HTTP APIs (the
// model server's and the dashboard's): GET /docs, Swagger UI's page, loaded
// from the server itself (no CDN, works offline); GET /docs/<asset>, the
// Swagger UI files embedded in the binary; and GET /openapi.json, the API
// description the page shows. Every response is prepared once, with an ETag
// (304 on If-None-Match) and, where it pays, a gzip variant.
//
// The Swagger UI assets live in ui/dist, filled by scripts/fetch-swagger-ui.sh
// (make setup); without them /docs serves a page that says how to get them
// and links /openapi.json.
package docsite

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/fw-serve/fw/internal/apierror"
	"github.com/valyala/fasthttp"
)

// The /docs pages, written for fw: Swagger UI's page, and the page served when
// the Swagger UI assets were not fetched before the build.
//
//go:embed ui/index.html ui/missing.html
var pages embed.FS

// The Swagger UI assets that scripts/fetch-swagger-ui.sh puts into ui/dist
// (git-ignored but for its README.md, so the pattern always matches a file).
//
//go:embed all:ui/dist
var dist embed.FS

const (
	pagePath    = "ui/index.html"
	missingPath = "ui/missing.html"
	distDir     = "ui/dist"

	// pageTitle is the title the embedded pages carry; New replaces it.
	pageTitle = "fw model server: API"

	assetCacheControl = "public, max-age=86400"
	pageCacheControl  = "no-cache"
)

// assetTypes are the content types of the files the asset folder holds.
var assetTypes = map[string]string{
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".html": "text/html; charset=utf-8",
	".json": "application/json",
	".map":  "application/json",
	".png":  "image/png",
	".svg":  "image/svg+xml",
	".md":   "text/markdown; charset=utf-8",
	".txt":  "text/plain; charset=utf-8",
	"":      "text/plain; charset=utf-8", // LICENSE, NOTICE
}

// embeddedAssets is the embedded Swagger UI folder (ui/dist).
var embeddedAssets = sync.OnceValue(func() fs.FS {
	sub, err := fs.Sub(dist, distDir)
	if err != nil { // cannot happen: distDir is embedded
		return dist
	}
	return sub
})

// file is one response body, prepared once: its ETag and, when it pays, a
// gzip variant.
type file struct {
	body  []byte
	gz    []byte
	etag  string
	ctype string
	cache string
}

func newFile(body []byte, ctype, cache string) *file {
	sum := sha256.Sum256(body)
	f := &file{body: body, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: ctype, cache: cache}
	if len(body) >= 1024 {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		zw.Write(body)
		zw.Close()
		if b.Len() < len(body)*9/10 {
			f.gz = b.Bytes()
		}
	}
	return f
}

// write sends the file (304 when If-None-Match holds its ETag; gzip when the
// client takes it).
func (f *file) write(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	h.Set("Cache-Control", f.cache)
	h.Set("ETag", f.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	if f.gz != nil {
		h.Set("Vary", "Accept-Encoding")
	}
	if inm := ctx.Request.Header.Peek("If-None-Match"); len(inm) > 0 && bytes.Contains(inm, []byte(f.etag)) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	h.SetContentType(f.ctype)
	ctx.SetStatusCode(fasthttp.StatusOK)
	if f.gz != nil && ctx.Request.Header.HasAcceptEncoding("gzip") {
		h.Set("Content-Encoding", "gzip")
		ctx.SetBody(f.gz)
		return
	}
	ctx.SetBody(f.body)
}

// Site serves one API description under Swagger UI: the /docs page, the
// /docs/<asset> files and the document itself. The page loads the document
// from GET /openapi.json of the server that serves it. A Site is safe for
// concurrent use.
type Site struct {
	assets  fs.FS
	bundled bool
	page    *file
	spec    *Spec

	mu    sync.Mutex
	files map[string]*file // assets prepared so far (only names that exist)
}

// New serves spec (an OpenAPI document) under Swagger UI, the pages titled
// title ("" keeps the embedded pages' title). assets is the Swagger UI folder;
// nil means the embedded one (filled by scripts/fetch-swagger-ui.sh). Without
// swagger-ui-bundle.js and swagger-ui.css in it, /docs serves the page that
// says how to get them.
func New(title string, spec []byte, assets fs.FS) *Site {
	if assets == nil {
		assets = embeddedAssets()
	}
	s := &Site{assets: assets, files: map[string]*file{}}
	s.bundled = isFile(assets, "swagger-ui-bundle.js") && isFile(assets, "swagger-ui.css")
	name := missingPath
	if s.bundled {
		name = pagePath
	}
	page, err := fs.ReadFile(pages, name)
	if err != nil { // cannot happen with the embedded pages; still never a 500
		page = []byte(`<!doctype html><title>fw API</title><p>See <a href="/openapi.json">/openapi.json</a>.</p>`)
	}
	if title != "" && title != pageTitle {
		page = bytes.ReplaceAll(page, []byte(pageTitle), []byte(html.EscapeString(title)))
	}
	s.page = newFile(page, "text/html; charset=utf-8", pageCacheControl)
	s.spec = NewSpec(spec)
	return s
}

// Spec is an API description prepared to serve at GET /openapi.json: its
// ETag and gzip variant computed once. A server whose document changes at
// run time (fw serve's, which describes the models it serves) prepares one
// per version of it and serves it with Serve. A Spec is immutable.
type Spec struct{ f *file }

// NewSpec prepares doc (an OpenAPI document in JSON) to be served.
func NewSpec(doc []byte) *Spec {
	return &Spec{newFile(doc, "application/json", pageCacheControl)}
}

// Body is the document.
func (p *Spec) Body() []byte { return p.f.body }

// Serve answers GET /openapi.json with the document (304 when
// If-None-Match holds its ETag; gzip when the client takes it).
func (p *Spec) Serve(ctx *fasthttp.RequestCtx) { p.f.write(ctx) }

func isFile(fsys fs.FS, name string) bool {
	st, err := fs.Stat(fsys, name)
	return err == nil && st.Mode().IsRegular()
}

// Bundled reports whether the Swagger UI assets are there (else /docs is the
// page that says how to get them).
func (s *Site) Bundled() bool { return s.bundled }

// ServePage answers GET /docs.
func (s *Site) ServePage(ctx *fasthttp.RequestCtx) { s.page.write(ctx) }

// ServeSpec answers GET /openapi.json with the document the Site was made
// with.
func (s *Site) ServeSpec(ctx *fasthttp.RequestCtx) { s.spec.Serve(ctx) }

// Spec is the document the Site was made with.
func (s *Site) Spec() *Spec { return s.spec }

// ServeAsset answers GET /docs/<name>: name must be a plain file name (no
// slashes, no "..", no dot files) that exists in the asset folder; anything
// else is a 404 in fw's error shape (code "not_found", details {"asset": name}).
func (s *Site) ServeAsset(ctx *fasthttp.RequestCtx, name string) {
	if f := s.asset(name); f != nil {
		f.write(ctx)
		return
	}
	apierror.Write(ctx, apierror.New(fasthttp.StatusNotFound, "not_found", "no such documentation asset; see GET /docs", map[string]any{"asset": name}))
}

func (s *Site) asset(name string) *file {
	if name == "" || strings.HasPrefix(name, ".") || strings.ContainsAny(name, "/\\\x00") || !fs.ValidPath(name) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.files[name]; ok {
		return f
	}
	if !isFile(s.assets, name) {
		return nil
	}
	body, err := fs.ReadFile(s.assets, name)
	if err != nil {
		return nil
	}
	ctype, ok := assetTypes[path.Ext(name)]
	if !ok {
		ctype = "application/octet-stream"
	}
	f := newFile(body, ctype, assetCacheControl)
	s.files[name] = f
	return f
}
