package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/mlflow"
	"github.com/fw-serve/fw/dashboard/store"
)

// startFilesServer serves the real router over st on 127.0.0.1 with cfg,
// MLflow's API mounted beside it over the same artifacts (as cmd/fw does).
func startFilesServer(t *testing.T, st store.Store, cfg Config) string {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Mounts = append(cfg.Mounts, mlflow.New(context.Background(), st, mlflow.Config{Artifacts: cfg.Artifacts, ArtifactDir: cfg.ArtifactDir, UploadDir: cfg.UploadDir, MaxArtifactBytes: cfg.MaxArtifactBytes}, log))
	srv := New(context.Background(), st, cfg, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &fasthttp.Server{Handler: srv.Handler, StreamRequestBody: true, MaxRequestBodySize: DefaultMaxBodyBytes}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Shutdown() })
	return "http://" + ln.Addr().String()
}

// fetch sends a request and returns the status, the body and the headers.
func fetch(t *testing.T, method, url, body string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestRunFilesThroughArtifactStore: two dashboards on one database, each
// with its own artifact and checkpoint directories and no directory in
// common, their artifact store the same shared store first (a directory
// standing in for the bucket here; cmd/fw's TestReplicasS3 runs this on
// moto's S3 server) and their own directory second, their checkpoints
// their own directory first and the shared store second, as `fw
// dashboard` sets them up with FW_ARTIFACT_URI=s3://...: an artifact
// uploaded through MLflow's artifact API on A lands in the shared store,
// and B lists and downloads it (fw's download and MLflow's); an artifact a
// training process wrote into A's directory (and nobody copied) downloads
// on A only; a checkpoint in the shared store downloads on B; paths, sizes
// and errors keep their rules and shapes; deleting the run on B deletes
// its objects.
func TestRunFilesThroughArtifactStore(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(context.Background(), store.Config{Dir: filepath.Join(dir, "db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	bucket, err := blob.NewDir(filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	shared, err := blob.Sub(bucket, "artifacts")
	if err != nil {
		t.Fatal(err)
	}
	sharedCk, err := blob.Sub(bucket, "checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	replica := func(name string) (string, string) {
		art, ck := filepath.Join(dir, name, "artifacts"), filepath.Join(dir, name, "checkpoints")
		local, err := blob.NewDir(art)
		if err != nil {
			t.Fatal(err)
		}
		localCk, err := blob.NewDir(ck)
		if err != nil {
			t.Fatal(err)
		}
		return startFilesServer(t, st, Config{ArtifactDir: art, Artifacts: blob.Layered(shared, local), CheckpointDir: ck, Checkpoints: blob.Layered(localCk, sharedCk), MaxArtifactBytes: 1024}), art
	}
	a, aDir := replica("a")
	b, _ := replica("b")
	ingest(t, a, `[`+runStart("r1", "files", `{}`)+`]`)

	// Uploaded on A through MLflow's artifact API: in the shared store,
	// not in A's directory.
	put := a + "/api/2.0/mlflow-artifacts/artifacts/0/r1/artifacts/"
	if code, body, _ := fetch(t, "PUT", put+"plots/loss.png", "png!"); code != 200 {
		t.Fatalf("upload on A: %d %s", code, body)
	}
	if r, _, err := bucket.Get(context.Background(), "artifacts/r1/plots/loss.png"); err != nil {
		t.Fatalf("the upload is not in the shared store: %v", err)
	} else {
		r.Close()
	}
	if _, err := os.Stat(filepath.Join(aDir, "r1", "plots", "loss.png")); !os.IsNotExist(err) {
		t.Fatalf("the upload went to A's own directory: %v", err)
	}
	if ents, _ := os.ReadDir(aDir); len(ents) != 0 {
		t.Fatalf("the upload left files in A's directory: %v", ents)
	}

	// Listed and downloaded on B.
	if code, out := doJSON(t, "GET", b+"/api/runs/r1/artifacts", ""); code != 200 || len(out["artifacts"].([]any)) != 1 {
		t.Fatalf("artifacts on B: %d %v", code, out)
	}
	for _, u := range []string{b + "/api/runs/r1/download?kind=artifact&path=plots/loss.png", b + "/api/2.0/mlflow-artifacts/artifacts/0/r1/artifacts/plots/loss.png"} {
		code, body, h := fetch(t, "GET", u, "")
		if code != 200 || body != "png!" || !strings.HasPrefix(h.Get("Content-Disposition"), "attachment") {
			t.Fatalf("GET %s: %d %q %v", u, code, body, h)
		}
		if code, body, h := fetch(t, "HEAD", u, ""); code != 200 || body != "" || h.Get("Content-Length") != "4" {
			t.Fatalf("HEAD %s: %d %q %v", u, code, body, h)
		}
	}
	if code, out := doJSON(t, "GET", b+"/api/2.0/mlflow-artifacts/artifacts?path=0/r1/artifacts/plots", ""); code != 200 ||
		len(out["files"].([]any)) != 1 || out["files"].([]any)[0].(map[string]any)["path"] != "loss.png" {
		t.Fatalf("MLflow's list on B: %d %v", code, out)
	}

	// A file a training process wrote into A's directory (fw.track's
	// run.artifact): served by A from its directory; B has no copy.
	if err := os.MkdirAll(filepath.Join(aDir, "r1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(aDir, "r1", "sdk.txt"), []byte("local"), 0o644); err != nil {
		t.Fatal(err)
	}
	ingest(t, a, `[{"type":"artifact","run_id":"r1","seq":2,"path":"sdk.txt","size":5}]`)
	if code, body, _ := fetch(t, "GET", a+"/api/runs/r1/download?kind=artifact&path=sdk.txt", ""); code != 200 || body != "local" {
		t.Fatalf("A's own file on A: %d %q", code, body)
	}
	if code, out := doJSON(t, "GET", b+"/api/runs/r1/download?kind=artifact&path=sdk.txt", ""); code != 404 || errCode(t, out) != CodeNotFound ||
		!strings.Contains(out["error"].(map[string]any)["message"].(string), "gone") {
		t.Fatalf("A's own file on B: %d %v", code, out)
	}

	// A checkpoint written on A's host and copied into the shared store
	// (runfiles.Mirror does that in `fw dashboard`) downloads on B.
	if err := sharedCk.Put(context.Background(), "r1/step-1.ckpt.pt", strings.NewReader("weights"), 7); err != nil {
		t.Fatal(err)
	}
	ingest(t, a, `[{"type":"checkpoint","run_id":"r1","seq":3,"step":1,"path":"step-1.ckpt.pt"}]`)
	if code, body, _ := fetch(t, "GET", b+"/api/runs/r1/download?kind=checkpoint&path=step-1.ckpt.pt", ""); code != 200 || body != "weights" {
		t.Fatalf("a checkpoint from the shared store on B: %d %q", code, body)
	}

	// The rules of paths and sizes, in each API's error shape.
	for _, u := range []string{"/api/runs/r1/download?kind=artifact&path=..%2F..%2Fdb%2Fexperiments.db", "/api/runs/r1/download?kind=artifact&path=never.txt"} {
		if code, out := doJSON(t, "GET", b+u, ""); code != 404 || errCode(t, out) != CodeNotFound {
			t.Fatalf("GET %s: %d %v", u, code, out)
		}
	}
	mlflowErr := func(method, u, body string, status int, code string) {
		t.Helper()
		got, out := doJSON(t, method, u, body)
		if got != status || out["error_code"] != code || out["message"] == "" {
			t.Fatalf("%s %s: want %d %s, got %d %v", method, u, status, code, got, out)
		}
	}
	// A '..' in the URL path is refused (fasthttp would fold a/../../x
	// into another file); nothing is stored.
	mlflowErr("PUT", put+"a/../../x", "x", 400, "INVALID_PARAMETER_VALUE")
	if _, err := bucket.Stat(context.Background(), "artifacts/_mlflow-artifacts/0/r1/x"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("a climbing path was stored: %v", err)
	}
	mlflowErr("GET", b+"/api/2.0/mlflow-artifacts/artifacts/0/r1/artifacts/x", "", 404, "RESOURCE_DOES_NOT_EXIST")
	mlflowErr("PUT", put+"big.bin", strings.Repeat("x", 1025), 413, "RESOURCE_LIMIT_EXCEEDED")
	mlflowErr("PUT", a+"/api/2.0/mlflow-artifacts/artifacts/0/nope/artifacts/x", "x", 404, "RESOURCE_DOES_NOT_EXIST")
	mlflowErr("GET", b+"/api/2.0/mlflow-artifacts/artifacts/0/r1/artifacts/never.txt", "", 404, "RESOURCE_DOES_NOT_EXIST")
	if _, err := bucket.Stat(context.Background(), "artifacts/r1/big.bin"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("a refused upload was stored: %v", err)
	}

	// Deleting the run on B deletes its objects.
	if code, out := doJSON(t, "DELETE", b+"/api/runs/r1", ""); code != 200 {
		t.Fatalf("delete the run: %d %v", code, out)
	}
	for _, k := range []string{"artifacts/r1/plots/loss.png", "checkpoints/r1/step-1.ckpt.pt"} {
		if _, err := bucket.Stat(context.Background(), k); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("the run's object %s after its delete: %v", k, err)
		}
	}
}

// TestDeleteExperimentDeletesArtifactObjects: deleting an experiment
// deletes the objects of all its runs from the artifact store, and only
// theirs.
func TestDeleteExperimentDeletesArtifactObjects(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(context.Background(), store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	bucket, err := blob.NewDir(filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	u := startFilesServer(t, st, Config{ArtifactDir: filepath.Join(dir, "artifacts"), Artifacts: bucket})
	ingest(t, u, `[`+runStart("r1", "gone", `{}`)+`,`+runStart("r2", "gone", `{}`)+`,`+runStart("r3", "kept", `{}`)+`]`)
	for _, r := range []string{"r1", "r2", "r3"} {
		if code, body, _ := fetch(t, "PUT", u+"/api/2.0/mlflow-artifacts/artifacts/0/"+r+"/artifacts/f.txt", r); code != 200 {
			t.Fatalf("upload to %s: %d %s", r, code, body)
		}
	}
	if code, out := doJSON(t, "DELETE", u+"/api/experiments/gone", ""); code != 200 {
		t.Fatalf("delete the experiment: %d %v", code, out)
	}
	for r, kept := range map[string]bool{"r1": false, "r2": false, "r3": true} {
		if _, err := bucket.Stat(context.Background(), r+"/f.txt"); (err == nil) != kept {
			t.Errorf("%s's object after deleting experiment gone: %v", r, err)
		}
	}
}
