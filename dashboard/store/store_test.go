package store

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/testleak"
	"github.com/fw-serve/fw/internal/testpg"
)

// TestMain re-runs the test binary as the crash-test child when asked, and
// otherwise fails the tests when a goroutine (a store's writer) outlives them.
func TestMain(m *testing.M) {
	if dir := os.Getenv("FW_STORE_CRASH_CHILD"); dir != "" {
		os.Exit(crashChild(dir))
	}
	testleak.Main(m)
}

// backend opens a fresh, empty store.
type backend struct {
	name string
	open func(t *testing.T, cfg Config) Store
}

// backends returns SQLite always and PostgreSQL when FW_TEST_DATABASE_URL is
// set (FW_REQUIRE_POSTGRES=1 makes its absence a failure; SQLite is left
// out with FW_TEST_ONLY_POSTGRES=1, testpg.SQLite). Each open gets
// its own directory or PostgreSQL schema, so tests can run in parallel.
func backends(t *testing.T) []backend {
	t.Helper()
	var out []backend
	if testpg.SQLite() {
		out = append(out, backend{"sqlite", func(t *testing.T, cfg Config) Store {
			t.Helper()
			if cfg.Dir == "" {
				cfg.Dir = t.TempDir()
			}
			return mustOpen(t, cfg)
		}})
	}
	base := os.Getenv("FW_TEST_DATABASE_URL")
	if base == "" {
		testpg.NoCluster(t)
		return out
	}
	out = append(out, backend{"postgres", func(t *testing.T, cfg Config) Store {
		t.Helper()
		if cfg.DatabaseURL == "" { // set: a second store on the same schema
			cfg.DatabaseURL = testpg.Schema(t, base)
		}
		if cfg.CheckpointDir == "" {
			cfg.CheckpointDir = t.TempDir()
		}
		if cfg.ArtifactDir == "" {
			cfg.ArtifactDir = t.TempDir()
		}
		return mustOpen(t, cfg)
	}})
	return out
}

func mustOpen(t *testing.T, cfg Config) Store {
	t.Helper()
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// forEach runs f against every backend as parallel subtests.
func forEach(t *testing.T, f func(t *testing.T, open func(Config) Store)) {
	t.Helper()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, func(cfg Config) Store { return b.open(t, cfg) })
		})
	}
}

// ev is a small builder for events of one run.
type ev struct {
	run    string
	writer string
	seq    int64
}

func (e *ev) next(x Event) Event {
	e.seq++
	x.RunID, x.Writer, x.Seq = e.run, e.writer, e.seq
	return x
}

func (e *ev) start(exp string, params map[string]any, tags map[string]string) Event {
	return e.next(Event{Type: EventRunStart, Experiment: exp, Params: params, Tags: tags})
}

func (e *ev) metrics(step int64, vals map[string]float64) Event {
	m := map[string]Float{}
	for k, v := range vals {
		m[k] = Float(v)
	}
	return e.next(Event{Type: EventMetrics, Step: Ptr(step), Values: m})
}

func mustApply(t *testing.T, s Store, events ...Event) ApplyResult {
	t.Helper()
	res, err := s.Apply(context.Background(), events)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if len(res.Errors) > 0 {
		t.Fatalf("apply: unexpected event errors: %+v", res.Errors)
	}
	return res
}

func runIDs(p RunPage) string {
	ids := make([]string, len(p.Runs))
	for i, r := range p.Runs {
		ids[i] = r.ID
	}
	return strings.Join(ids, ",")
}
