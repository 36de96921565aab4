package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/fw-serve/fw/internal/oasdoc"
)

// dashboardRoutes is every path the router (api.go Handler, models.go,
// training.go, stream.go, docs.go) serves, in the OpenAPI document's templated
// form, with its methods. Keep it in step with the router.
var dashboardRoutes = map[string][]string{
	"/v1/traces":                            {"post"},
	"/api/traces":                           {"get"},
	"/api/traces/{trace_id}":                {"get"},
	"/api/payloads":                         {"get", "post"},
	"/api/payloads/drift":                   {"get"},
	"/health":                               {"get"},
	"/metrics":                              {"get"},
	"/openapi.json":                         {"get"},
	"/docs":                                 {"get"},
	"/docs/{asset}":                         {"get"},
	"/api/ingest":                           {"post"},
	"/api/experiments":                      {"get", "post"},
	"/api/experiments/{id}":                 {"get", "patch", "delete"},
	"/api/experiments/{id}/runs":            {"get"},
	"/api/runs/{id}":                        {"get", "patch", "delete"},
	"/api/runs/{id}/metrics":                {"get"},
	"/api/runs/{id}/logs":                   {"get"},
	"/api/compare":                          {"get"},
	"/api/system/status":                    {"get"},
	"/api/system/history":                   {"get"},
	"/api/system/replicas":                  {"get"},
	"/api/training":                         {"get"},
	"/api/training/recipes":                 {"get"},
	"/api/training/start":                   {"post"},
	"/api/training/stream":                  {"get"},
	"/api/training/{id}":                    {"get"},
	"/api/training/{id}/stop":               {"post"},
	"/api/models":                           {"get", "post"},
	"/api/models/export":                    {"post"},
	"/api/models/exports/{id}":              {"get"},
	"/api/models/{name}":                    {"get", "patch", "delete"},
	"/api/models/{name}/deploy":             {"post"},
	"/api/models/{name}/versions/{version}": {"get", "delete"},
	"/api/deployments":                      {"get"},
	"/api/deployments/{id}":                 {"delete"},
	"/api/shared-server":                    {"get", "post", "delete"},
	"/api/runs":                             {"get"},
	"/api/runs/{id}/checkpoints":            {"get"},
	"/api/runs/{id}/artifacts":              {"get"},
	"/api/runs/{id}/traces":                 {"get"},
	"/api/logged-models":                    {"get"},
	"/api/runs/{id}/download":               {"get"},
	"/api/runs/{id}/files":                  {"put"},
	"/api/activity":                         {"get"},
	"/api/models/exports":                   {"get"},
	"/api/deployments/{id}/predict":         {"post"},
	"/api/deployments/{id}/predict/image":   {"post"},
	"/api/deployments/{id}/predict/batch":   {"post"},
	"/api/deployments/{id}/model":           {"get"},
	"/api/deployments/{id}/health/ready":    {"get"},
}

