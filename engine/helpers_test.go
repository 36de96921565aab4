package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// modelsDir is where `make models` wrote the reference models. Tests that
// need them skip when they are absent, unless FW_REQUIRE_MODELS=1 (set by
// `make test`), where absence is a failure.
func modelsDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("FW_MODELS_DIR")
	if dir == "" {
		dir = filepath.Join("..", "build", "models")
	}
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
		if os.Getenv("FW_REQUIRE_MODELS") == "1" {
			t.Fatalf("reference models missing in %s: run `make models`", dir)
		}
		t.Skipf("reference models missing in %s: run `make models`", dir)
	}
	return dir
}

// torchAvailable skips a test when the libtorch shim is not built, unless
// FW_REQUIRE_MODELS=1, where `make test` has built it.
func torchAvailable(t testing.TB) {
	t.Helper()
	if _, err := TorchVersion(""); err != nil {
		if os.Getenv("FW_REQUIRE_MODELS") == "1" {
			t.Fatalf("libtorch shim unavailable: %v", err)
		}
		t.Skipf("libtorch shim unavailable: %v", err)
	}
}

func mustLoad(t testing.TB, path string, opts Options) *Model {
	t.Helper()
	if opts.Threads == 0 {
		opts.Threads = 1
	}
	m, err := Load(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
