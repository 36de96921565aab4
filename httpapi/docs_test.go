package httpapi

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/oasdoc"
	"github.com/fw-serve/fw/serving"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// routedPaths is every path the router (server.go route, v2.go) serves, in
// the OpenAPI document's templated form. Keep it in step with the router:
// TestOpenAPIPathsMatchRouter checks the document against it, and
// TestOpenAPIDocumentedPathsAreRouted checks each one really is routed.
var routedPaths = []string{
	"/",
	"/predict",
	"/predict/image",
	"/predict/batch",
	"/health",
	"/health/live",
	"/health/ready",
	"/model",
	"/metrics",
	"/docs",
	"/docs/{asset}",
	"/openapi.json",
	"/v2",
	"/v2/health/live",
	"/v2/health/ready",
	"/v2/models/{model_name}",
	"/v2/models/{model_name}/ready",
	"/v2/models/{model_name}/infer",
	"/v2/models/{model_name}/generate",
	"/v2/models/{model_name}/generate_stream",
	"/v2/models/{model_name}/versions/{model_version}",
	"/v2/models/{model_name}/versions/{model_version}/ready",
	"/v2/models/{model_name}/versions/{model_version}/infer",
	"/v2/models/{model_name}/versions/{model_version}/generate",
	"/v2/models/{model_name}/versions/{model_version}/generate_stream",
	"/v2/models/{model_name}/config",
	"/v2/models/{model_name}/stats",
	"/v2/models/{model_name}/versions/{model_version}/config",
	"/v2/models/{model_name}/versions/{model_version}/stats",
	"/v2/models/stats",
	"/v2/repository/index",
	"/v2/repository/models/{model_name}/load",
	"/v2/repository/models/{model_name}/unload",
	"/v2/systemsharedmemory/status",
	"/v2/systemsharedmemory/region/{region_name}/status",
	"/v2/systemsharedmemory/region/{region_name}/register",
	"/v2/systemsharedmemory/unregister",
	"/v2/systemsharedmemory/region/{region_name}/unregister",
	"/v2/cudasharedmemory/status",
	"/v2/cudasharedmemory/region/{region_name}/status",
	"/v2/cudasharedmemory/region/{region_name}/register",
	"/v2/cudasharedmemory/unregister",
	"/v2/cudasharedmemory/region/{region_name}/unregister",
	"/v2/logging",
	"/v2/trace/setting",
	"/v2/models/{model_name}/trace/setting",
}

// TestOpenAPIDocument checks the static document and the documents the
// server answers for several sets of served models (servedTestDocuments):
// each is a valid OpenAPI 3.1 document by the checks below.
func TestOpenAPIDocument(t *testing.T) {
	for name, b := range openAPIDocuments(t) {
		t.Run(name, func(t *testing.T) { checkOpenAPIDocument(t, b) })
	}
}

func checkOpenAPIDocument(t *testing.T, b []byte) {
	doc := oasdoc.Parse(t, b)
	if v, _ := doc["openapi"].(string); !regexp.MustCompile(`^3\.1\.\d+$`).MatchString(v) {
		t.Fatalf("openapi = %q, want 3.1.x", v)
	}
	info, _ := doc["info"].(map[string]any)
	if v, _ := info["version"].(string); v == "" || info["title"] == "" {
		t.Fatalf("info needs title and version: %v", info)
	}
	servers, _ := doc["servers"].([]any)
	if len(servers) == 0 || servers[0].(map[string]any)["url"] != "/" {
		t.Fatalf(`servers must start with {"url": "/"}: %v`, servers)
	}
	// Every $ref resolves.
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				oasdoc.Pointer(t, doc, ref)
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	// Operation ids are unique and every path parameter is declared.
	seen := map[string]bool{}
	for _, o := range oasdoc.Operations(doc) {
		id, _ := o.Op["operationId"].(string)
		if id == "" || seen[id] {
			t.Errorf("%s %s: operationId %q missing or repeated", o.Method, o.Path, id)
		}
		seen[id] = true
		declared := map[string]bool{}
		params, _ := doc["paths"].(map[string]any)[o.Path].(map[string]any)["parameters"].([]any)
		opParams, _ := o.Op["parameters"].([]any)
		for _, p := range append(slices.Clone(params), opParams...) {
			pm := oasdoc.Resolve(t, doc, p).(map[string]any)
			if pm["in"] == "path" {
				declared[pm["name"].(string)] = true
			}
		}
		for _, m := range regexp.MustCompile(`\{([^}]+)\}`).FindAllStringSubmatch(o.Path, -1) {
			if !declared[m[1]] {
				t.Errorf("%s %s: path parameter %q is not declared", o.Method, o.Path, m[1])
			}
		}
		if _, ok := o.Op["security"]; !ok {
			t.Errorf("%s %s: no explicit security (open: [], protected: [{}, {bearerAuth: []}])", o.Method, o.Path)
		}
	}
}

