package docsite

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/fw-serve/fw/internal/apierror"
	"github.com/valyala/fasthttp"
)

var testSpec = []byte(`{"openapi": "3.1.0", "info": {"title": "test", "version": "1"}, "paths": {}}`)

func bundledAssets(bundle []byte) fstest.MapFS {
	return fstest.MapFS{
		"swagger-ui-bundle.js": {Data: bundle},
		"swagger-ui.css":       {Data: []byte(".swagger-ui{}")},
		"LICENSE":              {Data: []byte("Apache License")},
		"README.md":            {Data: []byte("# placeholder")},
	}
}

func page(s *Site, hdr map[string]string) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	for k, v := range hdr {
		ctx.Request.Header.Set(k, v)
	}
	s.ServePage(&ctx)
	return &ctx
}

func spec(s *Site, hdr map[string]string) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	for k, v := range hdr {
		ctx.Request.Header.Set(k, v)
	}
	s.ServeSpec(&ctx)
	return &ctx
}

func asset(s *Site, name string, hdr map[string]string) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	for k, v := range hdr {
		ctx.Request.Header.Set(k, v)
	}
	s.ServeAsset(&ctx, name)
	return &ctx
}

// TestSite covers both branches of the page and the asset handler with an
// asset folder given as an fs.FS.
func TestSite(t *testing.T) {
	bundle := []byte(strings.Repeat("window.SwaggerUIBundle = function () {};\n", 100))
	with := New("", testSpec, bundledAssets(bundle))
	without := New("", testSpec, fstest.MapFS{"README.md": {Data: []byte("# placeholder")}})
	if !with.Bundled() || without.Bundled() {
		t.Fatalf("Bundled(): with %v, without %v", with.Bundled(), without.Bundled())
	}

	ctx := page(with, nil)
	body := string(ctx.Response.Body())
	if ctx.Response.StatusCode() != 200 || string(ctx.Response.Header.ContentType()) != "text/html; charset=utf-8" {
		t.Fatalf("/docs: %d %s", ctx.Response.StatusCode(), ctx.Response.Header.ContentType())
	}
	if cc := string(ctx.Response.Header.Peek("Cache-Control")); cc != pageCacheControl {
		t.Errorf("/docs: Cache-Control %q", cc)
	}
	for _, want := range []string{`src="/docs/swagger-ui-bundle.js"`, `href="/docs/swagger-ui.css"`, `url: "/openapi.json"`, "validatorUrl: null", "<title>" + pageTitle + "</title>"} {
		if !strings.Contains(body, want) {
			t.Errorf("/docs page lacks %s", want)
		}
	}
	if regexp.MustCompile(`(src|href)="https?:`).MatchString(body) {
		t.Error("/docs page loads something from another host")
	}
	ctx = page(without, nil)
	body = string(ctx.Response.Body())
	if ctx.Response.StatusCode() != 200 || !strings.HasPrefix(string(ctx.Response.Header.ContentType()), "text/html") {
		t.Fatalf("/docs without bundle: %d %s", ctx.Response.StatusCode(), ctx.Response.Header.ContentType())
	}
	if !strings.Contains(body, "make setup") || !strings.Contains(body, `href="/openapi.json"`) || strings.Contains(body, "swagger-ui-bundle.js") {
		t.Errorf("/docs without bundle: %s", body)
	}

	for name, ct := range map[string]string{
		"swagger-ui-bundle.js": "text/javascript; charset=utf-8",
		"swagger-ui.css":       "text/css; charset=utf-8",
		"LICENSE":              "text/plain; charset=utf-8",
		"README.md":            "text/markdown; charset=utf-8",
	} {
		ctx := asset(with, name, nil)
		if ctx.Response.StatusCode() != 200 || string(ctx.Response.Header.ContentType()) != ct {
			t.Errorf("%s: %d %s, want 200 %s", name, ctx.Response.StatusCode(), ctx.Response.Header.ContentType(), ct)
		}
		if cc := string(ctx.Response.Header.Peek("Cache-Control")); cc != assetCacheControl {
			t.Errorf("%s: Cache-Control %q", name, cc)
		}
		if string(ctx.Response.Header.Peek("X-Content-Type-Options")) != "nosniff" {
			t.Errorf("%s: no nosniff", name)
		}
	}
	ctx = asset(with, "swagger-ui-bundle.js", nil)
	if !bytes.Equal(ctx.Response.Body(), bundle) {
		t.Error("bundle body differs")
	}
	etag := string(ctx.Response.Header.Peek("ETag"))
	if ctx = asset(with, "swagger-ui-bundle.js", map[string]string{"If-None-Match": etag}); ctx.Response.StatusCode() != 304 || len(ctx.Response.Body()) != 0 {
		t.Errorf("If-None-Match: %d, %d bytes", ctx.Response.StatusCode(), len(ctx.Response.Body()))
	}
	if ctx = asset(with, "swagger-ui-bundle.js", map[string]string{"If-None-Match": `"other"`}); ctx.Response.StatusCode() != 200 {
		t.Errorf("If-None-Match with another ETag: %d", ctx.Response.StatusCode())
	}
	ctx = asset(with, "swagger-ui-bundle.js", map[string]string{"Accept-Encoding": "gzip, deflate"})
	if string(ctx.Response.Header.Peek("Content-Encoding")) != "gzip" || string(ctx.Response.Header.Peek("Vary")) != "Accept-Encoding" {
		t.Fatalf("the bundle is not gzipped: Content-Encoding %q, Vary %q", ctx.Response.Header.Peek("Content-Encoding"), ctx.Response.Header.Peek("Vary"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(ctx.Response.Body()))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(zr); !bytes.Equal(b, bundle) {
		t.Error("gzipped bundle differs")
	}
	// A small file is never gzipped.
	if ctx = asset(with, "swagger-ui.css", map[string]string{"Accept-Encoding": "gzip"}); len(ctx.Response.Header.Peek("Content-Encoding")) != 0 {
		t.Errorf("swagger-ui.css (13 bytes) is gzipped")
	}

	for _, name := range []string{"swagger-ui-bundle.js", "swagger-ui.css", "index.html", "missing.html"} {
		ctx := asset(without, name, nil)
		if ctx.Response.StatusCode() != 404 {
			t.Errorf("without bundle, %s: %d, want 404", name, ctx.Response.StatusCode())
		}
		checkNotFound(t, ctx, name)
	}
}

// checkNotFound checks the 404 of an unknown asset: fw's error shape, code
// not_found, the message and {"asset": name}.
func checkNotFound(t *testing.T, ctx *fasthttp.RequestCtx, name string) {
	t.Helper()
	if string(ctx.Response.Header.ContentType()) != "application/json" {
		t.Errorf("asset %q: Content-Type %q", name, ctx.Response.Header.ContentType())
	}
	var e struct{ Error apierror.Error }
	if err := json.Unmarshal(ctx.Response.Body(), &e); err != nil {
		t.Fatalf("asset %q: %v: %s", name, err, ctx.Response.Body())
	}
	if e.Error.Code != "not_found" || e.Error.Message != "no such documentation asset; see GET /docs" {
		t.Errorf("asset %q: body %s", name, ctx.Response.Body())
	}
	if d, _ := e.Error.Details.(map[string]any); d["asset"] != name || len(d) != 1 {
		t.Errorf("asset %q: details %v", name, e.Error.Details)
	}
}

// The asset lookup refuses anything but a plain existing name, whatever the
// router lets through.
func TestAssetNames(t *testing.T) {
	s := New("", testSpec, fstest.MapFS{
		"swagger-ui-bundle.js": {Data: []byte("js")}, "swagger-ui.css": {Data: []byte("css")},
		".hidden": {Data: []byte("x")}, "sub/file.js": {Data: []byte("x")},
	})
	for _, name := range []string{"", ".", "..", "../docs.go", "../../etc/passwd", "/etc/passwd", "sub/file.js", "sub", ".hidden", `..\docs.go`, "a\x00b", "swagger-ui.css/", "nope.js"} {
		ctx := asset(s, name, nil)
		if ctx.Response.StatusCode() != 404 {
			t.Errorf("asset %q: %d, want 404", name, ctx.Response.StatusCode())
			continue
		}
		checkNotFound(t, ctx, name)
	}
	if ctx := asset(s, "swagger-ui.css", nil); ctx.Response.StatusCode() != 200 || string(ctx.Response.Body()) != "css" {
		t.Errorf("swagger-ui.css: %d %q", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// The spec is served as given, with an ETag (304 on If-None-Match) and gzip
// when it is large enough.
func TestSpec(t *testing.T) {
	small := New("", testSpec, nil)
	ctx := spec(small, nil)
	if ctx.Response.StatusCode() != 200 || string(ctx.Response.Header.ContentType()) != "application/json" || !bytes.Equal(ctx.Response.Body(), testSpec) {
		t.Fatalf("spec: %d %s %q", ctx.Response.StatusCode(), ctx.Response.Header.ContentType(), ctx.Response.Body())
	}
	if cc := string(ctx.Response.Header.Peek("Cache-Control")); cc != pageCacheControl {
		t.Errorf("spec: Cache-Control %q", cc)
	}
	etag := string(ctx.Response.Header.Peek("ETag"))
	if !regexp.MustCompile(`^"[0-9a-f]{24}"$`).MatchString(etag) {
		t.Errorf("spec: ETag %q", etag)
	}
	if ctx := spec(small, map[string]string{"If-None-Match": `W/"x", ` + etag}); ctx.Response.StatusCode() != 304 || len(ctx.Response.Body()) != 0 {
		t.Errorf("spec If-None-Match: %d", ctx.Response.StatusCode())
	}
	large := []byte(`{"openapi": "3.1.0", "x": "` + strings.Repeat("abc ", 1000) + `"}`)
	ctx = spec(New("", large, nil), map[string]string{"Accept-Encoding": "gzip"})
	if string(ctx.Response.Header.Peek("Content-Encoding")) != "gzip" {
		t.Fatal("a large spec is not gzipped")
	}
	zr, err := gzip.NewReader(bytes.NewReader(ctx.Response.Body()))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(zr); !bytes.Equal(b, large) {
		t.Error("gzipped spec differs")
	}
	if ctx := spec(New("", large, nil), nil); len(ctx.Response.Header.Peek("Content-Encoding")) != 0 || !bytes.Equal(ctx.Response.Body(), large) {
		t.Error("spec without Accept-Encoding: gzipped or different")
	}
}

// New puts the title, escaped, into both pages.
func TestTitle(t *testing.T) {
	for _, assets := range []fstest.MapFS{bundledAssets([]byte("js")), {"README.md": {Data: []byte("x")}}} {
		s := New(`fw dashboard: API <&>`, testSpec, assets)
		body := string(page(s, nil).Response.Body())
		if !strings.Contains(body, "<title>fw dashboard: API &lt;&amp;&gt;</title>") || strings.Contains(body, pageTitle) {
			t.Errorf("bundled %v: page %s", s.Bundled(), body)
		}
	}
}

// With nil assets, a Site serves the embedded Swagger UI (when
// scripts/fetch-swagger-ui.sh ran) or the page that says how to get it.
func TestEmbedded(t *testing.T) {
	s := New("fw test: API", testSpec, nil)
	body := string(page(s, nil).Response.Body())
	if s.Bundled() {
		t.Log("Swagger UI is embedded")
		if !strings.Contains(body, `src="/docs/swagger-ui-bundle.js"`) {
			t.Error("/docs does not load the embedded bundle")
		}
		for name, ct := range map[string]string{"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css", "LICENSE": "text/plain", "NOTICE": "text/plain"} {
			ctx := asset(s, name, nil)
			if ctx.Response.StatusCode() != 200 || !strings.HasPrefix(string(ctx.Response.Header.ContentType()), ct) || len(ctx.Response.Body()) == 0 {
				t.Errorf("%s: %d %s", name, ctx.Response.StatusCode(), ctx.Response.Header.ContentType())
			}
		}
	} else {
		t.Log("Swagger UI is not embedded (scripts/fetch-swagger-ui.sh not run)")
		if !strings.Contains(body, "make setup") {
			t.Error("/docs without the bundle does not say to run make setup")
		}
		if ctx := asset(s, "swagger-ui-bundle.js", nil); ctx.Response.StatusCode() != 404 {
			t.Errorf("swagger-ui-bundle.js without the bundle: %d", ctx.Response.StatusCode())
		}
	}
	if !strings.Contains(body, "fw test: API") {
		t.Error("the embedded page does not carry the title")
	}
	// The committed README is always there, so the go:embed pattern matches.
	if ctx := asset(s, "README.md", nil); ctx.Response.StatusCode() != 200 || !bytes.Contains(ctx.Response.Body(), []byte("fetch-swagger-ui.sh")) {
		t.Errorf("README.md: %d", ctx.Response.StatusCode())
	}
	// The pages themselves are not assets.
	for _, name := range []string{"index.html", "missing.html"} {
		if ctx := asset(s, name, nil); ctx.Response.StatusCode() != 404 {
			t.Errorf("%s: %d, want 404", name, ctx.Response.StatusCode())
		}
	}
}

// The embedded asset folder never holds more than the fetch script puts
// there (a stray file would be served).
func TestEmbeddedFiles(t *testing.T) {
	allowed := []string{"README.md", "swagger-ui-bundle.js", "swagger-ui.css", "LICENSE", "NOTICE", "swagger-ui-bundle.js.LICENSE.txt"}
	entries, err := dist.ReadDir(distDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !slices.Contains(allowed, e.Name()) {
			t.Errorf("%s holds %s, which scripts/fetch-swagger-ui.sh does not put there", distDir, e.Name())
		}
	}
	for _, name := range []string{pagePath, missingPath} {
		if _, err := pages.ReadFile(name); err != nil {
			t.Errorf("embedded page %s: %v", name, err)
		}
	}
}
