package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/fw-serve/fw/internal/testlog"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The embedded test vector is fw's safety check against a model file whose
// weights no longer match what was exported. These tests change the weights
// of a real export (fw.json, with its test vector, left as it was) and check
// that verify, serve and hot reload all refuse the file.

// tamperScript scales the largest float initializer of an ONNX model by a
// factor and saves it, keeping metadata_props (fw.json) as they were.
const tamperScript = `
import sys, numpy as np, onnx
from onnx import numpy_helper
src, dst, factor = sys.argv[1], sys.argv[2], float(sys.argv[3])
m = onnx.load(src)
if "fw.json" not in [p.key for p in m.metadata_props]:
    sys.exit("no fw.json in " + src)
inits = [i for i in m.graph.initializer if i.data_type == onnx.TensorProto.FLOAT]
big = max(inits, key=lambda i: int(np.prod(i.dims)))
a = numpy_helper.to_array(big).astype(np.float32) * np.float32(factor)
big.CopyFrom(numpy_helper.from_array(a, big.name))
onnx.save(m, dst)
print(big.name)
`

// tamperedONNX writes a copy of the reference digits_mlp.onnx whose largest
// weight tensor is scaled by 3 and returns its path.
func tamperedONNX(t *testing.T) string {
	t.Helper()
	py := trainingPython(t)
	dst := filepath.Join(t.TempDir(), "tampered.onnx")
	out, err := exec.Command(py, "-c", tamperScript, filepath.Join(modelsDir(t), "digits_mlp.onnx"), dst, "3").CombinedOutput()
	if err != nil {
		t.Fatalf("tampering with the model: %v\n%s", err, out)
	}
	good, _ := os.ReadFile(filepath.Join(modelsDir(t), "digits_mlp.onnx"))
	bad, err := os.ReadFile(dst)
	if err != nil || bytes.Equal(good, bad) || !bytes.Contains(bad, []byte("fw.json")) {
		t.Fatalf("the tampered file should differ from the original and keep fw.json (err %v)", err)
	}
	return dst
}

func TestTamperVerifyFails(t *testing.T) {
	bad := tamperedONNX(t)
	var stdout, stderr bytes.Buffer
	cmd := fwCmd("verify", bad, "--time", "0")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("fw verify on a tampered file: %v, want exit status 1\n%s%s", err, stdout.String(), stderr.String())
	}
	// It loads (the file is valid ONNX) and fails on the comparison, not on loading.
	if !strings.Contains(stderr.String(), "outputs differ beyond tolerance") || strings.Contains(stdout.String(), "PASS") {
		t.Fatalf("want the mismatch named:\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	}

	stdout.Reset()
	cmd = fwCmd("verify", bad, "--json", "--time", "0")
	cmd.Stdout = &stdout
	if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("fw verify --json on a tampered file: %v, want exit status 1", err)
	}
	var rep verifyReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v: %s", err, stdout.String())
	}
	if rep.Passed || rep.Rows == 0 || !(rep.MaxAbsError > rep.Atol) || rep.Worst == "" || rep.Error != "" {
		t.Fatalf("report of a tampered file: %+v", rep)
	}
}

// fw serve on a tampered file never answers /health 200 and exits 1 naming
// the test vector (docs/serving.md: ready only after the test vector matched).
func TestTamperServeRefuses(t *testing.T) {
	serveRefuses(t, tamperedONNX(t))
}

// serveRefuses starts fw serve on bad and checks it never turns ready and
// exits 1 naming the test vector mismatch.
func serveRefuses(t *testing.T, bad string) {
	t.Helper()
	port := freePort(t)
	cmd := fwCmd("serve", "--model", bad, "--port", strconv.Itoa(port), "--threads", "1")
	var stdout bytes.Buffer
	stderr := &testlog.Buffer{}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-done
		done <- nil
	}()
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.After(60 * time.Second)
	var err error