func TestOpenAPIPathsMatchRouter(t *testing.T) {
	for name, b := range openAPIDocuments(t) {
		t.Run(name, func(t *testing.T) { checkPathsMatchRouter(t, b) })
	}
}

func checkPathsMatchRouter(t *testing.T, b []byte) {
	doc := oasdoc.Parse(t, b)
	var documented []string
	for p := range doc["paths"].(map[string]any) {
		documented = append(documented, p)
	}
	sort.Strings(documented)
	want := slices.Sorted(slices.Values(routedPaths))
	for _, p := range want {
		if !slices.Contains(documented, p) {
			t.Errorf("routed path %s is missing from openapi.json", p)
		}
	}
	for _, p := range documented {
		if !slices.Contains(want, p) {
			t.Errorf("openapi.json documents %s, which routedPaths does not list", p)
		}
	}
}

// Security: the prediction and V2 endpoints (but V2's health) take the
// optional bearer key; the rest stays open, as the router does.
func TestOpenAPISecurityMatchesRouter(t *testing.T) {
	for name, b := range openAPIDocuments(t) {
		t.Run(name, func(t *testing.T) { checkSecurityMatchesRouter(t, b) })
	}
}

func checkSecurityMatchesRouter(t *testing.T, b []byte) {
	doc := oasdoc.Parse(t, b)
	if _, ok := oasdoc.Pointer(t, doc, "#/components/securitySchemes/bearerAuth").(map[string]any); !ok {
		t.Fatal("no bearerAuth security scheme")
	}
	for _, o := range oasdoc.Operations(doc) {
		sec, _ := o.Op["security"].([]any)
		protected := strings.HasPrefix(o.Path, "/predict") || (strings.HasPrefix(o.Path, "/v2") && !strings.HasPrefix(o.Path, "/v2/health"))
		hasBearer := false
		for _, s := range sec {
			if _, ok := s.(map[string]any)["bearerAuth"]; ok {
				hasBearer = true
			}
		}
		if protected != hasBearer {
			t.Errorf("%s %s: security %v, want bearer auth %v", o.Method, o.Path, sec, protected)
		}
		_, has401 := o.Op["responses"].(map[string]any)["401"]
		if protected != has401 {
			t.Errorf("%s %s: 401 documented %v, want %v", o.Method, o.Path, has401, protected)
		}
	}
}

// errorCodes reads the Code* constants of errors.go and the status each one's
// comment gives.
func errorCodes(t *testing.T) map[string]int {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]int{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				code, _ := strconv.Unquote(lit.Value)
				status := 0
				if vs.Comment != nil {
					status, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(vs.Comment.Text(), "//")))
				}
				if status == 0 {
					t.Fatalf("errors.go: %s has no `// <status>` comment", n.Name)
				}
				codes[code] = status
			}
		}
	}
	if len(codes) == 0 {
		t.Fatal("no Code* constants in errors.go")
	}
	return codes
}

// Every 4xx/5xx response uses the shared Error schema (V2Error under /v2,
// where v2.go moves the message to a string "error" for V2 clients), and the
// codes it names have that status in errors.go (under /v2, Triton's status
// for it, v2Status, or 500 for the refusals Triton answers so); the
// ErrorCode enum is exactly the codes of errors.go.
func TestOpenAPIErrorResponses(t *testing.T) {
	codes := errorCodes(t)
	for name, b := range openAPIDocuments(t) {
		t.Run(name, func(t *testing.T) { checkErrorResponses(t, b, codes) })
	}
}

