// Package testmodels finds the reference models that `make models` builds
// (build/models), for tests in any package of the module.
package testmodels

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Dir returns the absolute path of the reference models: FW_MODELS_DIR, or
// build/models at the module root. When they are absent the test is skipped,
// unless FW_REQUIRE_MODELS=1 (set by `make test`), where absence fails it.
func Dir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("FW_MODELS_DIR")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "..", "..", "build", "models")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(abs, "manifest.json")); err != nil {
		Require(t, "reference models missing in "+abs+": run `make models`")
	}
	return abs
}

// Require fails the test when FW_REQUIRE_MODELS=1 (everything `make test`
// builds must be there) and skips it otherwise, with reason.
func Require(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("FW_REQUIRE_MODELS") == "1" {
		t.Fatal(reason)
	}
	t.Skip(reason)
}

// NumpyPython returns an interpreter with numpy (FW_PYTHON, FW_VENV's, or
// python3), for tests of Python-backend models; without one the test is
// skipped or fails as Require says.
func NumpyPython(t testing.TB) string {
	t.Helper()
	py := os.Getenv("FW_PYTHON")
	if py == "" && os.Getenv("FW_VENV") != "" {
		py = filepath.Join(os.Getenv("FW_VENV"), "bin", "python")
	}
	if py == "" {
		py = "python3"
	}
	if err := exec.Command(py, "-c", "import numpy").Run(); err != nil {
		Require(t, "a Python with numpy is needed (FW_PYTHON): "+py+": "+err.Error())
	}
	return py
}

// WritePython writes a Python-backend model into the repository root:
// root/name/config.pbtxt (none when config is empty) and
// root/name/1/model.py.
func WritePython(t testing.TB, root, name, config, src string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, name, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		if err := os.WriteFile(filepath.Join(root, name, "config.pbtxt"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, name, "1", "model.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Triton returns the ONNX file of one of Triton's sample models that `make
// models` writes into build/models/triton (python/fw/triton_samples.py):
// "nobatch", "fixed_batch1", "densenet_onnx", "simple"... It is skipped or
// fails as Dir does when the file is absent.
func Triton(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Dir(t), "triton", name, "1", "model.onnx")
	if _, err := os.Stat(p); err != nil {
		Require(t, "Triton sample model missing: "+p+": run `make models`")
	}
	return p
}

// FWBinary returns the fw binary that tests start as a real child process
// (a dashboard's `fw serve` deployments): FW_BIN, or bin/fw at the module
// root (`make build`; `make test` builds it before the Go tests). It is
// skipped or fails as Dir does when the binary is absent.
func FWBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("FW_BIN")
	if bin == "" {
		_, file, _, _ := runtime.Caller(0)
		bin = filepath.Join(filepath.Dir(file), "..", "..", "bin", "fw")
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() {
		Require(t, "the fw binary is missing at "+abs+": run `make build` (or set FW_BIN)")
	}
	return abs
}
