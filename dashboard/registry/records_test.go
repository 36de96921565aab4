package registry

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/teststore"
)

// legacyState writes the JSON files an fw before the store's records kept
// under the experiment dir: two models (one with an alias), an ended and a
// running export, a deployment whose process is gone, an ended deployment.
func legacyState(t *testing.T, dir string) {
	t.Helper()
	files := map[string]string{
		"registry/registry.json": `{"models": [
			{"name": "mlp", "created": "2026-11-20T10:00:00Z", "aliases": {"production": 2}, "versions": [
				{"version": 1, "format": "onnx", "size": 10, "source": {"upload": "a.onnx"}, "created": "2026-11-20T10:00:00Z", "file": "models/mlp/1/model.onnx"},
				{"version": 2, "format": "onnx", "size": 11, "source": {"export_id": "exp-1-1"}, "created": "2026-11-20T11:00:00Z", "file": "models/mlp/2/model.onnx"}]},
			{"name": "cnn", "created": "2026-11-20T12:00:00Z", "aliases": {}, "versions": [
				{"version": 3, "format": "checkpoint", "size": 5, "source": {"run_id": "r1", "checkpoint": "step-1.ckpt.pt"}, "created": "2026-11-20T12:00:00Z", "file": "/x/r1/step-1.ckpt.pt"}]}]}`,
		"registry/exports.json": `[
			{"id": "exp-1-1", "state": "finished", "progress": "done", "request": {"run_id": "r1", "checkpoint": "step-1.ckpt.pt", "format": "onnx", "name": "mlp"}, "model": "mlp", "version": 2, "started": "2026-11-20T10:59:00Z", "finished": "2026-11-20T11:00:00Z"},
			{"id": "exp-1-2", "state": "running", "progress": "exporting", "request": {"run_id": "r1", "checkpoint": "step-1.ckpt.pt", "format": "onnx", "name": "mlp"}, "model": "mlp", "started": "2026-11-20T13:00:00Z"}]`,
		"deployments.json":       `[{"id": "dep-1-1", "model": "mlp", "version": 2, "port": 1, "pid": 999999999, "url": "http://127.0.0.1:1", "device": "cpu", "started": "2026-11-20T11:05:00Z", "state": "running", "log": "x.log"}]`,
		"deployments-ended.json": `[{"id": "dep-0-1", "model": "mlp", "version": 1, "port": 2, "pid": 1, "url": "http://127.0.0.1:2", "device": "cpu", "started": "2026-11-20T10:01:00Z", "state": "stopped", "log": "y.log", "stopped": "2026-11-20T10:30:00Z"}]`,
	}
	for rel, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestImportLegacyFiles: the JSON files of an earlier fw are imported into
// the store once, renamed (kept), and what they held answers as before.
func TestImportLegacyFiles(t *testing.T) {
	teststore.ForEach(t, func(t *testing.T, cfg store.Config) {
		ctx := context.Background()
		dir := t.TempDir()
		legacyState(t, dir)
		st := openTestStore(t, cfg)
		s, err := New(ctx, st, Config{ExperimentDir: dir, CheckpointDir: dir}, nil)
		if err != nil {
			t.Fatal(err)
		}
		check := func(s *Service) {
			t.Helper()
			models, err := s.Reg.List(ctx)
			if err != nil || len(models) != 2 || models[0].Name != "cnn" || models[1].Name != "mlp" {
				t.Fatalf("models: %+v %v", models, err)
			}
			if v, err := s.Reg.Resolve(ctx, "mlp", "production"); err != nil || v.Version != 2 || v.Source.ExportID != "exp-1-1" {
				t.Fatalf("alias: %+v %v", v, err)
			}
			if j, ok, _ := s.Export(ctx, "exp-1-1"); !ok || j.State != StateFinished || j.Version != 2 {
				t.Fatalf("ended export: %+v %v", j, ok)
			}
			// It was running when that dashboard stopped: failed now.
			if j, ok, _ := s.Export(ctx, "exp-1-2"); !ok || j.State != StateFailed || j.Error != RestartedMsg {
				t.Fatalf("running export: %+v %v", j, ok)
			}
			deps, err := s.Records(ctx)
			if err != nil || len(deps) != 1 || deps[0].ID != "dep-1-1" || deps[0].State != DeployGone {
				t.Fatalf("deployments: %+v %v", deps, err)
			}
			ended, err := s.EndedDeployments(ctx)
			if err != nil || len(ended) != 1 || ended[0].ID != "dep-0-1" || ended[0].Stopped == nil {
				t.Fatalf("ended deployments: %+v %v", ended, err)
			}
		}
		check(s)
		for _, rel := range []string{"registry/registry.json", "registry/exports.json", "deployments.json", "deployments-ended.json"} {
			p := filepath.Join(dir, filepath.FromSlash(rel))
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("%s still there: %v", rel, err)
			}
			if _, err := os.Stat(p + ImportedSuffix); err != nil {
				t.Errorf("%s not kept: %v", rel, err)
			}
		}
		// A version number is never given out twice: the next one after an
		// imported model's highest.
		if err := s.Reg.Delete(ctx, "cnn", 3); err != nil {
			t.Fatal(err)
		}
		ck := filepath.Join(dir, "step-9.ckpt.pt")
		if err := os.WriteFile(ck, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if v, err := s.Reg.AddCheckpoint(ctx, "cnn", "r1", "step-9.ckpt.pt", ck, 1, nil); err != nil || v.Version != 4 {
			t.Fatalf("next version after a deleted one: %+v %v", v, err)
		}

		// The same files put back (a second dashboard on another copy of the
		// directory): nothing is duplicated or overwritten.
		dir2 := t.TempDir()
		legacyState(t, dir2)
		s2, err := New(ctx, openTestStore(t, cfg), Config{ExperimentDir: dir2, CheckpointDir: dir2}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := s2.Reg.Get(ctx, "cnn"); err != nil || len(m.Versions) != 1 || m.Versions[0].Version != 4 {
			t.Fatalf("imported again over newer state: %+v %v", m, err)
		}
		if recs, _ := st.ListRecords(ctx, kindExport); len(recs) != 2 {
			t.Fatalf("export records: %d", len(recs))
		}
	})
}

func TestImportCorruptFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "registry"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "registry", "exports.json")
	if err := os.WriteFile(p, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := New(context.Background(), openTestStore(t, store.Config{Dir: t.TempDir()}), Config{ExperimentDir: dir, CheckpointDir: dir}, nil)
	if err == nil || !strings.Contains(err.Error(), "exports.json") || !strings.Contains(err.Error(), "repair or remove") {
		t.Fatalf("a corrupt exports.json: %v", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the corrupt file must stay for the user: %v", err)
	}
}

// TestVersionsTwoDashboards: two services on one database (two dashboard
// replicas) register versions of one model at once; every version gets its
// own number and none is lost. Aliases set on one are seen by the other.
func TestVersionsTwoDashboards(t *testing.T) {
	teststore.ForEach(t, func(t *testing.T, cfg store.Config) {
		ctx := context.Background()
		dir := t.TempDir()
		ck := filepath.Join(dir, "step-1.ckpt.pt")
		if err := os.WriteFile(ck, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		var svcs []*Service
		for range 2 {
			s, err := New(ctx, openTestStore(t, cfg), Config{ExperimentDir: dir, CheckpointDir: dir}, nil)
			if err != nil {
				t.Fatal(err)
			}
			svcs = append(svcs, s)
		}
		const per = 10
		var wg sync.WaitGroup
		for _, s := range svcs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range per {
					if _, err := s.Reg.AddCheckpoint(ctx, "m", "r1", "step-1.ckpt.pt", ck, 1, nil); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		m, err := svcs[1].Reg.Get(ctx, "m")
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, v := range m.Versions {
			got = append(got, v.Version)
		}
		sort.Ints(got)
		if len(got) != 2*per || got[0] != 1 || got[len(got)-1] != 2*per {
			t.Fatalf("versions: %v", got)
		}
		if _, err := svcs[0].Reg.SetAliases(ctx, "m", map[string]int{"production": 7}); err != nil {
			t.Fatal(err)
		}
		if v, err := svcs[1].Reg.Resolve(ctx, "m", "production"); err != nil || v.Version != 7 {
			t.Fatalf("alias seen by the other: %+v %v", v, err)
		}
		if _, err := svcs[1].Reg.SetAliases(ctx, "m", map[string]int{"production": 99}); err == nil {
			t.Fatal("alias to a missing version accepted")
		}
		if _, err := svcs[0].Reg.Get(ctx, "../etc"); err == nil {
			t.Fatal("a bad name found something")
		}
		// A name no model can have is not found, not a store key error
		// (schemathesis: PATCH /api/models/<control characters>).
		if _, err := svcs[0].Reg.SetAliases(ctx, "<\x01\x0f", map[string]int{}); store.ErrorCode(err) != store.CodeNotFound {
			t.Fatalf("aliases of an impossible name: %v", err)
		}
	})
}