func checkErrorResponses(t *testing.T, b []byte, codes map[string]int) {
	doc := oasdoc.Parse(t, b)
	enum := oasdoc.Pointer(t, doc, "#/components/schemas/ErrorCode/enum").([]any)
	var got []string
	for _, c := range enum {
		got = append(got, c.(string))
	}
	want := make([]string, 0, len(codes))
	for c := range codes {
		want = append(want, c)
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("ErrorCode enum %v, errors.go has %v", got, want)
	}
	for _, o := range oasdoc.Operations(doc) {
		responses := o.Op["responses"].(map[string]any)
		if len(responses) == 0 {
			t.Errorf("%s %s: no responses", o.Method, o.Path)
		}
		if _, ok := responses["405"]; !ok {
			t.Errorf("%s %s: 405 is not documented", o.Method, o.Path)
		}
		for status, r := range responses {
			code, err := strconv.Atoi(status)
			if err != nil {
				t.Errorf("%s %s: response %q is not a status code", o.Method, o.Path, status)
				continue
			}
			resp := oasdoc.Resolve(t, doc, r).(map[string]any)
			if code < 400 {
				continue
			}
			schema, _ := resp["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
			want := "#/components/schemas/Error"
			if strings.HasPrefix(o.Path, "/v2") {
				want = "#/components/schemas/V2Error"
			}
			if !refersTo(schema, want) {
				t.Errorf("%s %s %d: the application/json schema does not reference %s: %v", o.Method, o.Path, code, want, schema)
				continue
			}
			for _, c := range errorCodeEnum(schema) {
				want := codes[c]
				if strings.HasPrefix(o.Path, "/v2") {
					want = v2Status(want)
					if code == 500 && (c == CodeBadRequest || c == CodeLoadFailed) {
						want = 500 // Triton's status for a shape it cannot parse, a shared memory key it cannot open, a repository it cannot poll
					}
				}
				if want != code {
					t.Errorf("%s %s %d: code %q has status %d in errors.go", o.Method, o.Path, code, c, want)
				}
			}
		}
	}
}

func refersTo(schema map[string]any, ref string) bool {
	if schema["$ref"] == ref {
		return true
	}
	all, _ := schema["allOf"].([]any)
	for _, s := range all {
		if m, ok := s.(map[string]any); ok && m["$ref"] == ref {
			return true
		}
	}
	return false
}

// errorCodeEnum returns the codes a response narrows the Error (or
// V2Error) schema to.
func errorCodeEnum(schema map[string]any) []string {
	var out []string
	all, _ := schema["allOf"].([]any)
	for _, s := range all {
		m, _ := s.(map[string]any)
		props, _ := m["properties"].(map[string]any)
		c, _ := props["code"].(map[string]any) // V2Error
		if e, ok := props["error"].(map[string]any); ok {
			ep, _ := e["properties"].(map[string]any)
			c, _ = ep["code"].(map[string]any)
		}
		for _, v := range anySlice(c["enum"]) {
			out = append(out, v.(string))
		}
		if v, ok := c["const"].(string); ok {
			out = append(out, v)
		}
	}
	return out
}

func anySlice(v any) []any { s, _ := v.([]any); return s }

// testServer serves a Server without a model on an in-memory listener.
type testServer struct {
	srv *Server
	ln  *fasthttputil.InmemoryListener
}

func newTestServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	s := NewTestServer(context.Background(), cfg, slog.New(slog.DiscardHandler), reg)
	ln := fasthttputil.NewInmemoryListener()
	hs := &fasthttp.Server{Handler: s.Handler, StreamRequestBody: true, DisablePreParseMultipartForm: true}
	go hs.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { hs.Shutdown(); ln.Close() })
	return &testServer{srv: s, ln: ln}
}

