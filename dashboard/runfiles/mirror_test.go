package runfiles

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/testleak"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) { testleak.Main(m) }

func dir(t *testing.T, root string) *blob.Dir {
	t.Helper()
	d, err := blob.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls until the object under key is in s with body, or fails
// after a generous deadline (the mirror works in the background).
func waitFor(t *testing.T, s blob.Store, key, body string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, _, err := s.Get(context.Background(), key)
		if err == nil {
			b, _ := io.ReadAll(r)
			r.Close()
			if string(b) == body {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %s (last: %v)", key, s, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMirror: the files of checkpoint and artifact events stored through
// the wrapped store are copied from this host's directories into the
// bucket's parts (directories standing in for the bucket; the S3 path is
// cmd/fw's TestReplicasS3); a file not on this host, a symbolic link out
// of the directory, a refused event and an artifact MLflow's API uploaded
// are not copied.
func TestMirror(t *testing.T) {
	root := t.TempDir()
	ckptDir, artDir := filepath.Join(root, "ckpt"), filepath.Join(root, "art")
	bucket := dir(t, filepath.Join(root, "bucket"))
	ckpts, _ := blob.Sub(bucket, "checkpoints")
	arts, _ := blob.Sub(bucket, "artifacts")
	m := New(Config{LocalCheckpoints: dir(t, ckptDir), LocalArtifacts: dir(t, artDir), Checkpoints: ckpts, Artifacts: arts, APIWriter: "mlflow"})
	st, err := store.Open(context.Background(), store.Config{Dir: filepath.Join(root, "db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ws := m.Wrap(st)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	write(t, filepath.Join(ckptDir, "r1", "step-1.ckpt.pt"), "weights")
	write(t, filepath.Join(artDir, "r1", "plots", "loss.png"), "png!")
	write(t, filepath.Join(artDir, "r1", "by-mlflow.txt"), "local copy")
	secret := filepath.Join(root, "secret.txt")
	write(t, secret, "do not upload")
	if err := os.Symlink(secret, filepath.Join(ckptDir, "r1", "link.pt")); err != nil {
		t.Fatal(err)
	}
	seq := int64(0)
	ev := func(e store.Event) store.Event {
		seq++
		e.RunID, e.Seq = "r1", seq
		if e.Writer == "" {
			e.Writer = "w"
		}
		return e
	}
	res, err := ws.Apply(context.Background(), []store.Event{
		ev(store.Event{Type: store.EventRunStart, Experiment: "e"}),
		ev(store.Event{Type: store.EventCheckpoint, Path: "link.pt", Step: store.Ptr(int64(2))}),
		ev(store.Event{Type: store.EventCheckpoint, Path: "elsewhere.pt", Step: store.Ptr(int64(3))}), // written on another host
		ev(store.Event{Type: store.EventArtifact, Path: "by-mlflow.txt", Size: store.Ptr(int64(3)), Writer: "mlflow"}),
		ev(store.Event{Type: store.EventCheckpoint, Path: "step-1.ckpt.pt", Step: store.Ptr(int64(1))}),
		ev(store.Event{Type: store.EventArtifact, Path: "plots/loss.png", Size: store.Ptr(int64(4))}),
	})
	if err != nil || len(res.Errors) != 0 {
		t.Fatalf("apply: %+v %v", res, err)
	}
	// In order: once the last one is there, the earlier ones were handled.
	waitFor(t, ckpts, "r1/step-1.ckpt.pt", "weights")
	waitFor(t, arts, "r1/plots/loss.png", "png!")
	for _, k := range []string{"checkpoints/r1/link.pt", "checkpoints/r1/elsewhere.pt", "artifacts/r1/by-mlflow.txt"} {
		if _, err := bucket.Stat(context.Background(), k); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("%s was uploaded: %v", k, err)
		}
	}

	// A refused event (no such run) offers nothing.
	write(t, filepath.Join(ckptDir, "r9", "x.pt"), "x")
	res, err = ws.Apply(context.Background(), []store.Event{{Type: store.EventCheckpoint, RunID: "r9", Writer: "w", Seq: 1, Path: "x.pt", Step: store.Ptr(int64(1))}})
	if err != nil || len(res.Errors) != 1 {
		t.Fatalf("apply to an unknown run: %+v %v", res, err)
	}
	write(t, filepath.Join(ckptDir, "r1", "step-5.ckpt.pt"), "five")
	if _, err := ws.Apply(context.Background(), []store.Event{ev(store.Event{Type: store.EventCheckpoint, Path: "step-5.ckpt.pt", Step: store.Ptr(int64(5))})}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ckpts, "r1/step-5.ckpt.pt", "five")
	if _, err := bucket.Stat(context.Background(), "checkpoints/r9/x.pt"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("a refused event's file was uploaded: %v", err)
	}
}

// TestOfferNeverBlocks: with the queue full (no Run), Offer drops instead
// of waiting.
func TestOfferNeverBlocks(t *testing.T) {
	m := New(Config{Queue: 1})
	evs := []store.Event{{Type: store.EventCheckpoint, RunID: "r1", Path: "a.pt"}, {Type: store.EventCheckpoint, RunID: "r1", Path: "b.pt"}, {Type: store.EventArtifact, RunID: "r1", Path: "c"}}
	m.Offer(evs, nil)
	if len(m.queue) != 1 {
		t.Fatalf("queued %d, want 1", len(m.queue))
	}
}
