package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/replica"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/testmodels"
)

// addModelFile registers a copy of a reference model file as the next
// version of name.
func addModelFile(t *testing.T, s *Service, name, src string) *Version {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := s.TempFile()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.Write(b); err != nil {
		t.Fatal(err)
	}
	tmp.Close()
	v, err := s.Upload(context.Background(), name, tmp.Name(), filepath.Base(src))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSharedServerReplicas: two dashboard replicas on one database (one
// host here). The shared server belongs to the replica that started it:
// the other's shared deploy is refused with *replica.NotOwnerError (the API
// forwards it to the owner). When the owner leaves, the other takes the
// server over at its sweep, adopting the running process, and deploys to
// it.
func TestSharedServerReplicas(t *testing.T) {
	bin := testmodels.FWBinary(t)
	models := testmodels.Dir(t)
	ctx := context.Background()
	dir := t.TempDir()
	st := openTestStore(t, store.Config{Dir: filepath.Join(dir, "db")})
	newReplica := func(id string) (*Service, *replica.Member) {
		m := replica.New(st, replica.Info{ID: id, Host: "h1", PID: os.Getpid(), URL: "http://" + id}, 30*time.Second, nil)
		if err := m.Join(ctx); err != nil {
			t.Fatal(err)
		}
		s, err := New(ctx, st, Config{ExperimentDir: dir, CheckpointDir: dir, Executable: bin, Member: m, ReadyTimeout: 90 * time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s, m
	}
	a, am := newReplica("a")
	b, bm := newReplica("b")
	v1 := addModelFile(t, a, "mlp", filepath.Join(models, "digits_mlp.onnx"))
	v2 := addModelFile(t, a, "mlp", filepath.Join(models, "digits_mlp.int8-dynamic.onnx"))

	d1, err := a.Deploy(ctx, "mlp", DeployRequest{Version: []byte("1"), Target: TargetShared})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-d1.PID, syscall.SIGKILL) })
	if d1.Replica != "a" || d1.Version != v1.Version {
		t.Fatalf("deployment %+v", d1)
	}
	_, err = b.Deploy(ctx, "mlp", DeployRequest{Version: []byte("2"), Target: TargetShared})
	var noe *replica.NotOwnerError
	if !errors.As(err, &noe) || noe.Owner.ID != "a" || noe.Name != SharedLeasePrefix+"shared" {
		t.Fatalf("a shared deploy on the replica that does not run the shared server: %v, want NotOwnerError naming a", err)
	}
	if _, err := b.StopShared(ctx); !errors.As(err, &noe) {
		t.Fatalf("stopping the shared server from b: %v", err)
	}

	am.Leave(ctx) // a stops gracefully: b takes over at its next sweep
	bm.Sweep(ctx)
	srv, err := b.SharedStatus(ctx)
	if err != nil || srv.Replica != "b" || srv.PID != d1.PID || !srv.Healthy || len(srv.Versions) != 1 || srv.Versions[0].State != "READY" {
		t.Fatalf("after b's takeover: %+v %v (want the same process %d, owned by b, v1 READY)", srv, err, d1.PID)
	}
	d2, err := b.Deploy(ctx, "mlp", DeployRequest{Version: []byte("2"), Target: TargetShared})
	if err != nil || d2.PID != d1.PID || d2.Version != v2.Version {
		t.Fatalf("b deploys to the adopted shared server: %+v %v", d2, err)
	}
	srv, _ = b.SharedStatus(ctx)
	if len(srv.Versions) != 2 || srv.Versions[0].State != "READY" || srv.Versions[1].State != "READY" {
		t.Fatalf("versions: %+v", srv.Versions)
	}
	if _, err := b.StopShared(ctx); err != nil {
		t.Fatal(err)
	}
	if alive(d1.PID) {
		t.Fatalf("the shared server %d outlives its stop", d1.PID)
	}
}
