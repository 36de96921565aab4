package registry

import (
	"archive/zip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/teststore"
)

// testStore is a real store whose Checkpoints answers from a map (the
// exports here run a fake exporter on a stand-in checkpoint file).
type testStore struct {
	store.Store
	ckpts map[string][]store.Checkpoint
}

func (f testStore) Checkpoints(_ context.Context, runID string) ([]store.Checkpoint, error) {
	return f.ckpts[runID], nil
}

func openTestStore(t *testing.T, cfg store.Config) testStore {
	t.Helper()
	return testStore{Store: teststore.Open(t, cfg), ckpts: map[string][]store.Checkpoint{"r1": {{Path: "step-1.ckpt.pt", Step: 1}}}}
}

// exportService opens a Service on dir whose "Python" is a shell script.
// fakePython writes script as a new executable file. Each call makes its own
// file: rewriting one that a running export may be exec'ing at that moment
// fails with "text file busy".
func fakePython(t *testing.T, dir, script string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "fake-python-*.sh")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("#!/bin/sh\n" + script + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f.Name(), 0o755); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func exportService(t *testing.T, ctx context.Context, dir string, st Store, script string) *Service {
	t.Helper()
	py := fakePython(t, dir, script)
	ckDir := filepath.Join(dir, "checkpoints")
	if err := os.MkdirAll(filepath.Join(ckDir, "r1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ckDir, "r1", "step-1.ckpt.pt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, st, Config{ExperimentDir: dir, CheckpointDir: ckDir, Python: py}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitExportState(t *testing.T, s *Service, id string, ok func(ExportJob) bool) ExportJob {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, found, err := s.Export(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if found && ok(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("export %s: never reached the state wanted; last %+v (found %v)", id, j, found)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// storedExports reads the export jobs as the store holds them.
func storedExports(t *testing.T, st Store) map[string]ExportJob {
	t.Helper()
	recs, err := st.ListRecords(context.Background(), kindExport)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]ExportJob{}
	for _, r := range recs {
		var j ExportJob
		if err := json.Unmarshal(r.Body, &j); err != nil {
			t.Fatalf("export record %s: %v\n%s", r.Key, err, r.Body)
		}
		out[j.ID] = j
	}
	return out
}

// TestExportsSurviveRestart: export jobs are persisted; after a restart an
// ended job still answers as it was, and one that was running (its
// dashboard died) is failed with RestartedMsg rather than left running.
func TestExportsSurviveRestart(t *testing.T) {
	teststore.ForEach(t, testExportsSurviveRestart)
}

func testExportsSurviveRestart(t *testing.T, cfg store.Config) {
	dir := t.TempDir()
	req := ExportRequest{RunID: "r1", Checkpoint: "step-1.ckpt.pt", Format: "onnx", Name: "mlp"}
	ctx := context.Background()

	// First process: one export fails, one hangs (the dashboard then "dies").
	ctx1, cancel1 := context.WithCancel(context.Background())
	st1 := openTestStore(t, cfg)
	s1 := exportService(t, ctx1, dir, st1, `echo "cannot export: bad checkpoint" >&2; exit 3`)
	failed, err := s1.StartExport(context.Background(), req)
	if err != nil || failed.State != StateRunning {
		t.Fatalf("start: %+v %v", failed, err)
	}
	j := waitExportState(t, s1, failed.ID, func(j ExportJob) bool { return j.State == StateFailed })
	if !strings.Contains(j.Error, "cannot export: bad checkpoint") || j.Finished == nil {
		t.Fatalf("failed export: %+v", j)
	}
	s1.cfg.Python = fakePython(t, dir, "exec sleep 60")
	hung, err := s1.StartExport(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := storedExports(t, st1); got[hung.ID].State != StateRunning || got[failed.ID].State != StateFailed {
		t.Fatalf("stored export jobs while one runs: %+v", got)
	}
	if list, _ := s1.Exports(ctx); len(list) != 2 || list[0].ID != hung.ID || list[1].ID != failed.ID {
		t.Fatalf("Exports (newest first): %+v", list)
	}

	// Wait until the hung export has made its temporary directory (its
	// process started), as a dashboard killed mid-export would leave it.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if tmp, _ := filepath.Glob(filepath.Join(dir, "registry", "tmp", "*", "export-*")); len(tmp) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hung export never made its temporary directory")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Second process on the same directory and database, while the first
	// still "runs".
	st2 := openTestStore(t, cfg)
	s2 := exportService(t, context.Background(), dir, st2, "exit 1")
	got, ok, _ := s2.Export(ctx, hung.ID)
	if !ok || got.State != StateFailed || got.Error != RestartedMsg || got.Progress != "failed" || got.Finished == nil {
		t.Fatalf("running export after a restart: %+v (found %v)", got, ok)
	}
	if got, ok, _ := s2.Export(ctx, failed.ID); !ok || got.State != StateFailed || got.Error != j.Error || got.Request != req {
		t.Fatalf("ended export after a restart: %+v (found %v), want %+v", got, ok, j)
	}
	if f := storedExports(t, st2); f[hung.ID].State != StateFailed || f[hung.ID].Error != RestartedMsg {
		t.Fatalf("stored export jobs after the restart: %+v", f)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "registry", "tmp", "*", "export-*")); len(tmp) != 0 {
		t.Fatalf("temporary export directories left: %v", tmp)
	}
	// New IDs do not reuse old ones; the listing is newest first.
	next, err := s2.StartExport(context.Background(), req)
	if err != nil || next.ID == hung.ID || next.ID == failed.ID {
		t.Fatalf("export after the restart: %+v %v", next, err)
	}
	list, _ := s2.Exports(ctx)
	if len(list) != 3 || list[0].ID != next.ID || list[1].ID != hung.ID || list[2].ID != failed.ID {
		t.Fatalf("Exports after the restart: %+v", list)
	}
	waitExportState(t, s2, next.ID, func(j ExportJob) bool { return j.State == StateFailed })
	s2.Wait()

	cancel1()
	s1.Wait()
}

// The int8 ONNX format takes a quantization method, which reaches
// python -m fw.export as --quantization (the script here prints its
// arguments, the way the exporter's failure message would carry them);
// other formats, and methods that do not exist, are refused up front.
func TestExportQuantization(t *testing.T) {
	dir := t.TempDir()
	s := exportService(t, context.Background(), dir, openTestStore(t, store.Config{Dir: dir}), `echo "args: $*" >&2; exit 3`)
	defer s.Wait()
	req := func(format, q string) ExportRequest {
		return ExportRequest{RunID: "r1", Checkpoint: "step-1.ckpt.pt", Format: format, Name: "mlp", Quantization: q}
	}
	for _, bad := range []struct {
		req ExportRequest
		msg string
	}{
		{req("onnx", "static"), "quantization applies to format onnx_int8 only"},
		{req("quantized", "dynamic"), "quantization applies to format onnx_int8 only"},
		{req("onnx_int8", "qat"), `quantization "qat" is not dynamic or static`},
		{req("int8", ""), "not one of onnx, torchscript, quantized, onnx_int8"},
	} {
		if _, err := s.StartExport(context.Background(), bad.req); err == nil || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("%+v: %v, want an error with %q", bad.req, err, bad.msg)
		}
	}
	for _, c := range []struct{ q, want, wantNot string }{
		{"static", "--format onnx_int8 --out", "--quantization dynamic"},
		{"", "--format onnx_int8 --out", "--quantization"},
	} {
		j, err := s.StartExport(context.Background(), req("onnx_int8", c.q))
		if err != nil {
			t.Fatal(err)
		}
		j = waitExportState(t, s, j.ID, func(j ExportJob) bool { return j.State == StateFailed })
		if !strings.Contains(j.Error, c.want) || !strings.Contains(j.Error, "model.int8.onnx") || strings.Contains(j.Error, c.wantNot) {
			t.Errorf("quantization %q: exporter ran with %q", c.q, j.Error)
		}
		if c.q != "" && !strings.Contains(j.Error, "--quantization "+c.q) {
			t.Errorf("quantization %q not passed on: %q", c.q, j.Error)
		}
	}
}

// TestExportProgramVersion: a torch.export program version (an MLflow
// PyTorch model registered through MLflow's API) is exported from its
// stored program; it is not deployed before, and an MLflow reference is
// refused with the reason.
func TestExportProgramVersion(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := exportService(t, ctx, dir, openTestStore(t, store.Config{Dir: dir}), `echo "args: $*" >&2; exit 3`)
	defer s.Wait()
	prog := filepath.Join(dir, "model.pt2")
	writeZip(t, prog, map[string]string{"m/archive_format": "pt2", "m/models/model.json": "{}"})
	notProg := filepath.Join(dir, "aoti.pt2")
	writeZip(t, notProg, map[string]string{"m/archive_format": "pt2", "m/models/model.json": "{}", "m/data/aotinductor/m/x.so": ""})
	if _, err := s.Reg.CreateModel(ctx, "torchy", "", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reg.AddProgram(ctx, "torchy", notProg, Version{}); err == nil || !strings.Contains(err.Error(), "not a torch.export program") {
		t.Fatalf("an AOTInductor package taken as a program: %v", err)
	}
	v, err := s.Reg.AddProgram(ctx, "torchy", prog, Version{Source: Source{URI: "models:/m-1"}, Description: "d"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Format != FormatProgram || v.Version != 1 || v.Servable() || v.File != "models/torchy/1/model.pt2" || v.Source.URI != "models:/m-1" {
		t.Fatalf("program version %+v", v)
	}
	ref, err := s.Reg.AddReference(ctx, "torchy", Version{Format: FormatMLflow, Source: Source{URI: "runs:/r/model"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Deploy(ctx, "torchy", DeployRequest{Version: json.RawMessage("1")}); err == nil || !strings.Contains(err.Error(), "is a torch.export program") || !strings.Contains(err.Error(), "export it first") {
		t.Fatalf("deploying a program: %v", err)
	}
	for _, bad := range []struct {
		req ExportRequest
		msg string
	}{
		{ExportRequest{Model: "torchy", Version: 1, Format: "onnx_int8", Quantization: "static"}, "carries none: use quantization dynamic"},
		{ExportRequest{Model: "torchy", Version: ref.Version, Format: "onnx"}, "never unpickled"},
	} {
		if _, err := s.StartExport(ctx, bad.req); err == nil || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("%+v: %v, want an error with %q", bad.req, err, bad.msg)
		}
	}
	j, err := s.StartExport(ctx, ExportRequest{Model: "torchy", Version: 1, Format: "onnx"})
	if err != nil {
		t.Fatal(err)
	}
	j = waitExportState(t, s, j.ID, func(j ExportJob) bool { return j.State == StateFailed })
	want := "-m fw.export " + filepath.Join(dir, "models", "torchy", "1", "model.pt2") + " --format onnx --out "
	if !strings.Contains(j.Error, want) || !strings.Contains(j.Error, "--name torchy") || j.Model != "torchy" {
		t.Fatalf("the exporter ran with %q, want %q", j.Error, want)
	}
}

func writeZip(t *testing.T, path string, files map[string]string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	z := zip.NewWriter(f)
	for name, content := range files {
		w, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
