package registry

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
)

type fakeCheckpoints map[string][]store.Checkpoint

func (f fakeCheckpoints) Checkpoints(_ context.Context, runID string) ([]store.Checkpoint, error) {
	return f[runID], nil
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

func exportService(t *testing.T, ctx context.Context, dir, script string) *Service {
	t.Helper()
	py := fakePython(t, dir, script)
	ckDir := filepath.Join(dir, "checkpoints")
	if err := os.MkdirAll(filepath.Join(ckDir, "r1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ckDir, "r1", "step-1.ckpt.pt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := fakeCheckpoints{"r1": {{Path: "step-1.ckpt.pt", Step: 1}}}
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
		j, found := s.Export(id)
		if found && ok(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("export %s: never reached the state wanted; last %+v (found %v)", id, j, found)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readExportsFile(t *testing.T, dir string) map[string]ExportJob {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "registry", "exports.json"))
	if err != nil {
		t.Fatal(err)
	}
	var list []ExportJob
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("exports.json: %v\n%s", err, b)
	}
	out := map[string]ExportJob{}
	for _, j := range list {
		out[j.ID] = j
	}
	return out
}

// TestExportsSurviveRestart: export jobs are persisted; after a restart an
// ended job still answers as it was, and one that was running (its
// dashboard died) is failed with RestartedMsg rather than left running.
func TestExportsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	req := ExportRequest{RunID: "r1", Checkpoint: "step-1.ckpt.pt", Format: "onnx", Name: "mlp"}

	// First process: one export fails, one hangs (the dashboard then "dies").
	ctx1, cancel1 := context.WithCancel(context.Background())
	s1 := exportService(t, ctx1, dir, `echo "cannot export: bad checkpoint" >&2; exit 3`)
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
	if got := readExportsFile(t, dir); got[hung.ID].State != StateRunning || got[failed.ID].State != StateFailed {
		t.Fatalf("exports.json while one runs: %+v", got)
	}
	if list := s1.Exports(); len(list) != 2 || list[0].ID != hung.ID || list[1].ID != failed.ID {
		t.Fatalf("Exports (newest first): %+v", list)
	}

	// Wait until the hung export has made its temporary directory (its
	// process started), as a dashboard killed mid-export would leave it.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if tmp, _ := filepath.Glob(filepath.Join(dir, "registry", "export-*")); len(tmp) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hung export never made its temporary directory")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Second process on the same directory, while the first still "runs".
	s2 := exportService(t, context.Background(), dir, "exit 1")
	got, ok := s2.Export(hung.ID)
	if !ok || got.State != StateFailed || got.Error != RestartedMsg || got.Progress != "failed" || got.Finished == nil {
		t.Fatalf("running export after a restart: %+v (found %v)", got, ok)
	}
	if got, ok := s2.Export(failed.ID); !ok || got.State != StateFailed || got.Error != j.Error || got.Request != req {
		t.Fatalf("ended export after a restart: %+v (found %v), want %+v", got, ok, j)
	}
	if f := readExportsFile(t, dir); f[hung.ID].State != StateFailed || f[hung.ID].Error != RestartedMsg {
		t.Fatalf("exports.json after the restart: %+v", f)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "registry", "export-*")); len(tmp) != 0 {
		t.Fatalf("temporary export directories left: %v", tmp)
	}
	// New IDs do not reuse old ones; the listing is newest first.
	next, err := s2.StartExport(context.Background(), req)
	if err != nil || next.ID == hung.ID || next.ID == failed.ID {
		t.Fatalf("export after the restart: %+v %v", next, err)
	}
	list := s2.Exports()
	if len(list) != 3 || list[0].ID != next.ID || list[1].ID != hung.ID || list[2].ID != failed.ID {
		t.Fatalf("Exports after the restart: %+v", list)
	}
	waitExportState(t, s2, next.ID, func(j ExportJob) bool { return j.State == StateFailed })
	s2.Wait()

	cancel1()
	s1.Wait()
}

func TestExportsFileCorrupt(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "registry"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "registry", "exports.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := New(context.Background(), fakeCheckpoints{}, Config{ExperimentDir: dir, CheckpointDir: dir}, nil)
	if err == nil || !strings.Contains(err.Error(), "exports.json") {
		t.Fatalf("a corrupt exports.json: %v", err)
	}
}

// The int8 ONNX format takes a quantization method, which reaches
// python -m fw.export as --quantization (the script here prints its
// arguments, the way the exporter's failure message would carry them);
// other formats, and methods that do not exist, are refused up front.
func TestExportQuantization(t *testing.T) {
	dir := t.TempDir()
	s := exportService(t, context.Background(), dir, `echo "args: $*" >&2; exit 3`)
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
