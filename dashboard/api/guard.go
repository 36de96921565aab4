package api

import (
	"bytes"
	"fmt"
	"mime"
	"net/url"
	"strings"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// CodeForbidden is the error code of a request refused for where it comes
// from: a Host the dashboard is not known by, a cross-site browser request,
// a CORS preflight from an origin not in --cors-origins.
const CodeForbidden = "forbidden"

// guard keeps web pages from driving or reading the dashboard through a
// visitor's browser (the dashboard can start processes, so a page that could
// POST to it could run code on the machine):
//
//   - Host: a request whose Host header the policy (Config.Hosts, built from
//     --host and --allowed-hosts) does not accept is refused with 403, which
//     defeats DNS rebinding. /health and /metrics stay open (probes and
//     scrapers use the pod IP as Host).
//   - Cross-site writes: a POST, PUT, PATCH or DELETE under /api, and the
//     WebSocket upgrade of /api/training/stream, are refused with 403 when the
//     browser marks them as coming from another origin: an Origin header that
//     is neither this dashboard (the same host:port as Host) nor one of
//     --cors-origins, or Sec-Fetch-Site other than same-origin or none.
//     Clients that are not browsers send neither header and pass.
//   - Content types: a write whose Content-Type is not the route's (JSON;
//     ingest also NDJSON; the model upload also multipart and octet-stream;
//     the deployment proxy anything) is refused with 415, so a form or a
//     text/plain fetch (which browsers send without a preflight) never
//     reaches a handler. A body without a Content-Type is read as JSON.
//   - CORS: a preflight (OPTIONS with Origin and
//     Access-Control-Request-Method) is answered only for --cors-origins
//     (403 otherwise), and only their responses carry
//     Access-Control-Allow-Origin.
type guard struct {
	origins map[string]bool // normalised --cors-origins
}

// newGuard builds the guard of cfg, skipping origins that CheckOrigins refuses.
func newGuard(cfg Config) guard {
	g := guard{origins: map[string]bool{}}
	for _, o := range cfg.CORSOrigins {
		if n, err := normOrigin(o); err == nil {
			g.origins[n] = true
		}
	}
	return g
}

// CheckOrigins reports the first entry of --cors-origins that is not an
// origin (http or https, a host, an optional port, no path).
func CheckOrigins(origins []string) error {
	for _, o := range origins {
		if _, err := normOrigin(o); err != nil {
			return err
		}
	}
	return nil
}

// normOrigin returns an origin in the form browsers send it: the lower-case
// scheme://host[:port], without the scheme's default port.
func normOrigin(o string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(o))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("CORS origin %q: give an origin as the browser sends it, e.g. https://ui.example.com or http://localhost:5173 (scheme, host, optional port, no path)", o)
	}
	host := strings.ToLower(u.Host)
	if p := u.Port(); (u.Scheme == "http" && p == "80") || (u.Scheme == "https" && p == "443") {
		host = strings.TrimSuffix(host, ":"+p)
	}
	return u.Scheme + "://" + host, nil
}

// preflightMaxAge is how long (seconds) a browser may cache an answered preflight.
const preflightMaxAge = "600"