wait:
	for {
		select {
		case err = <-done:
			done <- err
			break wait
		case <-deadline:
			t.Fatalf("fw serve on a tampered file neither exited nor became ready:\n%s", stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if r, err := http.Get(url + "/health"); err == nil {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode == 200 {
				t.Fatalf("a tampered model became ready: %s", b)
			}
			if r.StatusCode != 503 {
				t.Fatalf("/health while loading: %d %s, want 503", r.StatusCode, b)
			}
		}
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "test vector does not match") || strings.Contains(stdout.String(), "ready on") {
		t.Fatalf("want the test vector mismatch named, no ready line:\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	}
}

// metricLine returns the line of /metrics starting with prefix ("" if none).
func metricLine(t *testing.T, url, prefix string) string {
	t.Helper()
	r, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// predictDigits posts one fixed row to /predict and returns its first output.
func predictDigits(t *testing.T, url string) []float64 {
	t.Helper()
	var row []string
	for i := 0; i < 64; i++ {
		row = append(row, strconv.FormatFloat(float64(i%17)/16, 'g', -1, 64))
	}
	code, out := call(t, "POST", url+"/predict", "", "application/json", `{"data": [[`+strings.Join(row, ",")+`]]}`)
	if code != 200 {
		t.Fatalf("predict: %d %v", code, out)
	}
	var got []float64
	for _, v := range out["predictions"].([]any)[0].([]any) {
		got = append(got, v.(float64))
	}
	return got
}

// --watch from a good file to a tampered one: the reload is refused, counted
// and logged, and the old model keeps answering with the same outputs.
func TestTamperReloadKeepsOldModel(t *testing.T) {
	bad := tamperedONNX(t)
	tmp := t.TempDir()
	live := filepath.Join(tmp, "model.onnx")
	copyFile(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), live)
	p := startServe(t, "--model", live, "--watch", "--watch-interval", "20ms")

	before := predictDigits(t, p.url)
	_, modelBefore := call(t, "GET", p.url+"/model", "", "", "")
	loadBefore := metricLine(t, p.url, "fw_model_load_seconds{")
	if loadBefore == "" {
		t.Fatal("no fw_model_load_seconds in /metrics")
	}

	next := filepath.Join(tmp, "next.onnx")
	copyFile(t, bad, next)
	if err := os.Rename(next, live); err != nil {
		t.Fatal(err)
	}
	failed := regexp.MustCompile(`(?m)^fw_model_reloads_total\{result="failed"\} 1$`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if failed.MatchString(metricLine(t, p.url, `fw_model_reloads_total{result="failed"}`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tampered file was never refused:\n%s", p.stderr.String())
		}
	}
	if l := metricLine(t, p.url, `fw_model_reloads_total{result="ok"}`); l != "" && !strings.HasSuffix(l, " 0") {
		t.Fatalf("a reload succeeded: %s", l)
	}
	if l := metricLine(t, p.url, "fw_model_load_seconds{"); l != loadBefore {
		t.Fatalf("the served model was replaced: %q, was %q", l, loadBefore)
	}
	if code, out := call(t, "GET", p.url+"/health", "", "", ""); code != 200 {
		t.Fatalf("/health after a refused reload: %d %v", code, out)
	}
	after := predictDigits(t, p.url)
	if len(after) != len(before) {
		t.Fatalf("predictions changed shape: %v, were %v", after, before)
	}
	for i := range before {
		if math.Abs(after[i]-before[i]) > 1e-5 {
			t.Fatalf("predictions changed after a refused reload: %v, were %v", after, before)
		}
	}
	_, modelAfter := call(t, "GET", p.url+"/model", "", "", "")
	for _, k := range []string{"name", "version", "format", "load_time_ms"} {
		if modelAfter[k] != modelBefore[k] || modelAfter[k] == nil {
			t.Fatalf("/model %s: %v, was %v", k, modelAfter[k], modelBefore[k])
		}
	}
	log := p.stderr.String()
	if !strings.Contains(log, "reload refused") || !strings.Contains(log, "test vector does not match") {
		t.Fatalf("the refused reload and its reason were not logged:\n%s", log)
	}
}