// raw sends one request as raw bytes (so the path reaches the server exactly
// as written) and reads the response.
func (ts *testServer) raw(t *testing.T, method, target string, headers map[string]string, body []byte) *fasthttp.Response {
	t.Helper()
	c, err := ts.ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: fw.test\r\nConnection: close\r\n", method, target)
	for k, v := range headers {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	if body != nil || method == "POST" || method == "PUT" || method == "PATCH" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.Write(body)
	if _, err := c.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	resp := &fasthttp.Response{}
	if method == "HEAD" {
		resp.SkipBody = true
	}
	if err := resp.Read(bufio.NewReader(c)); err != nil {
		t.Fatalf("%s %s: reading the response: %v", method, target, err)
	}
	return resp
}

func (ts *testServer) get(t *testing.T, target string) *fasthttp.Response {
	return ts.raw(t, "GET", target, nil, nil)
}

// errorOf reads the error code of fw's error shape or of V2's.
func errorOf(t *testing.T, resp *fasthttp.Response) (code, message string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Body(), &e); err == nil {
		return e.Error.Code, e.Error.Message
	}
	var v2 struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if err := json.Unmarshal(resp.Body(), &v2); err != nil || v2.Code == "" {
		t.Fatalf("status %d: body is not an error shape: %q", resp.StatusCode(), resp.Body())
	}
	return v2.Code, v2.Error
}

func isNoRoute(resp *fasthttp.Response) bool {
	return resp.StatusCode() == 404 && (bytes.Contains(resp.Body(), []byte(`"message":"no route `)) || bytes.Contains(resp.Body(), []byte(`"error":"no route `)))
}

var pathExamples = strings.NewReplacer("{model_name}", "digits_cnn", "{model_version}", "1", "{asset}", "LICENSE")

// Every documented operation is routed (answers anything but 404 "no route"),
// and where the router answers 405 to an undocumented method, its Allow
// header lists exactly the documented methods.
func TestOpenAPIDocumentedPathsAreRouted(t *testing.T) {
	doc := oasdoc.Parse(t, openAPIJSON)
	ts := newTestServer(t, Config{})
	for _, o := range oasdoc.Operations(doc) {
		target := pathExamples.Replace(o.Path)
		resp := ts.raw(t, strings.ToUpper(o.Method), target, map[string]string{"Content-Type": "application/json"}, nil)
		if isNoRoute(resp) {
			t.Errorf("%s %s (documented) is not routed: %s", strings.ToUpper(o.Method), target, resp.Body())
		}
		if resp.StatusCode() == 405 {
			t.Errorf("%s %s (documented) answers 405: %s", strings.ToUpper(o.Method), target, resp.Body())
		}
	}
	paths := doc["paths"].(map[string]any)
	for p, item := range paths {
		var documented []string
		for _, m := range oasdoc.Methods {
			if _, ok := item.(map[string]any)[m]; ok {
				documented = append(documented, strings.ToUpper(m))
			}
		}
		target := pathExamples.Replace(p)
		resp := ts.raw(t, "DELETE", target, nil, nil)
		if isNoRoute(resp) {
			t.Errorf("DELETE %s: no route, want 405", target)
			continue
		}
		if resp.StatusCode() != 405 {
			continue // e.g. V2 still a placeholder
		}
		if code, _ := errorOf(t, resp); code != CodeMethodNotAllowed {
			t.Errorf("DELETE %s: code %q", target, code)
		}
		var allow []string
		for _, m := range strings.Split(string(resp.Header.Peek("Allow")), ",") {
			allow = append(allow, strings.TrimSpace(m))
		}
		sort.Strings(allow)
		sort.Strings(documented)
		if !slices.Equal(allow, documented) {
			t.Errorf("%s: router allows %v, openapi.json documents %v", p, allow, documented)
		}
	}
	// An unknown path is the documented 404.
	resp := ts.get(t, "/no/such/path")
	if !isNoRoute(resp) {
		t.Errorf("GET /no/such/path: %d %s", resp.StatusCode(), resp.Body())
	}
}