// guardRequest applies the guard to a request; false when it has answered it
// (a refusal or a preflight) and the handler must not run.
func (s *Server) guardRequest(ctx *fasthttp.RequestCtx, path string) bool {
	if path == "/health" || path == "/metrics" {
		return true
	}
	host := ctx.Host()
	if !s.cfg.Hosts.Allow(host) {
		writeError(ctx, apiErr(403, CodeForbidden, fmt.Sprintf("the dashboard is not served under the name %q (a page on another name may be reaching it through DNS rebinding); open it as http://localhost:PORT or http://127.0.0.1:PORT, or start it with --allowed-hosts naming this host (FW_DASHBOARD_ALLOWED_HOSTS)", host)))
		return false
	}
	if path != "/api" && !strings.HasPrefix(path, "/api/") && !strings.HasPrefix(path, "/ajax-api/") {
		return true
	}
	origin := ctx.Request.Header.Peek("Origin")
	listed := false
	if len(s.guard.origins) > 0 {
		ctx.Response.Header.Add("Vary", "Origin") // the answer depends on it
		if n, err := normOrigin(string(origin)); len(origin) > 0 && err == nil && s.guard.origins[n] {
			listed = true
			ctx.Response.Header.SetBytesV("Access-Control-Allow-Origin", origin)
			ctx.Response.Header.Set("Access-Control-Expose-Headers", "Content-Disposition, Retry-After, ETag")
		}
	}
	method := ctx.Method()
	if string(method) == "OPTIONS" && len(origin) > 0 && len(ctx.Request.Header.Peek("Access-Control-Request-Method")) > 0 {
		if !listed {
			writeError(ctx, apiErr(403, CodeForbidden, fmt.Sprintf("origin %s may not call the dashboard's API from a browser; start the dashboard with --cors-origins %s (FW_DASHBOARD_CORS_ORIGINS) to allow it", origin, origin)))
			return false
		}
		h := &ctx.Response.Header
		h.Set("Access-Control-Allow-Methods", "GET, HEAD, POST, PUT, PATCH, DELETE")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Accept, If-None-Match")
		h.Set("Access-Control-Max-Age", preflightMaxAge)
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return false
	}
	write := isWrite(method)
	if (write || (path == "/api/training/stream" && websocket.FastHTTPIsWebSocketUpgrade(ctx))) && !listed {
		if len(origin) > 0 && !sameOrigin(origin, host) {
			writeError(ctx, apiErr(403, CodeForbidden, fmt.Sprintf("a page on %s may not change or stream the dashboard's data; use the dashboard's own UI, a client that is not a browser, or start the dashboard with --cors-origins %s (FW_DASHBOARD_CORS_ORIGINS) to allow that origin", origin, origin)))
			return false
		}
		if sfs := ctx.Request.Header.Peek("Sec-Fetch-Site"); len(sfs) > 0 && string(sfs) != "same-origin" && string(sfs) != "none" {
			writeError(ctx, apiErr(403, CodeForbidden, fmt.Sprintf("the browser marked this request %s (Sec-Fetch-Site); only the dashboard's own pages and --cors-origins (FW_DASHBOARD_CORS_ORIGINS) may change its data", sfs)))
			return false
		}
	}
	if write {
		if e := checkContentType(path, ctx.Request.Header.ContentType()); e != nil {
			writeError(ctx, e)
			return false
		}
	}
	return true
}

func isWrite(method []byte) bool {
	switch string(method) {
	case "POST", "PUT", "PATCH", "DELETE":
		return true
	}
	return false
}

// sameOrigin reports whether origin names the host:port the request was sent to.
func sameOrigin(origin, host []byte) bool {
	u, err := url.Parse(string(origin))
	if err != nil || u.Host == "" {
		return false // "null" (sandboxed frames, data: URLs) and garbage
	}
	return bytes.EqualFold([]byte(u.Host), host)
}

// checkContentType refuses a write's Content-Type that its route does not read.
func checkContentType(path string, ct []byte) *Error {
	if len(bytes.TrimSpace(ct)) == 0 {
		return nil // read as JSON; browsers mark their cross-site requests with Origin
	}
	want := []string{"application/json"}
	switch {
	case path == "/api/ingest", isPayloadsPath(path):
		want = append(want, "application/x-ndjson")
	case path == "/api/models" || path == "/api/models/":
		want = append(want, "multipart/form-data", "application/octet-stream")
	case strings.HasPrefix(path, "/api/deployments/") && strings.Count(strings.Trim(path, "/"), "/") >= 3:
		return nil // proxied to the deployment, which checks its own types
	case strings.HasPrefix(path, "/api/runs/") && strings.HasSuffix(strings.TrimSuffix(path, "/"), "/files"):
		return nil // a run's file upload is the file itself, of any type
	case strings.HasPrefix(path, "/api/2.0/mlflow-artifacts/artifacts/") || strings.HasPrefix(path, "/ajax-api/2.0/mlflow-artifacts/artifacts/"),
		path == "/ajax-api/2.0/mlflow/upload-artifact":
		return nil // an artifact upload is the file itself, of any type (MLflow's client sends its guessed type)
	}
	mt, _, err := mime.ParseMediaType(string(ct))
	if err == nil {
		for _, w := range want {
			if mt == w {
				return nil
			}
		}
	}
	return apiErr(415, CodeUnsupportedMedia, fmt.Sprintf("Content-Type %q is not accepted here; send the body as %s (with curl: -H 'Content-Type: application/json')",
		ct, strings.Join(want, " or ")))
}