func TestDashboardOpenAPIDocument(t *testing.T) {
	doc := oasdoc.Parse(t, openAPIJSON)
	if v, _ := doc["openapi"].(string); !regexp.MustCompile(`^3\.1\.\d+$`).MatchString(v) {
		t.Fatalf("openapi = %q, want 3.1.x", v)
	}
	info, _ := doc["info"].(map[string]any)
	if info["title"] == nil || info["version"] == nil {
		t.Fatalf("info needs title and version: %v", info)
	}
	if _, ok := oasdoc.Pointer(t, doc, "#/components/securitySchemes/bearerAuth").(map[string]any); !ok {
		t.Fatal("no bearerAuth security scheme")
	}
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

	paths := doc["paths"].(map[string]any)
	ids := map[string]bool{}
	for p, item := range paths {
		item := item.(map[string]any)
		var methods []string
		for _, m := range oasdoc.Methods {
			o, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			methods = append(methods, m)
			id, _ := o["operationId"].(string)
			if id == "" || ids[id] {
				t.Errorf("%s %s: operationId %q missing or repeated", m, p, id)
			}
			ids[id] = true
			// Path parameters are declared.
			declared := map[string]bool{}
			pathParams, _ := item["parameters"].([]any)
			opParams, _ := o["parameters"].([]any)
			for _, prm := range append(slices.Clone(pathParams), opParams...) {
				pm := oasdoc.Resolve(t, doc, prm).(map[string]any)
				if pm["in"] == "path" {
					declared[pm["name"].(string)] = true
				}
			}
			for _, sm := range regexp.MustCompile(`\{([^}]+)\}`).FindAllStringSubmatch(p, -1) {
				if !declared[sm[1]] {
					t.Errorf("%s %s: path parameter %q is not declared", m, p, sm[1])
				}
			}
			// Security: bearer on /api/*, open elsewhere.
			sec, ok := o["security"].([]any)
			if !ok {
				t.Errorf("%s %s: no explicit security", m, p)
			}
			bearer := false
			for _, s := range sec {
				if _, ok := s.(map[string]any)["bearerAuth"]; ok {
					bearer = true
				}
			}
			protected := strings.HasPrefix(p, "/api/") || p == otlpTracesPath
			if bearer != protected {
				t.Errorf("%s %s: bearer auth %v, want %v", m, p, bearer, protected)
			}
			responses := o["responses"].(map[string]any)
			if _, has401 := responses["401"]; has401 != protected {
				t.Errorf("%s %s: 401 documented %v, want %v", m, p, has401, protected)
			}
			// Every error response is the Error schema.
			for status, r := range responses {
				if len(status) != 3 || status[0] < '1' || status[0] > '5' {
					t.Errorf("%s %s: response %q is not a status code", m, p, status)
					continue
				}
				if status[0] < '4' {
					continue
				}
				resp := oasdoc.Resolve(t, doc, r).(map[string]any)
				content, _ := resp["content"].(map[string]any)
				if p == otlpTracesPath { // OTLP's own error shape: google.rpc.Status in protobuf, in JSON for a JSON request
					_, pb := content["application/x-protobuf"]
					_, js := content["application/json"]
					if !pb || len(content) > 2 || (len(content) == 2 && !js) {
						t.Errorf("%s %s %s: want OTLP's Status (application/x-protobuf, and application/json for a JSON request): %v", m, p, status, content)
					}
					continue
				}
				if len(content) != 1 {
					t.Errorf("%s %s %s: want only application/json content: %v", m, p, status, content)
				}
				js, _ := content["application/json"].(map[string]any)
				schema, _ := js["schema"].(map[string]any)
				if schema["$ref"] != "#/components/schemas/Error" {
					t.Errorf("%s %s %s: does not reference the Error schema: %v", m, p, status, schema)
				}
			}
		}
		if want := slices.Sorted(slices.Values(dashboardRoutes[p])); !slices.Equal(slices.Sorted(slices.Values(methods)), want) {
			if want == nil {
				t.Errorf("openapi.json documents %s, which dashboardRoutes does not list", p)
			} else {
				t.Errorf("%s: documented methods %v, routed %v", p, methods, want)
			}
		}
	}
	for p := range dashboardRoutes {
		if _, ok := paths[p]; !ok {
			t.Errorf("routed path %s is missing from openapi.json", p)
		}
	}
	errSchema := oasdoc.Pointer(t, doc, "#/components/schemas/Error/properties/error/required").([]any)
	if !slices.Contains(errSchema, any("code")) || !slices.Contains(errSchema, any("message")) {
		t.Errorf("Error schema requires %v", errSchema)
	}
}

// concrete turns a templated path into one a request can use.
func concrete(p string) string {
	p = strings.ReplaceAll(p, "{version}", "1")
	p = strings.ReplaceAll(p, "{asset}", "swagger-ui.css")
	return regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(p, "x1")
}