func TestOpenAPIServed(t *testing.T) {
	ts := newTestServer(t, Config{APIKeys: []string{"k"}}) // docs stay open with keys
	resp := ts.get(t, "/openapi.json")
	if resp.StatusCode() != 200 || string(resp.Header.ContentType()) != "application/json" {
		t.Fatalf("GET /openapi.json: %d %s", resp.StatusCode(), resp.Header.ContentType())
	}
	if !bytes.Equal(resp.Body(), openAPIJSON) {
		t.Fatal("GET /openapi.json does not serve openapi.json")
	}
	if cc := string(resp.Header.Peek("Cache-Control")); cc == "" {
		t.Error("no Cache-Control on /openapi.json")
	}
	etag := string(resp.Header.Peek("ETag"))
	resp = ts.raw(t, "GET", "/openapi.json", map[string]string{"If-None-Match": etag}, nil)
	if resp.StatusCode() != 304 || len(resp.Body()) != 0 {
		t.Errorf("If-None-Match: %d, %d bytes", resp.StatusCode(), len(resp.Body()))
	}
	resp = ts.raw(t, "GET", "/openapi.json", map[string]string{"Accept-Encoding": "gzip"}, nil)
	if string(resp.Header.Peek("Content-Encoding")) != "gzip" {
		t.Fatal("/openapi.json is not gzipped for a client that takes gzip")
	}
	zr, err := gzip.NewReader(bytes.NewReader(resp.Body()))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(zr); !bytes.Equal(b, openAPIJSON) {
		t.Error("gzipped /openapi.json differs")
	}
	resp = ts.raw(t, "POST", "/openapi.json", nil, []byte("{}"))
	if resp.StatusCode() != 405 {
		t.Errorf("POST /openapi.json: %d", resp.StatusCode())
	}
}

// TestDocsServed checks /docs and an asset through the router with whatever
// the build embedded (the Swagger UI assets when scripts/fetch-swagger-ui.sh
// ran, else only the README placeholder).
func TestDocsServed(t *testing.T) {
	ts := newTestServer(t, Config{APIKeys: []string{"k"}})
	for _, p := range []string{"/docs", "/docs/"} {
		resp := ts.get(t, p)
		if resp.StatusCode() != 200 || !strings.HasPrefix(string(resp.Header.ContentType()), "text/html") {
			t.Fatalf("GET %s: %d %s", p, resp.StatusCode(), resp.Header.ContentType())
		}
		if !bytes.Contains(resp.Body(), []byte("/openapi.json")) {
			t.Errorf("GET %s does not point at /openapi.json", p)
		}
	}
	resp := ts.get(t, "/")
	if resp.StatusCode() != 302 || !strings.HasSuffix(string(resp.Header.Peek("Location")), "/docs") {
		t.Errorf("GET /: %d Location %q", resp.StatusCode(), resp.Header.Peek("Location"))
	}
	if defaultDocs().Bundled() {
		t.Log("Swagger UI is embedded")
		resp = ts.get(t, "/docs")
		if !bytes.Contains(resp.Body(), []byte(`src="/docs/swagger-ui-bundle.js"`)) {
			t.Error("/docs does not load the embedded bundle")
		}
		for name, ct := range map[string]string{"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css", "LICENSE": "text/plain"} {
			resp = ts.get(t, "/docs/"+name)
			if resp.StatusCode() != 200 || !strings.HasPrefix(string(resp.Header.ContentType()), ct) || len(resp.Body()) == 0 {
				t.Errorf("GET /docs/%s: %d %s", name, resp.StatusCode(), resp.Header.ContentType())
			}
			if !strings.Contains(string(resp.Header.Peek("Cache-Control")), "max-age") {
				t.Errorf("GET /docs/%s: Cache-Control %q", name, resp.Header.Peek("Cache-Control"))
			}
		}
	} else {
		t.Log("Swagger UI is not embedded (scripts/fetch-swagger-ui.sh not run)")
		resp = ts.get(t, "/docs")
		if !bytes.Contains(resp.Body(), []byte("make setup")) {
			t.Error("/docs without the bundle does not say to run make setup")
		}
		resp = ts.get(t, "/docs/swagger-ui-bundle.js")
		if resp.StatusCode() != 404 {
			t.Errorf("GET /docs/swagger-ui-bundle.js without the bundle: %d", resp.StatusCode())
		}
		resp = ts.get(t, "/docs/README.md")
		if resp.StatusCode() != 200 {
			t.Errorf("GET /docs/README.md: %d", resp.StatusCode())
		}
	}
}

