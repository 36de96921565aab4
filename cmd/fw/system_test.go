package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/testgpu"
)

func TestDashboardSystemStatus(t *testing.T) {
	dir := t.TempDir()
	p := startDashboard(t, dir)
	code, out := call(t, "GET", p.url+"/api/system/status", "", "", "")
	if code != 200 {
		t.Fatalf("status: %d %v", code, out)
	}
	cpu := out["cpu"].(map[string]any)
	if cpu["cores"].(float64) < 1 || len(cpu["per_core"].([]any)) < 1 {
		t.Errorf("cpu: %v", cpu)
	}
	if mem := out["memory"].(map[string]any); mem["total_bytes"].(float64) <= 0 || mem["available_bytes"].(float64) <= 0 {
		t.Errorf("memory: %v", mem)
	}
	disks := map[string]map[string]any{}
	for _, d := range out["disks"].([]any) {
		dm := d.(map[string]any)
		disks[dm["name"].(string)] = dm
	}
	for name, path := range map[string]string{"experiments": dir, "checkpoints": filepath.Join(dir, "ckpt")} {
		d := disks[name]
		if d == nil || d["path"] != path || d["free_bytes"].(float64) <= 0 || d["error"] != nil {
			t.Errorf("disk %s: %v", name, d)
		}
	}
	// The GPUs the machine has (none without the NVIDIA driver), each named.
	gpus := out["gpus"].([]any)
	if want, known := testgpu.Count(t); known && len(gpus) != want {
		t.Errorf("%d GPUs, want %d (nvidia-smi -L): %v", len(gpus), want, gpus)
	}
	for _, g := range gpus {
		if gm := g.(map[string]any); gm["name"] == "" || gm["memory_total_bytes"].(float64) <= 0 {
			t.Errorf("gpu: %v", gm)
		}
	}
	if out["errors"] != nil || out["error"] != nil {
		t.Errorf("errors: %v", out)
	}
	proc := out["process"].(map[string]any)
	if proc["pid"].(float64) != float64(p.cmd.Process.Pid) || proc["rss_bytes"].(float64) <= 0 || proc["goroutines"].(float64) < 1 || proc["version"] == "" {
		t.Errorf("process: %v", proc)
	}
	if out["load"] == nil {
		t.Errorf("no load averages on Linux: %v", out)
	}
	p.stop(t)
}

func TestDashboardPrometheusMetrics(t *testing.T) {
	p := startDashboard(t, t.TempDir())
	call(t, "GET", p.url+"/api/runs/nope", "", "", "")
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	for _, want := range []string{"go_goroutines", "process_resident_memory_bytes", "fw_dashboard_cpu_percent", `fw_dashboard_cpu_core_percent{core="0"}`,
		"fw_dashboard_memory_total_bytes", `fw_dashboard_disk_free_bytes{dir="experiments"`, `fw_dashboard_disk_free_bytes{dir="checkpoints"`,
		`fw_dashboard_http_requests_total{code="404",method="GET",route="/api/runs/{id}"} 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// GPU gauges exactly where the machine has GPUs: one per GPU.
	if want, known := testgpu.Count(t); known {
		if got := strings.Count(string(b), "\nfw_dashboard_gpu_memory_total_bytes{"); got != want {
			t.Errorf("%d fw_dashboard_gpu_memory_total_bytes series, want %d (nvidia-smi -L)", got, want)
		}
		if want == 0 && strings.Contains(string(b), "fw_dashboard_gpu_") {
			t.Errorf("GPU gauges without a GPU")
		}
		for i := range want {
			if !strings.Contains(string(b), fmt.Sprintf(`fw_dashboard_gpu_utilization_percent{gpu="%d"`, i)) {
				t.Errorf("/metrics lacks GPU %d's utilisation", i)
			}
		}
	}
	p.stop(t)
}

func TestDashboardSystemToken(t *testing.T) {
	p := startDashboard(t, t.TempDir(), "--token", "s3cret")
	if code, out := call(t, "GET", p.url+"/api/system/status", "", "", ""); code != 401 || errorCode(t, out) != "unauthorized" {
		t.Errorf("status without the token: %d %v", code, out)
	}
	if code, out := call(t, "GET", p.url+"/api/system/status", "s3cret", "", ""); code != 200 {
		t.Errorf("status with the token: %d %v", code, out)
	}
	for _, path := range []string{"/metrics", "/health"} {
		resp, err := http.Get(p.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s without the token: %d, want 200", path, resp.StatusCode)
		}
	}
	p.stop(t)
}
