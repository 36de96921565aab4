// Package testpg gives a test its own PostgreSQL schema on the throwaway
// cluster scripts/pg-test.sh starts (FW_TEST_DATABASE_URL), for the store's
// suites that run on both backends.
package testpg

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// SQLite reports whether a suite that runs on both backends should run its
// SQLite half too: not when FW_TEST_ONLY_POSTGRES=1, which make
// test-postgres sets because make test-go ran that half already.
func SQLite() bool { return os.Getenv("FW_TEST_ONLY_POSTGRES") != "1" }

// NoCluster is for a suite that found FW_TEST_DATABASE_URL unset: it
// fails the test when PostgreSQL was required (FW_REQUIRE_POSTGRES=1) or
// is the only backend to run (FW_TEST_ONLY_POSTGRES=1), so that nothing
// passes without running.
func NoCluster(t testing.TB) {
	t.Helper()
	if os.Getenv("FW_REQUIRE_POSTGRES") == "1" || !SQLite() {
		t.Fatal("FW_REQUIRE_POSTGRES=1 or FW_TEST_ONLY_POSTGRES=1 but FW_TEST_DATABASE_URL is unset: run through scripts/pg-test.sh")
	}
}

// Schema creates a schema for the test (dropped at its end) and returns a
// URL, base with search_path set, whose connections use it.
func Schema(t testing.TB, base string) string {
	t.Helper()
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("creating schema: %v", err)
	}
	t.Cleanup(func() {
		db.Exec("DROP SCHEMA " + schema + " CASCADE")
		db.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