func TestDocsTraversal(t *testing.T) {
	ts := newTestServer(t, Config{})
	for _, target := range []string{
		"/docs/../server.go", "/docs/%2e%2e/x", "/docs/%2e%2e/server.go", "/docs/..%2fserver.go", "/docs/%2e%2e%2fdocs.go",
		"/docs/..%5cdocs.go", "/docs/dist/README.md", "/docs/docsui/index.html", "/docs/ui/index.html", "/docs/ui/dist/README.md", "/docs/%2fetc%2fpasswd", "/docs//etc/passwd",
		"/docs/./../docs.go", "/docs/.%2e/docs.go", "/docs/nope.js", "/docs/.hidden",
	} {
		resp := ts.get(t, target)
		if resp.StatusCode() != 404 {
			t.Errorf("GET %s: %d, want 404: %.200s", target, resp.StatusCode(), resp.Body())
			continue
		}
		if code, _ := errorOf(t, resp); code != CodeNotFound {
			t.Errorf("GET %s: code %q", target, code)
		}
	}
	// Paths that normalise to another route get that route, never a file.
	for _, target := range []string{"/docs/..", "/docs/%2e%2e", "/docs/.%2e/openapi.json", "/docs/../docs/../openapi.json"} {
		resp := ts.get(t, target)
		if bytes.Contains(resp.Body(), []byte("package httpapi")) || resp.StatusCode() >= 500 {
			t.Errorf("GET %s: %d %.100s", target, resp.StatusCode(), resp.Body())
		}
	}
}

// The document's datatype enums are the server's: V2Datatype every
// protocol datatype fw takes (BYTES and BF16 included), DType every name
// GET /model can write, and the V2 tensor data schemas accept the strings
// BYTES tensors hold.
func TestOpenAPIDatatypes(t *testing.T) {
	doc := oasdoc.Parse(t, openAPIJSON)
	var v2 []string
	for _, d := range oasdoc.Pointer(t, doc, "#/components/schemas/V2Datatype/enum").([]any) {
		v2 = append(v2, d.(string))
	}
	want := strings.Split(strings.Replace(serving.Datatypes(), " and ", ", ", 1), ", ")
	if !slices.Equal(v2, want) {
		t.Errorf("V2Datatype enum %v, the server takes %v", v2, want)
	}
	var names []string
	for _, d := range oasdoc.Pointer(t, doc, "#/components/schemas/DType/enum").([]any) {
		names = append(names, d.(string))
	}
	for d := engine.DType(0); d < 32; d++ {
		if d.Known() && !slices.Contains(names, d.String()) {
			t.Errorf("DType enum %v lacks %q", names, d)
		}
	}
	// GET /v2/models/{m}/config's data_type: every name ConfigDataType
	// writes (TYPE_STRING for BYTES; schemathesis found it missing on a
	// repository serving simple_string).
	var config []string
	for _, d := range oasdoc.Pointer(t, doc, "#/components/schemas/V2ModelConfigTensor/properties/data_type/enum").([]any) {
		config = append(config, d.(string))
	}
	for d := engine.DType(0); d < 32; d++ {
		if name := serving.ConfigDataType(d); (d.Known() || d == engine.Invalid) && !slices.Contains(config, name) {
			t.Errorf("V2ModelConfigTensor data_type enum %v lacks %q", config, name)
		}
	}
	for _, ptr := range []string{"#/components/schemas/V2TensorData/items/anyOf", "#/components/schemas/NestedNumbers/anyOf", "#/components/schemas/NestedValues/anyOf"} {
		scalar := oasdoc.Pointer(t, doc, ptr).([]any)[0].(map[string]any)
		if types, _ := scalar["type"].([]any); !slices.Contains(types, any("string")) {
			t.Errorf("%s[0] is %v: BYTES elements are strings", ptr, scalar)
		}
	}
}

// The log settings' schema takes what the logging extension takes and
// answers: each severity a free boolean (log_error false included) and
// both of tritonserver's formats (schemathesis found the schema still
// saying log_error was always true once it could be switched off).
func TestOpenAPILogSettings(t *testing.T) {
	doc := oasdoc.Parse(t, openAPIJSON)
	props := oasdoc.Pointer(t, doc, "#/components/schemas/V2LogSettings/properties").(map[string]any)
	for _, k := range []string{"log_info", "log_warning", "log_error"} {
		p := props[k].(map[string]any)
		if p["type"] != "boolean" || p["const"] != nil || p["enum"] != nil {
			t.Errorf("%s: %v, want any boolean", k, p)
		}
	}
	f := props["log_format"].(map[string]any)
	if fmt.Sprint(f["enum"]) != "[default ISO8601]" || f["const"] != nil {
		t.Errorf("log_format: %v, want default and ISO8601", f)
	}
}
