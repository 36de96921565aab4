package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/store"
)

// TestUploadRunFiles: two dashboards on one database set up as `fw
// dashboard` does with FW_ARTIFACT_URI=s3://... (a directory standing in
// for the bucket here; cmd/fw's TestReplicasS3 runs this on moto's S3
// server), with a token. A training process on another machine (its own
// checkpoint directory, which no dashboard sees) uploads a checkpoint and
// an artifact through A's PUT /api/runs/{id}/files: they land in the
// bucket under checkpoints/ and artifacts/ (not in A's directories), and
// B, which never had the files, downloads both once the events name them.
// Hostile requests (no token, traversal, bad kind, no path, unknown run,
// oversize by Content-Length and by a body longer than announced, wrong
// method) get their status in the JSON error shape, store nothing, and
// the server keeps answering. Without a bucket the upload lands in the
// dashboard's own checkpoint directory.
func TestUploadRunFiles(t *testing.T) {
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
	sharedArt, _ := blob.Sub(bucket, "artifacts")
	sharedCk, _ := blob.Sub(bucket, "checkpoints")
	const token = "s3cret"
	replica := func(name string) (string, string, string) {
		art, ck := filepath.Join(dir, name, "artifacts"), filepath.Join(dir, name, "checkpoints")
		local, err := blob.NewDir(art)
		if err != nil {
			t.Fatal(err)
		}
		localCk, err := blob.NewDir(ck)
		if err != nil {
			t.Fatal(err)
		}
		return startFilesServer(t, st, Config{Token: token, ArtifactDir: art, Artifacts: blob.Layered(sharedArt, local), CheckpointDir: ck,
			Checkpoints: blob.Layered(localCk, sharedCk), CheckpointUploads: sharedCk, MaxArtifactBytes: 1024}), art, ck
	}
	a, aArt, aCk := replica("a")
	b, _, _ := replica("b")
	send := func(method, url, body string, hdr map[string]string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		for k, v := range hdr {
			if v == "" {
				req.Header.Del(k)
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, decodeBody(t, resp)
	}
	if code, out := send("POST", a+"/api/ingest", `[`+runStart("r1", "files", `{}`)+`]`, map[string]string{"Content-Type": "application/json"}); code != 200 {
		t.Fatalf("ingest: %d %v", code, out)
	}

	// The process on the other host wrote these files into its own
	// checkpoint directory; it uploads them to A.
	files := a + "/api/runs/r1/files"
	if code, out := send("PUT", files+"?kind=checkpoint&path=step_1.pt", "weights", map[string]string{"Content-Type": "application/octet-stream"}); code != 200 ||
		out["path"] != "step_1.pt" || out["kind"] != "checkpoint" || out["size"] != float64(7) || out["run_id"] != "r1" {
		t.Fatalf("checkpoint upload: %d %v", code, out)
	}
	if code, out := send("PUT", files+"?kind=artifact&path=plots/loss.png", "png!", nil); code != 200 {
		t.Fatalf("artifact upload: %d %v", code, out)
	}
	for k, want := range map[string]string{"checkpoints/r1/step_1.pt": "weights", "artifacts/r1/plots/loss.png": "png!"} {
		r, _, err := bucket.Get(context.Background(), k)
		if err != nil {
			t.Fatalf("%s is not in the bucket: %v", k, err)
		}
		got := readAll(t, r)
		if got != want {
			t.Fatalf("%s: %q, want %q", k, got, want)
		}
	}
	for _, d := range []string{aArt, aCk} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Fatalf("the upload left files in A's directory %s: %v", d, ents)
		}
	}
	// The events (sent by the process after the upload, or before) name
	// the paths; B downloads both.
	if code, out := send("POST", a+"/api/ingest", `[{"type":"checkpoint","run_id":"r1","seq":2,"step":1,"path":"step_1.pt"},{"type":"artifact","run_id":"r1","seq":3,"path":"plots/loss.png","size":4}]`, nil); code != 200 {
		t.Fatalf("ingest the events: %d %v", code, out)
	}
	for u, want := range map[string]string{"kind=checkpoint&path=step_1.pt": "weights", "kind=artifact&path=plots/loss.png": "png!"} {
		req, _ := http.NewRequest("GET", b+"/api/runs/r1/download?"+u, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp.Body); resp.StatusCode != 200 || got != want {
			t.Fatalf("download on B %s: %d %q", u, resp.StatusCode, got)
		}
	}

	// Hostile and wrong requests: the status, the JSON shape, a message.
	cases := []struct {
		name, method, url, body string
		hdr                     map[string]string
		status                  int
		code                    string
	}{
		{"no token", "PUT", files + "?kind=checkpoint&path=x.pt", "x", map[string]string{"Authorization": ""}, 401, CodeUnauthorized},
		{"traversal", "PUT", files + "?kind=checkpoint&path=..%2F..%2Fdb%2Fexperiments.db", "x", nil, 400, CodeBadRequest},
		{"absolute", "PUT", files + "?kind=artifact&path=%2Fetc%2Fpasswd", "x", nil, 400, CodeBadRequest},
		{"backslash", "PUT", files + "?kind=artifact&path=a%5C..%5Cb", "x", nil, 400, CodeBadRequest},
		{"nul", "PUT", files + "?kind=artifact&path=a%00b", "x", nil, 400, CodeBadRequest},
		{"long path", "PUT", files + "?kind=artifact&path=" + strings.Repeat("a", 201), "x", nil, 400, CodeBadRequest},
		{"no path", "PUT", files + "?kind=artifact", "x", nil, 400, CodeBadRequest},
		{"bad kind", "PUT", files + "?kind=model&path=x.pt", "x", nil, 400, CodeBadRequest},
		{"no kind", "PUT", files + "?path=x.pt", "x", nil, 400, CodeBadRequest},
		{"unknown run", "PUT", a + "/api/runs/nope/files?kind=checkpoint&path=x.pt", "x", nil, 404, CodeNotFound},
		{"bad run id", "PUT", a + "/api/runs/..%2F..%2Fx/files?kind=checkpoint&path=x.pt", "x", nil, 404, CodeNotFound},
		{"oversize", "PUT", files + "?kind=checkpoint&path=big.pt", strings.Repeat("x", 1025), nil, 413, CodeTooLarge},
		{"wrong method", "POST", files + "?kind=checkpoint&path=x.pt", "x", nil, 405, CodeMethodNotAllowed},
	}
	for _, c := range cases {
		code, out := send(c.method, c.url, c.body, c.hdr)
		e, _ := out["error"].(map[string]any)
		if code != c.status || e == nil || e["code"] != c.code || e["message"] == "" {
			t.Errorf("%s: want %d %s, got %d %v", c.name, c.status, c.code, code, out)
		}
	}
	for _, k := range []string{"checkpoints/r1/big.pt", "checkpoints/r1/x.pt", "artifacts/r1/x.pt", "checkpoints/nope/x.pt"} {
		if _, err := bucket.Stat(context.Background(), k); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("a refused upload was stored as %s: %v", k, err)
		}
	}
	if code, out := send("GET", a+"/health", "", nil); code != 200 {
		t.Fatalf("A after the hostile requests: %d %v", code, out)
	}

	// Without a bucket: the dashboard's own checkpoint directory.
	ck := filepath.Join(dir, "solo", "checkpoints")
	solo := startFilesServer(t, st, Config{CheckpointDir: ck, ArtifactDir: filepath.Join(dir, "solo", "artifacts")})
	if code, out := send("PUT", solo+"/api/runs/r1/files?kind=checkpoint&path=sub/step_2.pt", "w2", nil); code != 200 {
		t.Fatalf("upload without a bucket: %d %v", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(ck, "r1", "sub", "step_2.pt")); err != nil || string(b) != "w2" {
		t.Fatalf("the checkpoint in the directory: %q %v", b, err)
	}
}

// decodeBody decodes a JSON object answer (an empty map for an empty body).
func decodeBody(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%d, not a JSON object: %q", resp.StatusCode, b)
		}
	}
	return out
}

// readAll reads and closes r.
func readAll(t *testing.T, r io.ReadCloser) string {
	t.Helper()
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
