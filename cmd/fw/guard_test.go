package main

import (
	"bytes"
	"encoding/json"
	"github.com/fw-serve/fw/internal/testlog"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hdrCall sends a request with a Host (when not "") and headers to the real
// binary and returns the status, the answer's headers and its JSON body.
func hdrCall(t *testing.T, method, url, host string, hdr map[string]string, body string) (int, http.Header, map[string]any) {
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
	if len(b) > 0 && json.Unmarshal(b, &out) != nil {
		t.Fatalf("%s %s: %d, not JSON: %q", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header, out
}

func errMsg(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

// TestDashboardRefusesWebPages plays what a web page can make a browser send
// to a loopback dashboard (issue #10: a text/plain POST created an
// experiment, a foreign Host read the list) against the real binary.
func TestDashboardRefusesWebPages(t *testing.T) {
	p := startDashboard(t, t.TempDir(), "--allowed-hosts", "dash.example", "--cors-origins", "http://ui.example:5173")
	port := p.url[strings.LastIndexByte(p.url, ':')+1:]
	// DNS rebinding: the browser sends the attacker's name as Host.
	code, _, out := hdrCall(t, "GET", p.url+"/api/experiments", "evil.example:"+port, nil, "")
	if code != 403 || errorCode(t, out) != "forbidden" || !strings.Contains(errMsg(out), "--allowed-hosts") {
		t.Errorf("GET /api/experiments with a foreign Host: %d %v", code, out)
	}
	for _, host := range []string{"localhost:" + port, "dash.example:" + port} {
		if code, _, out := hdrCall(t, "GET", p.url+"/api/experiments", host, nil, ""); code != 200 {
			t.Errorf("GET /api/experiments with Host %s: %d %v", host, code, out)
		}
	}
	if code, _, _ := hdrCall(t, "GET", p.url+"/health", "10.1.2.3:"+port, nil, ""); code != 200 {
		t.Errorf("GET /health with the pod IP as Host: %d, want 200", code)
	}
	// Writes a page elsewhere can send without a preflight.
	for _, c := range []struct {
		hdr  map[string]string
		want int
	}{
		{map[string]string{"Content-Type": "text/plain;charset=UTF-8"}, 415},
		{map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403},
		{map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, 403},
	} {
		if code, _, out := hdrCall(t, "POST", p.url+"/api/experiments", "", c.hdr, `{"name":"pwned"}`); code != c.want {
			t.Errorf("POST /api/experiments %v: %d %v, want %d", c.hdr, code, out, c.want)
		}
		if code, _, out := hdrCall(t, "POST", p.url+"/api/training/start", "", c.hdr, `{"recipe":"digits_mlp","experiment":"pwned"}`); code != c.want {
			t.Errorf("POST /api/training/start %v: %d %v, want %d", c.hdr, code, out, c.want)
		}
	}
	if _, _, out := hdrCall(t, "GET", p.url+"/api/experiments", "", nil, ""); len(out["experiments"].([]any)) != 0 {
		t.Errorf("a refused write created an experiment: %v", out)
	}
	// The SDK's and the UI's requests still pass.
	if code, out := call(t, "POST", p.url+"/api/experiments", "", "application/json", `{"name":"sdk"}`); code != 201 {
		t.Errorf("POST as the SDK sends it: %d %v", code, out)
	}
	ui := map[string]string{"Content-Type": "application/json", "Origin": p.url, "Sec-Fetch-Site": "same-origin"}
	if code, _, out := hdrCall(t, "POST", p.url+"/api/experiments", "", ui, `{"name":"ui"}`); code != 201 {
		t.Errorf("POST as the dashboard's page sends it: %d %v", code, out)
	}
	// CORS for the configured origin only.
	pre := map[string]string{"Origin": "http://ui.example:5173", "Access-Control-Request-Method": "POST"}
	if code, h, _ := hdrCall(t, "OPTIONS", p.url+"/api/experiments", "", pre, ""); code != 204 || h.Get("Access-Control-Allow-Origin") != "http://ui.example:5173" {
		t.Errorf("preflight from --cors-origins: %d %v", code, h)
	}
	pre["Origin"] = "http://evil.example"
	if code, h, _ := hdrCall(t, "OPTIONS", p.url+"/api/experiments", "", pre, ""); code != 403 || h.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from elsewhere: %d %v", code, h)
	}
	// Cross-site WebSocket hijacking, directly and through rebinding.
	for _, h := range []http.Header{
		{"Origin": {"http://evil.example"}},
		{"Origin": {"http://evil.example:" + port}, "Host": {"evil.example:" + port}},
	} {
		c, resp, err := dialStream(t, p.url, "", h)
		if err == nil {
			c.Close()
			t.Errorf("stream upgrade with %v succeeded", h)
		} else if resp == nil || resp.StatusCode != 403 {
			t.Errorf("stream upgrade with %v: %v %v, want 403", h, resp, err)
		}
	}
	c, _, err := dialStream(t, p.url, "", http.Header{"Origin": {p.url}})
	if err != nil {
		t.Fatalf("same-origin stream upgrade: %v", err)
	}
	c.Close()
	p.stop(t)
}

// TestDashboardGuardWithToken: a Bearer token from a client that is not a
// browser (no Origin) passes the guard.
func TestDashboardGuardWithToken(t *testing.T) {
	port := freePort(t)
	dir := t.TempDir()
	cmd := fwCmd("dashboard", "--port", strconv.Itoa(port))
	cmd.Env = append(cmd.Env, "FW_EXPERIMENT_DIR="+dir, "FW_CHECKPOINT_DIR="+filepath.Join(dir, "ckpt"), "FW_DASHBOARD_TOKEN=s3cret", "FW_DATABASE_URL=")
	out := &testlog.Buffer{}
	cmd.Stderr, cmd.Stdout = out, out
	p := startProc(t, "fw dashboard", cmd, port, out, 30*time.Second)
	if code, out := call(t, "POST", p.url+"/api/experiments", "s3cret", "application/json", `{"name":"a"}`); code != 201 {
		t.Errorf("POST with the token: %d %v", code, out)
	}
	if code, _, out := hdrCall(t, "POST", p.url+"/api/experiments", "", map[string]string{"Authorization": "Bearer s3cret", "Origin": "http://evil.example", "Content-Type": "application/json"}, `{"name":"b"}`); code != 403 {
		t.Errorf("POST with the token from a foreign page: %d %v, want 403", code, out)
	}
	p.stop(t)
}

func TestGuardFlagErrors(t *testing.T) {
	guardDir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dashboard", "--port", "0", "--cors-origins", "ui.example"}, "give an origin as the browser sends it"},
		{[]string{"dashboard", "--port", "0", "--allowed-hosts", "http://dash.example"}, "not a URL"},
		{[]string{"serve", "--model", "x.onnx", "--allowed-hosts", "a:b:c"}, "not a host name"},
		// MLflow's --default-artifact-root: a local directory or s3://bucket/prefix.
		{[]string{"dashboard", "--port", "0", "--default-artifact-root", "hdfs://nn/x"}, "use a local directory"},
		{[]string{"dashboard", "--port", "0", "--default-artifact-root", "file://otherhost/x"}, "not a file:// URI of a local directory"},
		{[]string{"dashboard", "--port", "0", "--default-artifact-root", "s3:///nobucket"}, "name the bucket"},
		// MLflow's --artifacts-destination: the same forms, and not with --default-artifact-root.
		{[]string{"dashboard", "--port", "0", "--artifacts-destination", "hdfs://nn/x"}, "use a local directory"},
		{[]string{"dashboard", "--port", "0", "--artifacts-destination", "/tmp/fw-guard-dest", "--default-artifact-root", "/tmp/fw-guard-root"}, "give one of them"},
		// ... and never over fw's own files.
		{[]string{"dashboard", "--port", "0", "--experiment-dir", guardDir + "/exp", "--artifacts-destination", guardDir + "/exp/artifacts/mlflow"}, "overlaps the artifact directory"},
		{[]string{"dashboard", "--port", "0", "--experiment-dir", guardDir + "/exp", "--artifacts-destination", guardDir}, "overlaps the"},
		{[]string{"dashboard", "--port", "0", "--experiment-dir", guardDir + "/exp", "--artifacts-destination", guardDir + "/exp/registry/x"}, "overlaps the experiment directory's registry"},
		{[]string{"dashboard", "--port", "0", "--experiment-dir", guardDir + "/exp", "--checkpoint-dir", guardDir + "/ck", "--artifacts-destination", "file://" + guardDir + "/ck/mlflow"}, "overlaps the checkpoint directory"},
	} {
		var out bytes.Buffer
		cmd := fwCmd(c.args...)
		cmd.Env = append(cmd.Env, "FW_EXPERIMENT_DIR="+t.TempDir(), "FW_DASHBOARD_TOKEN=")
		cmd.Stderr, cmd.Stdout = &out, &out
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(out.String(), c.want) {
			t.Errorf("fw %v: %v, want exit 2 saying %q:\n%s", c.args, err, c.want, out.String())
		}
	}
}

// TestServeRefusesForeignHost: fw serve bound to loopback answers only its
// loopback names and --allowed-hosts; /health stays open.
func TestServeRefusesForeignHost(t *testing.T) {
	p := startServe(t, "--model", filepath.Join(modelsDir(t), "digits_mlp.onnx"), "--allowed-hosts", "model.example")
	row := `{"inputs":[[` + strings.TrimSuffix(strings.Repeat("0,", 64), ",") + `]]}`
	code, _, out := hdrCall(t, "POST", p.url+"/predict", "evil.example", map[string]string{"Content-Type": "application/json"}, row)
	if code != 403 || errMsg(out) == "" || !strings.Contains(errMsg(out), "--allowed-hosts") {
		t.Errorf("POST /predict with a foreign Host: %d %v", code, out)
	}
	if code, _, out := hdrCall(t, "GET", p.url+"/model", "evil.example", nil, ""); code != 403 {
		t.Errorf("GET /model with a foreign Host: %d %v", code, out)
	}
	// Under /v2 the refusal is in the V2 shape, {"error": message}, which
	// Triton's clients read (Triton's simple_example sends its own Host;
	// before, tritonclient raised "<exception str() failed>").
	code, _, out = hdrCall(t, "POST", p.url+"/v2/models/digits_mlp/infer", "my_host_", map[string]string{"Content-Type": "application/json"}, `{"inputs":[]}`)
	if msg, _ := out["error"].(string); code != 403 || !strings.Contains(msg, "--allowed-hosts") {
		t.Errorf("POST /v2/.../infer with a foreign Host: %d %v", code, out)
	}
	for _, path := range []string{"/health", "/health/live", "/health/ready"} {
		if code, _, out := hdrCall(t, "GET", p.url+path, "10.1.2.3:8000", nil, ""); code != 200 {
			t.Errorf("GET %s with the pod IP as Host: %d %v", path, code, out)
		}
	}
	for _, host := range []string{"", "localhost", "model.example:8000"} {
		if code, _, out := hdrCall(t, "GET", p.url+"/model", host, nil, ""); code != 200 {
			t.Errorf("GET /model with Host %q: %d %v", host, code, out)
		}
	}
}
