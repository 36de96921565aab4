package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fw tune on digits_mlp over HTTP: real fw serve processes for the
// settings its short budget allows (the defaults always), a table, the
// winner's flags, and a config.pbtxt that serves the model from a
// repository with that setting.
func TestTuneWritesAServableConfig(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(modelsDir(t), "digits_mlp.onnx")
	cfgPath := filepath.Join(dir, "config.pbtxt")
	cmd := fwCmd("tune", model, "--p99", "2s", "--concurrency", "2,4", "--duration", "200ms", "--warmup", "50ms", "--budget", "3s", "--config", cfgPath)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fw tune: %v\n%s\n%s", err, out, stderr.String())
	}
	text := string(out)
	for _, want := range []string{"| 1 ", "(defaults)", "c=2 req/s", "c=4 req/s", "CPU µs/req", "Best within p99 2s", "--max-batch-size", "Wrote " + cfgPath} {
		if !strings.Contains(text, want) {
			t.Fatalf("output lacks %q:\n%s", want, text)
		}
	}
	// The config serves digits_mlp from a repository (fw's file name kept as default_model_filename).
	repo := filepath.Join(dir, "repo")
	if err := os.MkdirAll(filepath.Join(repo, "digits_mlp", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(model)
	os.WriteFile(filepath.Join(repo, "digits_mlp", "1", "digits_mlp.onnx"), data, 0o644)
	cfg, _ := os.ReadFile(cfgPath)
	os.WriteFile(filepath.Join(repo, "digits_mlp", "config.pbtxt"), cfg, 0o644)
	if !strings.Contains(string(cfg), "intra_op_thread_count") || !strings.Contains(string(cfg), "max_batch_size: ") {
		t.Fatalf("config.pbtxt:\n%s", cfg)
	}
	p := startServe(t, "--model-repository", repo)
	r, err := http.Get(p.url + "/v2/models/digits_mlp/config")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	var served struct {
		MaxBatchSize  int `json:"max_batch_size"`
		InstanceGroup []struct {
			Count int `json:"count"`
		} `json:"instance_group"`
	}
	if r.StatusCode != 200 || json.Unmarshal(b, &served) != nil || served.MaxBatchSize < 1 || len(served.InstanceGroup) != 1 || served.InstanceGroup[0].Count < 1 {
		t.Fatalf("served config %d: %s", r.StatusCode, b)
	}
}

// The gRPC load (ModelInfer, raw contents) and the usage errors.
func TestTuneGRPCAndUsage(t *testing.T) {
	model := filepath.Join(modelsDir(t), "textcls.onnx")
	cmd := fwCmd("tune", model, "--p99", "2s", "--protocol", "grpc", "--concurrency", "2", "--duration", "200ms", "--warmup", "50ms", "--budget", "1s")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "(defaults)") || !strings.Contains(string(out), "Best within") {
		t.Fatalf("fw tune --protocol grpc: %v\n%s\n%s", err, out, stderr.String())
	}
	for _, args := range [][]string{
		{"tune", model},
		{"tune", model, "--p99", "10ms", "--protocol", "ws"},
		{"tune", model, "--p99", "10ms", "--concurrency", "0"},
		{"tune", "--p99", "10ms"},
	} {
		cmd := fwCmd(args...)
		b, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 {
			t.Fatalf("%v: exit %d (%v), want 2:\n%s", args, code, err, b)
		}
	}
}
