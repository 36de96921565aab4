package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/testlog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/store"
)

// A route that panics is answered 500 internal in the error shape with a
// request id, logged with its stack and counted, and the dashboard keeps
// serving, on the same keep-alive connection too.
func TestPanicIsAnsweredAndServingGoesOn(t *testing.T) {
	st, err := store.Open(context.Background(), store.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var logs testlog.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	srv := New(ctx, st, Config{}, slog.New(slog.NewTextHandler(&logs, nil)))
	srv.SetMetrics(prometheus.NewRegistry())
	srv.routeHook = func(c *fasthttp.RequestCtx) {
		if len(c.Request.Header.Peek("X-Test-Panic")) > 0 {
			c.SetBodyString("half an answer")
			panic("deliberate test panic")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &fasthttp.Server{Handler: srv.Handler, StreamRequestBody: true}
	go hs.Serve(ln)
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		hs.Shutdown()
		st.Close()
	})
	client := &http.Client{Transport: tr}
	base := "http://" + ln.Addr().String()

	conns := 0
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if !i.Reused {
			conns++
		}
	}}
	do := func(method, path, body string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}

	resp, body := do("POST", "/api/experiments", `{"name":"x"}`, "X-Test-Panic", "1", "X-Request-Id", "req-42")
	var e struct {
		Error struct {
			Code, Message string
			Details       map[string]any
		}
	}
	if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != 500 || e.Error.Code != "internal" ||
		e.Error.Details["request_id"] != "req-42" || !strings.Contains(e.Error.Message, "req-42") {
		t.Fatalf("panicking route: %d %s, want 500 internal naming req-42", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "req-42" {
		t.Errorf("X-Request-Id %q, want req-42", got)
	}
	for _, want := range []string{"request_id=req-42", "deliberate test panic", "recoverPanic", "path=/api/experiments"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}

	// The same connection serves the next request; a generated id is given
	// when the client sent none.
	if resp, body := do("GET", "/api/experiments", ""); resp.StatusCode != 200 {
		t.Fatalf("after the panic: %d %s", resp.StatusCode, body)
	}
	resp, body = do("GET", "/api/runs", "", "X-Test-Panic", "1")
	if id := resp.Header.Get("X-Request-Id"); resp.StatusCode != 500 || id == "" || !strings.Contains(string(body), id) {
		t.Fatalf("generated request id %q: %d %s", id, resp.StatusCode, body)
	}
	_, metrics := do("GET", "/metrics", "")
	if !strings.Contains(string(metrics), "\nfw_dashboard_http_panics_total 2\n") {
		t.Errorf("/metrics lacks fw_dashboard_http_panics_total 2")
	}
	if !strings.Contains(string(metrics), `fw_dashboard_http_requests_total{code="500",method="POST",route="/api/experiments"} 1`) {
		t.Errorf("/metrics does not count the 500 under its route")
	}
	if conns != 1 {
		t.Errorf("%d connections for the requests, want 1 (a panic must not close a connection whose body was read)", conns)
	}
}
