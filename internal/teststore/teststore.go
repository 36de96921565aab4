// Package teststore opens the tracking store on each backend a suite runs
// on: SQLite always, and PostgreSQL when scripts/pg-test.sh gave a cluster
// (FW_TEST_DATABASE_URL), each test in its own directory or schema. For the
// suites above the store (registry, API, jobs) that must pass on both.
package teststore

import (
	"context"
	"os"
	"testing"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/testpg"
)

// Backend is one store configuration: Config opens the same database every
// time it is used (a second store on it is a second dashboard sharing it).
type Backend struct {
	Name   string
	Config store.Config
}

// Backends returns SQLite in a temporary directory, and PostgreSQL in a
// schema of its own when FW_TEST_DATABASE_URL is set; FW_REQUIRE_POSTGRES=1
// makes its absence a failure; FW_TEST_ONLY_POSTGRES=1 leaves SQLite out
// (testpg.SQLite).
func Backends(t *testing.T) []Backend {
	t.Helper()
	var out []Backend
	if testpg.SQLite() {
		out = append(out, Backend{"sqlite", store.Config{Dir: t.TempDir()}})
	}
	base := os.Getenv("FW_TEST_DATABASE_URL")
	if base == "" {
		testpg.NoCluster(t)
		return out
	}
	return append(out, Backend{"postgres", store.Config{DatabaseURL: testpg.Schema(t, base), CheckpointDir: t.TempDir(), ArtifactDir: t.TempDir()}})
}

// ForEach runs f once per backend, as subtests.
func ForEach(t *testing.T, f func(t *testing.T, cfg store.Config)) {
	t.Helper()
	for _, b := range Backends(t) {
		t.Run(b.Name, func(t *testing.T) { f(t, b.Config) })
	}
}

// Open opens a store on cfg, closed when the test ends.
func Open(t testing.TB, cfg store.Config) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("opening the store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
