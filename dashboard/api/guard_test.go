package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/dashboard/stream"
	"github.com/fw-serve/fw/internal/hostguard"
)

// startGuarded serves the real router bound to 127.0.0.1 with the Host
// policy of --host 127.0.0.1 plus allowed, and cfg's CORS origins and hub;
// it returns the base URL ("http://127.0.0.1:PORT").
func startGuarded(t *testing.T, allowed []string, cfg Config) string {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Hosts, err = hostguard.New("127.0.0.1", allowed); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := New(ctx, st, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &fasthttp.Server{Handler: srv.Handler, StreamRequestBody: true, DisablePreParseMultipartForm: true} // as fw dashboard serves it
	go hs.Serve(ln)
	t.Cleanup(func() {
		cancel()
		if cfg.Hub != nil {
			cfg.Hub.Close()
		}
		hs.Shutdown()
		st.Close()
	})
	return "http://" + ln.Addr().String()
}

// send makes one request with the given Host (when not "") and headers and
// returns the status, the response headers and the decoded JSON body (nil
// when there is none).
func send(t *testing.T, method, url, host string, hdr map[string]string, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s %s: %d, not JSON: %q", method, url, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, resp.Header, out
}

func experimentNames(t *testing.T, url string) []string {
	t.Helper()
	code, _, out := send(t, "GET", url+"/api/experiments", "", nil, "")
	if code != 200 {
		t.Fatalf("GET /api/experiments: %d %v", code, out)
	}
	var names []string
	for _, e := range out["experiments"].([]any) {
		names = append(names, e.(map[string]any)["name"].(string))
	}
	return names
}

func TestGuardHost(t *testing.T) {
	url := startGuarded(t, []string{"dash.example.com"}, Config{})
	port := url[strings.LastIndexByte(url, ':')+1:]
	for _, host := range []string{"evil.example:" + port, "evil.localhost:" + port, "127.0.0.1.evil.example:" + port} {
		code, _, out := send(t, "GET", url+"/api/experiments", host, nil, "")
		if code != 403 || errCode(t, out) != CodeForbidden || !strings.Contains(errMessage(out), "--allowed-hosts") {
			t.Errorf("GET /api/experiments with Host %s: %d %v, want 403 naming --allowed-hosts", host, code, out)
		}
		if code, _, _ := send(t, "GET", url+"/openapi.json", host, nil, ""); code != 403 {
			t.Errorf("GET /openapi.json with Host %s: %d, want 403", host, code)
		}
		// Orchestrators probe with the pod IP as Host.
		if code, _, _ := send(t, "GET", url+"/health", host, nil, ""); code != 200 {
			t.Errorf("GET /health with Host %s: %d, want 200", host, code)
		}
	}
	for _, host := range []string{"", "localhost:" + port, "[::1]:" + port, "dash.example.com", "DASH.example.com:443"} {
		if code, _, out := send(t, "GET", url+"/api/experiments", host, nil, ""); code != 200 {
			t.Errorf("GET /api/experiments with Host %q: %d %v, want 200", host, code, out)
		}
	}
}

func TestGuardCrossSiteWrites(t *testing.T) {
	url := startGuarded(t, nil, Config{})
	self := url // the dashboard's own origin
	post := func(name string, hdr map[string]string) (int, map[string]any) {
		code, _, out := send(t, "POST", url+"/api/experiments", "", hdr, `{"name":"`+name+`"}`)
		return code, out
	}
	refused := []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		// What a page elsewhere can send without a preflight.
		{"text-plain", map[string]string{"Content-Type": "text/plain;charset=UTF-8"}, 415},
		{"form", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"multipart", map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, 415},
		{"bad-type", map[string]string{"Content-Type": "nonsense/;;"}, 415},
		{"foreign-origin", map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, 403},
		{"foreign-origin-text", map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"}, 403},
		{"other-port", map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:1"}, 403},
		{"null-origin", map[string]string{"Content-Type": "application/json", "Origin": "null"}, 403},
		{"cross-site", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403},
		{"same-site", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"}, 403},
	}
	for _, c := range refused {
		code, out := post(c.name, c.hdr)
		want := map[int]string{403: CodeForbidden, 415: CodeUnsupportedMedia}[c.status]
		if code != c.status || errCode(t, out) != want {
			t.Errorf("%s: %d %v, want %d %s", c.name, code, out, c.status, want)
		}
	}
	// The same checks on the other writes: a run's tags, a training job.
	if code, _, out := send(t, "PATCH", url+"/api/runs/r1", "", map[string]string{"Content-Type": "text/plain"}, `{"name":"x"}`); code != 415 {
		t.Errorf("PATCH text/plain: %d %v, want 415", code, out)
	}
	if code, _, out := send(t, "POST", url+"/api/training/start", "", map[string]string{"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"}, `{}`); code != 403 {
		t.Errorf("POST /api/training/start cross-site: %d %v, want 403", code, out)
	}
	if code, _, out := send(t, "DELETE", url+"/api/experiments/x", "", map[string]string{"Origin": "http://evil.example"}, ""); code != 403 {
		t.Errorf("DELETE from a foreign origin: %d %v, want 403", code, out)
	}
	// What the dashboard's own pages and other clients send.
	ok := []struct {
		name string
		hdr  map[string]string
	}{
		{"ui", map[string]string{"Content-Type": "application/json", "Origin": self, "Sec-Fetch-Site": "same-origin"}},
		{"ui-localhost", map[string]string{"Content-Type": "application/json; charset=utf-8", "Origin": strings.Replace(self, "127.0.0.1", "LOCALHOST", 1)}},
		{"address-bar", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "none"}},
		{"sdk", map[string]string{"Content-Type": "application/json"}},
		{"no-type", nil},
	}
	for _, c := range ok {
		hdr := c.hdr
		if c.name == "ui-localhost" { // the request goes to localhost too, so Origin and Host agree
			code, _, out := send(t, "POST", url+"/api/experiments", strings.TrimPrefix(hdr["Origin"], "http://"), hdr, `{"name":"`+c.name+`"}`)
			if code != 201 {
				t.Errorf("%s: %d %v, want 201", c.name, code, out)
			}
			continue
		}
		if code, out := post(c.name, hdr); code != 201 {
			t.Errorf("%s: %d %v, want 201", c.name, code, out)
		}
	}
	got := strings.Join(experimentNames(t, url), ",")
	for _, c := range refused {
		if strings.Contains(","+got+",", ","+c.name+",") {
			t.Errorf("the refused request %s created an experiment: %s", c.name, got)
		}
	}
	for _, c := range ok {
		if !strings.Contains(","+got+",", ","+c.name+",") {
			t.Errorf("experiment %s missing: %s", c.name, got)
		}
	}
	// The routes that read other types keep them (they answer for
	// themselves; here without a registry: 503, not 415).
	for _, r := range []struct{ path, ct string }{
		{"/api/ingest", "application/x-ndjson"},
		{"/api/models?name=m", "application/octet-stream"},
		{"/api/models", "multipart/form-data; boundary=x"},
		{"/api/deployments/d1/predict/image", "image/png"},
		{"/api/deployments/d1/predict/image", "text/plain"},
	} {
		if code, _, out := send(t, "POST", url+r.path, "", map[string]string{"Content-Type": r.ct}, "x"); code == 415 || code == 403 {
			t.Errorf("POST %s as %s: %d %v; the route reads that type", r.path, r.ct, code, out)
		}
	}
}

func TestGuardCORS(t *testing.T) {
	const ui = "http://ui.example:5173"
	url := startGuarded(t, nil, Config{CORSOrigins: []string{ui, "https://UI2.example:443/"}})
	preflight := map[string]string{"Origin": ui, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
	code, h, _ := send(t, "OPTIONS", url+"/api/experiments", "", preflight, "")
	if code != 204 || h.Get("Access-Control-Allow-Origin") != ui || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") || !strings.Contains(h.Get("Vary"), "Origin") {
		t.Errorf("preflight from %s: %d %v", ui, code, h)
	}
	preflight["Origin"] = "https://ui2.example"
	if code, h, _ := send(t, "OPTIONS", url+"/api/experiments", "", preflight, ""); code != 204 || h.Get("Access-Control-Allow-Origin") != "https://ui2.example" {
		t.Errorf("preflight from https://ui2.example (listed with its default port): %d %v", code, h)
	}
	preflight["Origin"] = "http://evil.example"
	code, h, out := send(t, "OPTIONS", url+"/api/experiments", "", preflight, "")
	if code != 403 || h.Get("Access-Control-Allow-Origin") != "" || errCode(t, out) != CodeForbidden || !strings.Contains(errMessage(out), "--cors-origins") {
		t.Errorf("preflight from an unlisted origin: %d %v %v", code, h, out)
	}
	// Answers carry Access-Control-Allow-Origin for listed origins only.
	if _, h, _ := send(t, "GET", url+"/api/experiments", "", map[string]string{"Origin": ui}, ""); h.Get("Access-Control-Allow-Origin") != ui {
		t.Errorf("GET from %s: no Access-Control-Allow-Origin: %v", ui, h)
	}
	if _, h, _ := send(t, "GET", url+"/api/experiments", "", map[string]string{"Origin": "http://evil.example"}, ""); h.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("GET from an unlisted origin got Access-Control-Allow-Origin: %v", h)
	}
	// A listed origin may write (its requests are cross-site).
	code, h, out = send(t, "POST", url+"/api/experiments", "", map[string]string{"Origin": ui, "Sec-Fetch-Site": "same-site", "Content-Type": "application/json"}, `{"name":"from-ui"}`)
	if code != 201 || h.Get("Access-Control-Allow-Origin") != ui {
		t.Errorf("POST from %s: %d %v %v", ui, code, h, out)
	}
	// ... but still only as JSON.
	if code, _, out := send(t, "POST", url+"/api/experiments", "", map[string]string{"Origin": ui, "Content-Type": "text/plain"}, `{"name":"x"}`); code != 415 {
		t.Errorf("POST text/plain from %s: %d %v, want 415", ui, code, out)
	}
}

func TestGuardStreamOrigin(t *testing.T) {
	url := startGuarded(t, nil, Config{Hub: stream.NewHub(stream.Config{})})
	ws := "ws" + strings.TrimPrefix(url, "http") + "/api/training/stream"
	port := url[strings.LastIndexByte(url, ':')+1:]
	dial := func(hdr http.Header) (*websocket.Conn, *http.Response, error) {
		d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
		return d.Dial(ws, hdr)
	}
	c, _, err := dial(http.Header{"Origin": {url}})
	if err != nil {
		t.Fatalf("same-origin upgrade: %v", err)
	}
	c.Close()
	for name, hdr := range map[string]http.Header{
		"foreign origin": {"Origin": {"http://evil.example"}},
		// DNS rebinding: the page's origin is its own name, which the browser also sends as Host.
		"rebinding":  {"Origin": {"http://evil.example:" + port}, "Host": {"evil.example:" + port}},
		"cross-site": {"Origin": {url}, "Sec-Fetch-Site": {"cross-site"}},
	} {
		c, resp, err := dial(hdr)
		if err == nil {
			c.Close()
			t.Errorf("%s: the upgrade succeeded", name)
			continue
		}
		if resp == nil || resp.StatusCode != 403 {
			t.Errorf("%s: %v %v, want 403", name, resp, err)
		}
	}
}
