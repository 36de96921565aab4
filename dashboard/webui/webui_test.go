package webui

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/valyala/fasthttp"
)

func get(t *testing.T, s *Site, method, p string) (*fasthttp.RequestCtx, bool) {
	t.Helper()
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(p)
	ok := s.Serve(&ctx, p)
	return &ctx, ok
}

func TestServe(t *testing.T) {
	s := NewFS(fstest.MapFS{
		"index.html":         {Data: []byte("<html>ui</html>")},
		"assets/app-123.js":  {Data: []byte("console.log(1)")},
		"assets/app-123.css": {Data: []byte("body{}")},
		"favicon.svg":        {Data: []byte("<svg/>")},
	})
	if !s.Built() {
		t.Fatal("Built() = false with an index.html")
	}
	cases := []struct {
		method, path string
		ok           bool
		body, ctype  string
		cache        string
	}{
		{"GET", "/", true, "<html>ui</html>", "text/html", "no-cache"},
		{"GET", "/experiments/abc", true, "<html>ui</html>", "text/html", "no-cache"},
		{"GET", "/runs/x?tab=logs", true, "<html>ui</html>", "text/html", "no-cache"},
		{"HEAD", "/models", true, "<html>ui</html>", "text/html", "no-cache"},
		{"GET", "/assets/app-123.js", true, "console.log(1)", "javascript", "immutable"},
		{"GET", "/assets/app-123.css", true, "body{}", "text/css", "immutable"},
		{"GET", "/favicon.svg", true, "<svg/>", "image/svg+xml", "no-cache"},
		{"GET", "/assets/old-999.js", false, "", "", ""},
		{"GET", "/missing.png", false, "", "", ""},
		{"GET", "/../../etc/passwd", true, "<html>ui</html>", "text/html", "no-cache"}, // cleaned to /etc/passwd: no such file, so the UI
		{"POST", "/", false, "", "", ""},
	}
	for _, c := range cases {
		ctx, ok := get(t, s, c.method, c.path)
		if ok != c.ok {
			t.Errorf("%s %s: served=%v, want %v", c.method, c.path, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		if got := string(ctx.Response.Body()); got != c.body {
			t.Errorf("%s %s: body %q, want %q", c.method, c.path, got, c.body)
		}
		if ct := string(ctx.Response.Header.ContentType()); !strings.Contains(ct, c.ctype) {
			t.Errorf("%s %s: content type %q, want %q", c.method, c.path, ct, c.ctype)
		}
		if cc := string(ctx.Response.Header.Peek("Cache-Control")); !strings.Contains(cc, c.cache) {
			t.Errorf("%s %s: cache-control %q, want %q", c.method, c.path, cc, c.cache)
		}
	}
}

func TestNotBuilt(t *testing.T) {
	s := NewFS(fstest.MapFS{"README.md": {Data: []byte("x")}})
	if s.Built() {
		t.Fatal("Built() = true without index.html")
	}
	ctx, ok := get(t, s, "GET", "/")
	if !ok || !strings.Contains(string(ctx.Response.Body()), "make web") {
		t.Fatalf("served=%v body=%q: want the how-to-build page", ok, ctx.Response.Body())
	}
}

func TestEmbedded(t *testing.T) {
	// The embedded build (or only its README) always loads.
	s := New()
	if _, ok := get(t, s, "GET", "/"); !ok {
		t.Fatal("/ not served from the embedded files")
	}
}
