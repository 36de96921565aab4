package jobs

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/store"
)

// TestForkFromCheckpointInObjectStorage: a checkpoint written on another
// host (not under this dashboard's checkpoint directory; its copy in
// object storage, a directory store standing in for the bucket here) is
// fetched and handed to the job as --resume-from; one in neither place is
// a 404 before anything starts. The job's environment says to upload its
// files (FW_UPLOAD_FILES=1), as it does on every executor with a bucket.
func TestForkFromCheckpointInObjectStorage(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Dir: filepath.Join(dir, "experiments")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Apply(ctx, []store.Event{
		{Type: store.EventRunStart, RunID: "p1", Writer: "w", Seq: 1, Experiment: "e"},
		{Type: store.EventCheckpoint, RunID: "p1", Writer: "w", Seq: 2, Path: "step-1.ckpt.pt", Step: store.Ptr(int64(1))},
		{Type: store.EventCheckpoint, RunID: "p1", Writer: "w", Seq: 3, Path: "step-2.ckpt.pt", Step: store.Ptr(int64(2))},
		{Type: store.EventRunEnd, RunID: "p1", Writer: "w", Seq: 4, Status: "finished"},
	}); err != nil {
		t.Fatal(err)
	}
	bucket, err := blob.NewDir(filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	if err := bucket.Put(ctx, "p1/step-1.ckpt.pt", strings.NewReader("remote weights"), 14); err != nil {
		t.Fatal(err)
	}
	py := filepath.Join(dir, "python")
	script := "#!/bin/sh\necho \"upload: $FW_UPLOAD_FILES\"\nwhile [ $# -gt 0 ]; do if [ \"$1\" = --resume-from ]; then echo \"resumed: $(cat \"$2\")\"; fi; shift; done\n"
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	m := New(st, []Recipe{{Name: "show", Module: "show"}}, Config{Python: py, WorkDir: dir, ExperimentDir: filepath.Join(dir, "experiments"),
		CheckpointDir: filepath.Join(dir, "checkpoints"), Checkpoints: bucket}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer m.Shutdown(ctx)
	info, err := m.Start(ctx, StartRequest{Recipe: "show", ForkFrom: &CheckpointRef{RunID: "p1", Checkpoint: "step-1.ckpt.pt"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx, info.RunID); err != nil {
		t.Fatal(err)
	}
	lines, err := st.Logs(ctx, info.RunID, store.LogQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	found, upload := false, false
	for _, l := range lines {
		found = found || strings.Contains(l.Line, "resumed: remote weights")
		upload = upload || strings.Contains(l.Line, "upload: 1")
	}
	if !upload {
		t.Fatalf("the job's environment lacks FW_UPLOAD_FILES=1: %+v", lines)
	}
	if !found {
		t.Fatalf("the job did not get the checkpoint's copy (resume_from %s): %+v", info.ResumeFrom, lines)
	}
	if _, err := m.Start(ctx, StartRequest{Recipe: "show", ForkFrom: &CheckpointRef{RunID: "p1", Checkpoint: "step-2.ckpt.pt"}}); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Fatalf("a checkpoint in neither place: %v", err)
	}
}
