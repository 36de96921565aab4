// Package webui serves the dashboard's web UI: the Vite build of web/
// (written into dist/ by `make web`) embedded into the binary, so
// `fw dashboard` serves the UI at / with no other process. Paths that are
// not files get index.html (the UI routes them in the browser); hashed
// assets are cached for a year, index.html never.
package webui

import (
	"embed"
	"io/fs"
	"mime"
	"os"
	"path"
	"strings"

	"github.com/valyala/fasthttp"
)

//go:embed all:dist
var dist embed.FS

// notBuilt is answered at / when the binary was built without `make web`.
const notBuilt = `<!doctype html><meta charset="utf-8"><title>fw dashboard</title>
<body style="font-family:system-ui;max-width:40em;margin:3em auto">
<h1>fw dashboard</h1>
<p>This binary was built without the web UI. Build it with <code>make web build</code>
(needs Node.js and npm), or use the API: <a href="/docs">/docs</a>.</p>`

// Site answers requests for the UI from a file system holding index.html
// and assets/.
type Site struct {
	files fs.FS
	// files read once (nil with NewDir, which reads them per request)
	cache map[string][]byte
}

// New serves the embedded build.
func New() *Site {
	sub, err := fs.Sub(dist, "dist")
	if err != nil { // cannot happen: dist is embedded
		panic(err)
	}
	return NewFS(sub)
}

// NewFS serves the UI from files (tests use a fstest.MapFS), read once: the
// requests are answered from memory without copying.
func NewFS(files fs.FS) *Site {
	cache := map[string][]byte{}
	_ = fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, err := fs.ReadFile(files, name); err == nil {
				cache[name] = b
			}
		}
		return nil
	})
	return &Site{files: files, cache: cache}
}

// NewDir serves the UI from a directory, re-reading index.html on every
// request: for working on the UI (`vite build --watch --outDir DIR` and
// `fw dashboard --ui-dir DIR`) without rebuilding the binary.
func NewDir(dir string) *Site { return &Site{files: os.DirFS(dir)} }

// read returns a file of the build.
func (s *Site) read(name string) ([]byte, bool) {
	if s.cache != nil {
		b, ok := s.cache[name]
		return b, ok
	}
	b, err := fs.ReadFile(s.files, name)
	return b, err == nil
}

// Built reports whether the UI was built (index.html is there).
func (s *Site) Built() bool {
	_, ok := s.read("index.html")
	return ok
}

// Serve answers GET and HEAD for p (a path outside /api): a file of the
// build, or index.html for the UI's own routes. It reports false when it
// did not answer (a missing asset, another method), leaving the response to
// the caller's error handling.
func (s *Site) Serve(ctx *fasthttp.RequestCtx, p string) bool {
	if !ctx.IsGet() && !ctx.IsHead() {
		return false
	}
	name := strings.TrimPrefix(path.Clean("/"+p), "/")
	if name != "" && name != "index.html" && !strings.HasPrefix(name, ".") && fs.ValidPath(name) {
		if b, ok := s.read(name); ok {
			ct := mime.TypeByExtension(path.Ext(name))
			if ct == "" {
				ct = "application/octet-stream"
			}
			ctx.SetContentType(ct)
			if strings.HasPrefix(name, "assets/") { // content-hashed names
				ctx.Response.Header.Set("Cache-Control", "public, max-age=31536000, immutable")
			} else {
				ctx.Response.Header.Set("Cache-Control", "no-cache")
			}
			ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
			ctx.Response.SetBodyRaw(b) // never modified: no copy
			return true
		}
		// A missing file under assets/ or with an extension is a 404, not the
		// UI: a stale page asking for an old bundle must fail visibly.
		if strings.HasPrefix(name, "assets/") || path.Ext(name) != "" {
			return false
		}
	}
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.Response.Header.Set("X-Frame-Options", "DENY")
	ctx.Response.Header.Set("Referrer-Policy", "same-origin")
	index, ok := s.read("index.html")
	if !ok {
		ctx.SetBodyString(notBuilt)
		return true
	}
	ctx.Response.SetBodyRaw(index)
	return true
}
