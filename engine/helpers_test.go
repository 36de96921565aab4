package engine

import (
	"context"
	"github.com/fw-serve/fw/internal/testmodels"
	"os"
	"path/filepath"
	"testing"
)

// modelsDir is where `make models` wrote the reference models.
func modelsDir(t testing.TB) string { return testmodels.Dir(t) }

// torchAvailable skips a test when the libtorch shim is not built, unless
// FW_REQUIRE_MODELS=1, where `make test` has built it.
func torchAvailable(t testing.TB) {
	t.Helper()
	if _, err := TorchVersion(""); err != nil {
		testmodels.Require(t, "libtorch shim unavailable: "+err.Error())
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
