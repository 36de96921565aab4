package httpapi

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

	"github.com/valyala/fasthttp"
)

// The API description: a static OpenAPI 3.1 document, valid on its own.
//
//go:embed openapi.json
var openAPIJSON []byte

// The /docs pages, written for fw: Swagger UI's page, and the page served when
// the Swagger UI assets were not fetched before the build.
//
//go:embed docsui/index.html docsui/missing.html
var docsPages embed.FS

// The Swagger UI assets that scripts/fetch-swagger-ui.sh puts into
// docsui/dist (git-ignored but for its README.md, so the pattern always
// matches a file).
//
//go:embed all:docsui/dist
var docsDist embed.FS

const (
	docsAssetCacheControl = "public, max-age=86400"
	docsPageCacheControl  = "no-cache"
)

// docsAssetTypes are the content types of the files the asset folder holds.
var docsAssetTypes = map[string]string{
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

// docsFile is one response body, prepared once: its ETag and, when it pays,
// a gzip variant.
type docsFile struct {
	body  []byte
	gz    []byte
	etag  string
	ctype string
	cache string
}

func newDocsFile(body []byte, ctype, cache string) *docsFile {
	sum := sha256.Sum256(body)
	f := &docsFile{body: body, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: ctype, cache: cache}
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
func (f *docsFile) write(ctx *fasthttp.RequestCtx) {
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

// docsSite serves /docs, /docs/<asset> and /openapi.json. assets is the
// Swagger UI folder; without swagger-ui-bundle.js and swagger-ui.css in it,
// /docs serves the page that says how to get them.
type docsSite struct {
	assets  fs.FS
	bundled bool
	page    *docsFile
	spec    *docsFile

	mu    sync.Mutex
	files map[string]*docsFile // assets prepared so far (only names that exist)
}

func newDocsSite(assets fs.FS, pages fs.FS, spec []byte) *docsSite {
	d := &docsSite{assets: assets, files: map[string]*docsFile{}}
	d.bundled = isFile(assets, "swagger-ui-bundle.js") && isFile(assets, "swagger-ui.css")
	name := "docsui/missing.html"
	if d.bundled {
		name = "docsui/index.html"
	}
	page, err := fs.ReadFile(pages, name)
	if err != nil { // cannot happen with the embedded pages; still never a 500
		page = []byte(`<!doctype html><title>fw API</title><p>See <a href="/openapi.json">/openapi.json</a>.</p>`)
	}
	d.page = newDocsFile(page, "text/html; charset=utf-8", docsPageCacheControl)
	d.spec = newDocsFile(spec, "application/json", docsPageCacheControl)
	return d
}

func isFile(fsys fs.FS, name string) bool {
	st, err := fs.Stat(fsys, name)
	return err == nil && st.Mode().IsRegular()
}

// serveAsset serves one file of the asset folder: name must be a plain file
// name (no slashes, no "..", no dot files) that exists there; else 404.
func (d *docsSite) serveAsset(ctx *fasthttp.RequestCtx, name string) {
	if f := d.asset(name); f != nil {
		f.write(ctx)
		return
	}
	writeError(ctx, newError(404, CodeNotFound, "no such documentation asset; see GET /docs", map[string]any{"asset": name}))
}

func (d *docsSite) asset(name string) *docsFile {
	if name == "" || strings.HasPrefix(name, ".") || strings.ContainsAny(name, "/\\\x00") || !fs.ValidPath(name) {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if f, ok := d.files[name]; ok {
		return f
	}
	if !isFile(d.assets, name) {
		return nil
	}
	body, err := fs.ReadFile(d.assets, name)
	if err != nil {
		return nil
	}
	ctype, ok := docsAssetTypes[path.Ext(name)]
	if !ok {
		ctype = "application/octet-stream"
	}
	f := newDocsFile(body, ctype, docsAssetCacheControl)
	d.files[name] = f
	return f
}

var defaultDocs = sync.OnceValue(func() *docsSite {
	assets, err := fs.Sub(docsDist, "docsui/dist")
	if err != nil {
		assets = docsDist
	}
	return newDocsSite(assets, docsPages, openAPIJSON)
})

// handleDocs serves GET /docs: Swagger UI on /openapi.json, loaded from the
// server itself (no CDN), or a plain page saying how to get it.
func (s *Server) handleDocs(ctx *fasthttp.RequestCtx) { defaultDocs().page.write(ctx) }

// handleDocsAsset serves GET /docs/<asset> from the embedded Swagger UI.
func (s *Server) handleDocsAsset(ctx *fasthttp.RequestCtx) {
	defaultDocs().serveAsset(ctx, strings.TrimPrefix(string(ctx.Path()), "/docs/"))
}

// handleOpenAPI serves GET /openapi.json.
func (s *Server) handleOpenAPI(ctx *fasthttp.RequestCtx) { defaultDocs().spec.write(ctx) }

// DocsSite serves this package's embedded Swagger UI for another API
// description (the dashboard's): the /docs page, the /docs/<asset> files and
// the document itself, with the same caching, ETags and gzip as the model
// server's own /docs. The page loads the document from GET /openapi.json of
// the server that serves it.
type DocsSite struct{ d *docsSite }

// docsPageTitle is the title the embedded pages carry; NewDocsSite replaces it.
const docsPageTitle = "fw model server: API"

// NewDocsSite serves spec under Swagger UI, the pages titled title. assets
// is the Swagger UI folder; nil means the embedded one (filled by
// scripts/fetch-swagger-ui.sh; without it the page says how to get it).
func NewDocsSite(title string, spec []byte, assets fs.FS) *DocsSite {
	if assets == nil {
		assets = defaultDocs().assets
	}
	d := newDocsSite(assets, docsPages, spec)
	if title != "" && title != docsPageTitle {
		page := bytes.ReplaceAll(d.page.body, []byte(docsPageTitle), []byte(html.EscapeString(title)))
		d.page = newDocsFile(page, d.page.ctype, d.page.cache)
	}
	return &DocsSite{d: d}
}

// Bundled reports whether the Swagger UI assets are there (else /docs is the
// page that says how to get them).
func (s *DocsSite) Bundled() bool { return s.d.bundled }

// ServePage answers GET /docs.
func (s *DocsSite) ServePage(ctx *fasthttp.RequestCtx) { s.d.page.write(ctx) }

// ServeSpec answers GET /openapi.json.
func (s *DocsSite) ServeSpec(ctx *fasthttp.RequestCtx) { s.d.spec.write(ctx) }

// ServeAsset answers GET /docs/<asset> (404 in the error shape for anything
// but a file of the asset folder).
func (s *DocsSite) ServeAsset(ctx *fasthttp.RequestCtx) {
	s.d.serveAsset(ctx, strings.TrimPrefix(string(ctx.Path()), "/docs/"))
}
