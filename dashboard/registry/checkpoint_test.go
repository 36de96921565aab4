package registry

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/store"
)

// TestCheckpointFromObjectStorage: a checkpoint written on another host
// (not under this replica's checkpoint directory, its copy in object
// storage: a directory store standing in for the bucket here) is
// registered with its size and canonical path, and exported from the
// run's checkpoint or from the version with the copy as the exporter's
// input; one in neither place is not found.
func TestCheckpointFromObjectStorage(t *testing.T) {
	dir := t.TempDir()
	st := openTestStore(t, store.Config{Dir: dir})
	st.ckpts["r1"] = append(st.ckpts["r1"], store.Checkpoint{Path: "step-2.ckpt.pt", Step: 2})
	bucket, err := blob.NewDir(filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	if err := bucket.Put(context.Background(), "r1/step-1.ckpt.pt", strings.NewReader("remote weights"), 14); err != nil {
		t.Fatal(err)
	}
	ckDir := filepath.Join(dir, "checkpoints")
	py := fakePython(t, dir, `echo "input: $3: $(cat "$3")" >&2; exit 3`)
	s, err := New(context.Background(), st, Config{ExperimentDir: dir, CheckpointDir: ckDir, Python: py, Checkpoints: bucket}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Wait()
	ctx := context.Background()
	v, err := s.RegisterCheckpoint(ctx, "m", "r1", "step-1.ckpt.pt")
	if err != nil {
		t.Fatal(err)
	}
	if v.Size != 14 || v.File != filepath.Join(ckDir, "r1", "step-1.ckpt.pt") {
		t.Fatalf("version: %+v", v)
	}
	for _, req := range []ExportRequest{
		{RunID: "r1", Checkpoint: "step-1.ckpt.pt", Format: "onnx", Name: "a"},
		{Model: "m", Version: 1, Format: "onnx", Name: "b"},
	} {
		j, err := s.StartExport(ctx, req)
		if err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		j = waitExportState(t, s, j.ID, func(j ExportJob) bool { return j.State == StateFailed })
		if !strings.Contains(j.Error, ": remote weights") {
			t.Fatalf("%+v: the exporter's input was not the checkpoint's copy: %q", req, j.Error)
		}
	}
	if _, err := s.RegisterCheckpoint(ctx, "m", "r1", "step-2.ckpt.pt"); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Fatalf("a checkpoint in neither place: %v", err)
	}
	if _, err := s.StartExport(ctx, ExportRequest{RunID: "r1", Checkpoint: "step-2.ckpt.pt", Format: "onnx", Name: "c"}); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Fatalf("exporting a checkpoint in neither place: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ckDir, "r1", "step-1.ckpt.pt")); !os.IsNotExist(err) {
		t.Fatalf("the checkpoint directory got a file: %v", err)
	}
}