// Every documented operation reaches a handler: no "no route" 404 and no 405
// for a documented method; an undocumented path does get the router's 404.
func TestDashboardOpenAPIPathsAreRouted(t *testing.T) {
	doc := oasdoc.Parse(t, openAPIJSON)
	url := startCRUDServer(t, nil)
	var checked []string
	for p, item := range doc["paths"].(map[string]any) {
		for _, m := range oasdoc.Methods {
			if _, ok := item.(map[string]any)[m]; !ok {
				continue
			}
			method := strings.ToUpper(m)
			req, _ := http.NewRequest(method, url+concrete(p), strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 405 {
				t.Errorf("%s %s: 405 %s", method, p, b)
			}
			if resp.StatusCode == 404 && strings.Contains(string(b), "no route") {
				t.Errorf("%s %s: the router has no route: %s", method, p, b)
			}
			checked = append(checked, method+" "+p)
		}
	}
	sort.Strings(checked)
	if len(checked) < len(dashboardRoutes) {
		t.Fatalf("checked only %v", checked)
	}
	for _, p := range []string{"/api/nope", "/api/runs/x1/nope", "/nope"} {
		if code, out := doJSON(t, "GET", url+p, ""); code != 404 || !strings.Contains(errMessage(out), "no route") {
			t.Errorf("GET %s: %d %v, want the router's 404", p, code, out)
		}
	}
}

func errMessage(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

func get(t *testing.T, url string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// /openapi.json and /docs answer 200 and stay open with a token; /api does not.
func TestDashboardDocsServed(t *testing.T) {
	url := startCRUDServer(t, func(s *Server) {
		s.cfg.Token = "s3cret"
		s.token = sha256.Sum256([]byte("s3cret"))
	})
	code, h, b := get(t, url+"/openapi.json", nil)
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "application/json") || string(b) != string(openAPIJSON) {
		t.Fatalf("/openapi.json: %d %s", code, h.Get("Content-Type"))
	}
	etag := h.Get("ETag")
	if code, _, _ := get(t, url+"/openapi.json", map[string]string{"If-None-Match": etag}); code != 304 {
		t.Errorf("/openapi.json If-None-Match: %d", code)
	}
	for _, p := range []string{"/docs", "/docs/"} {
		code, h, b := get(t, url+p, nil)
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
			t.Fatalf("%s: %d %s", p, code, h.Get("Content-Type"))
		}
		if !strings.Contains(string(b), "/openapi.json") || !strings.Contains(string(b), "fw dashboard: API") {
			t.Errorf("%s: page %s", p, b)
		}
		if newDocsSite(nil).Bundled() && !strings.Contains(string(b), `url: "/openapi.json"`) {
			t.Errorf("%s: Swagger UI is not pointed at /openapi.json", p)
		}
	}
	if newDocsSite(nil).Bundled() {
		if code, h, _ := get(t, url+"/docs/swagger-ui.css", nil); code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/css") {
			t.Errorf("/docs/swagger-ui.css: %d %s", code, h.Get("Content-Type"))
		}
	}
	if code, out := doJSON(t, "GET", url+"/docs/nope.js", ""); code != 404 || errCode(t, out) != CodeNotFound {
		t.Errorf("/docs/nope.js: %d %v", code, out)
	}
	if code, out := doJSON(t, "POST", url+"/openapi.json", ""); code != 405 || errCode(t, out) != CodeMethodNotAllowed {
		t.Errorf("POST /openapi.json: %d %v", code, out)
	}
	if code, out := doJSON(t, "GET", url+"/api/experiments", ""); code != 401 || errCode(t, out) != CodeUnauthorized {
		t.Errorf("/api/experiments without the token: %d %v", code, out)
	}
	if code, _ := doJSON(t, "GET", url+"/health", ""); code != 200 {
		t.Errorf("/health with a token configured: %d", code)
	}
}

// /docs works with and without the Swagger UI bundle (as internal/docsite's test).
func TestDashboardDocsBundle(t *testing.T) {
	for _, bundled := range []bool{true, false} {
		assets := fstest.MapFS{"README.md": {Data: []byte("fetch me")}}
		if bundled {
			assets["swagger-ui-bundle.js"] = &fstest.MapFile{Data: []byte("window.SwaggerUIBundle = function () {};")}
			assets["swagger-ui.css"] = &fstest.MapFile{Data: []byte("body {}")}
		}
		site := newDocsSite(assets)
		url := startCRUDServer(t, func(s *Server) { s.docsSite = site })
		code, _, b := get(t, url+"/docs", nil)
		if code != 200 || site.Bundled() != bundled {
			t.Fatalf("bundled %v: /docs %d, Bundled() %v", bundled, code, site.Bundled())
		}
		page := string(b)
		if bundled {
			for _, want := range []string{`src="/docs/swagger-ui-bundle.js"`, `href="/docs/swagger-ui.css"`, `url: "/openapi.json"`} {
				if !strings.Contains(page, want) {
					t.Errorf("/docs lacks %s", want)
				}
			}
			if code, _, b := get(t, url+"/docs/swagger-ui-bundle.js", nil); code != 200 || string(b) != "window.SwaggerUIBundle = function () {};" {
				t.Errorf("/docs/swagger-ui-bundle.js: %d %q", code, b)
			}
		} else {
			if !strings.Contains(page, `href="/openapi.json"`) || strings.Contains(page, "swagger-ui-bundle.js") {
				t.Errorf("/docs without bundle: %s", page)
			}
			if code, out := doJSON(t, "GET", url+"/docs/swagger-ui-bundle.js", ""); code != 404 || errCode(t, out) != CodeNotFound {
				t.Errorf("/docs/swagger-ui-bundle.js without bundle: %d %v", code, out)
			}
		}
	}
}

// TestOpenAPIListsTheRouteTable: the document and the router are one list
// of operations: every route is documented with its method, path and
// parameter names, and every documented operation is routed.
func TestOpenAPIListsTheRouteTable(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIJSON, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for m := range ops {
			switch m {
			case "get", "post", "put", "patch", "delete":
				documented[strings.ToUpper(m)+" "+path] = true
			}
		}
	}
	s := New(context.Background(), nil, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	routed := map[string]bool{}
	for _, r := range s.routes {
		op := r.method + " " + r.pattern
		if routed[op] {
			t.Errorf("%s is in the route table twice", op)
		}
		routed[op] = true
		if !documented[op] {
			t.Errorf("%s is routed but not in openapi.json", op)
		}
	}
	for op := range documented {
		if !routed[op] {
			t.Errorf("%s is in openapi.json but not in the route table", op)
		}
	}
	if len(routed) < 50 {
		t.Fatalf("only %d operations routed", len(routed))
	}
}
