package mlflow

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/testmoto"
)

// TestLocalDir: the artifact locations honoured are absolute, clean local
// directories (a path or a file:// URI without a host); everything else is
// refused, so no client-chosen location climbs or names another machine.
func TestLocalDir(t *testing.T) {
	for loc, want := range map[string]string{
		"/data/mlruns":            "/data/mlruns",
		"/data/mlruns/":           "/data/mlruns",
		"file:///data/mlruns/1":   "/data/mlruns/1",
		"file://localhost/data/x": "/data/x",
		"file:///data/a%20b":      "/data/a b",
		"/":                       "/",
		"relative":                "",
		"./x":                     "",
		"/a/../b":                 "",
		"/a/./b":                  "",
		"file:///a/../../etc":     "",
		"file://otherhost/x":      "",
		"file:relative":           "",
		"file:///x?y=1":           "",
		"s3://bucket/p":           "",
		"mlflow-artifacts:/1":     "",
		"hdfs:/x":                 "",
		"/a\\b":                   "",
		"/a\x00b":                 "",
		"":                        "",
		"file:///data/%2e%2e/etc": "",
	} {
		got, ok := localDir(loc)
		if want == "" && ok {
			t.Errorf("localDir(%q) = %q, want refused", loc, got)
		}
		if want != "" && (!ok || got != want) {
			t.Errorf("localDir(%q) = %q %v, want %q", loc, got, ok, want)
		}
	}
}

// TestRootKey: the server reads only inside its default artifact root, a
// local directory or a bucket's prefix; a location is compared in one
// canonical form (a path or a file:// URI of it; s3://bucket/clean/path).
func TestRootKey(t *testing.T) {
	root := t.TempDir()
	local := New(t.Context(), nil, Config{DefaultArtifactRoot: "file://" + root}, nil)
	bucket := New(t.Context(), nil, Config{DefaultArtifactRoot: "s3://b/team/ml", ArtifactRoot: &blob.Dir{}}, nil)
	for _, c := range []struct {
		s    *Server
		loc  string
		want string // "-": outside
	}{
		{local, root, ""},
		{local, "file://" + root + "/1", "1"},
		{local, root + "/1/r/a", "1/r/a"},
		{local, root + "x/1", "-"},
		{local, "/etc", "-"},
		{local, root + "/../etc", "-"},
		{local, "", "-"},
		{local, "s3://b/team/ml/1", "-"},
		{bucket, "s3://b/team/ml", ""},
		{bucket, "s3://b/team/ml/", ""},
		{bucket, "s3://b/team/ml/7/r/artifacts", "7/r/artifacts"},
		{bucket, "s3://b/team/mlx/7", "-"},
		{bucket, "s3://other/team/ml/7", "-"},
		{bucket, "s3://b/team/ml/../x", "-"},
		{bucket, "s3://b/team/ml/a//b", "-"},
		{bucket, "s3://b/team/ml/7?x=1", "-"},
		{bucket, "/team/ml/7", "-"},
	} {
		got, ok := c.s.rootKey(c.loc)
		if c.want == "-" && ok {
			t.Errorf("rootKey(%q) = %q, want outside", c.loc, got)
		}
		if c.want != "-" && (!ok || got != c.want) {
			t.Errorf("rootKey(%q) = %q %v, want %q", c.loc, got, ok, c.want)
		}
	}
	// What an experiment may name: any local directory; s3:// only inside an s3:// root.
	for loc, want := range map[string]bool{"/data/x": true, "s3://b/team/ml/x": false, "hdfs:/x": false} {
		if local.honoured(loc) != want {
			t.Errorf("local root: honoured(%q) = %v", loc, !want)
		}
	}
	for loc, want := range map[string]bool{"s3://b/team/ml/x": true, "s3://b/other": false, "s3://c/team/ml/x": false} {
		if bucket.honoured(loc) != want {
			t.Errorf("bucket root: honoured(%q) = %v", loc, !want)
		}
	}
}

// TestClientWrittenArtifacts: with --default-artifact-root, MLflow's
// client writes a run's files itself, into a directory or a bucket; the
// dashboard lists, serves and uploads them there (MLflow's artifacts/list,
// get-artifact, upload-artifact, a registered version's files), and takes
// an s3:// artifact_location only inside its bucket's root. The bucket is
// moto's S3 server (make test-s3), the directory a temporary one.
func TestClientWrittenArtifacts(t *testing.T) {
	roots := map[string]func(t *testing.T) (string, blob.Store){
		"dir": func(t *testing.T) (string, blob.Store) {
			d := t.TempDir()
			s, err := blob.NewDir(d)
			if err != nil {
				t.Fatal(err)
			}
			return "file://" + d, s
		},
		"s3": func(t *testing.T) (string, blob.Store) {
			m := testmoto.Start(t)
			uri := "s3://" + m.Bucket + "/team/ml"
			s, err := blob.Open(uri, "", blob.S3Config{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, PathStyle: true})
			if err != nil {
				t.Fatal(err)
			}
			return uri, s
		},
	}
	for name, open := range roots {
		t.Run(name, func(t *testing.T) {
			uri, root := open(t)
			e := newEnv(t, Config{DefaultArtifactRoot: uri, ArtifactRoot: root})
			ctx := context.Background()
			exp := e.ok("POST", api+"experiments/create", map[string]any{"name": "client-written"})["experiment_id"].(string)
			got := e.ok("GET", api+"experiments/get?experiment_id="+exp, nil)["experiment"].(map[string]any)
			if got["artifact_location"] != uri+"/"+exp {
				t.Fatalf("location %v, want %s/%s", got["artifact_location"], uri, exp)
			}
			run := e.newRun(exp)
			info := e.ok("GET", api+"runs/get?run_id="+run, nil)["run"].(map[string]any)["info"].(map[string]any)
			if want := uri + "/" + exp + "/" + run + "/artifacts"; info["artifact_uri"] != want {
				t.Fatalf("artifact_uri %v, want %s", info["artifact_uri"], want)
			}
			// What MLflow's client writes itself (its local or S3 artifact repository).
			for k, v := range map[string]string{"model/MLmodel": "flavors: {}", "model/model.onnx": "onnx", "notes.txt": "hi"} {
				key := exp + "/" + run + "/artifacts/" + k
				if err := root.Put(ctx, key, strings.NewReader(v), int64(len(v))); err != nil {
					t.Fatal(err)
				}
			}
			files := e.ok("GET", api+"artifacts/list?run_id="+run, nil)["files"].([]any)
			if len(files) != 2 || files[0].(map[string]any)["path"] != "model" || files[1].(map[string]any)["path"] != "notes.txt" {
				t.Fatalf("listing %v", files)
			}
			sub := e.ok("GET", api+"artifacts/list?run_id="+run+"&path=model", nil)["files"].([]any)
			if len(sub) != 2 || sub[1].(map[string]any)["path"] != "model/model.onnx" {
				t.Fatalf("listing model/: %v", sub)
			}
			if _, out := e.call("GET", "/get-artifact?run_id="+run+"&path=model/model.onnx", nil); out["raw"] != "onnx" {
				t.Fatalf("get-artifact: %v", out)
			}
			if code, _ := e.call("GET", "/get-artifact?run_id="+run+"&path=none", nil); code != 404 {
				t.Fatalf("a missing file: %d", code)
			}
			e.ok("POST", "/ajax-api/2.0/mlflow/upload-artifact?run_uuid="+run+"&path=up.txt", "uploaded")
			if r, _, err := root.Get(ctx, exp+"/"+run+"/artifacts/up.txt"); err != nil {
				t.Fatalf("the upload is not in the root: %v", err)
			} else {
				r.Close()
			}
			// A registered version whose source is the run's model directory.
			e.withRegistry()
			e.ok("POST", api+"registered-models/create", map[string]any{"name": "m"})
			e.ok("POST", api+"model-versions/create", map[string]any{"name": "m", "source": info["artifact_uri"].(string) + "/model", "run_id": run})
			if _, out := e.call("GET", "/model-versions/get-artifact?name=m&version=1&path=MLmodel", nil); out["raw"] != "flavors: {}" {
				t.Fatalf("a version's file: %v", out)
			}
			// An artifact_location inside the root is taken; an s3:// one
			// elsewhere is refused with the reason.
			e.ok("POST", api+"experiments/create", map[string]any{"name": "inside", "artifact_location": uri + "/custom"})
			e.fails(400, codeInvalidParameter, "POST", api+"experiments/create", map[string]any{"name": "outside", "artifact_location": "s3://another-bucket/x"})
		})
	}
}

// With an artifacts destination (MLflow's --artifacts-destination), the
// proxy keeps what MLflow's clients upload in MLflow's own layout, in a
// directory or a bucket: a run's files under <experiment>/<run>/artifacts,
// other paths as given. Runs keep mlflow-artifacts:/ URIs; a file fw's own
// API stored for the run is listed and served beside them.
func TestArtifactsDestination(t *testing.T) {
	dests := map[string]func(t *testing.T) blob.Store{
		"dir": func(t *testing.T) blob.Store {
			s, err := blob.NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"s3": func(t *testing.T) blob.Store {
			m := testmoto.Start(t)
			s, err := blob.Open("s3://"+m.Bucket+"/mlartifacts", "", blob.S3Config{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, PathStyle: true})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	for name, open := range dests {
		t.Run(name, func(t *testing.T) {
			dest := open(t)
			e := newEnv(t, Config{ArtifactsDestination: dest})
			ctx := context.Background()
			read := func(key string) string {
				t.Helper()
				r, _, err := dest.Get(ctx, key)
				if err != nil {
					t.Fatalf("%s is not in the destination: %v", key, err)
				}
				defer r.Close()
				b, _ := io.ReadAll(r)
				return string(b)
			}
			exp := e.ok("POST", api+"experiments/create", map[string]any{"name": "proxied"})["experiment_id"].(string)
			run := e.newRun(exp)
			info := e.ok("GET", api+"runs/get?run_id="+run, nil)["run"].(map[string]any)["info"].(map[string]any)
			if want := "mlflow-artifacts:/" + exp + "/" + run + "/artifacts"; info["artifact_uri"] != want {
				t.Fatalf("artifact_uri %v, want %s", info["artifact_uri"], want)
			}
			const proxy = "/api/2.0/mlflow-artifacts/artifacts/"
			runDir := exp + "/" + run + "/artifacts"
			e.ok("PUT", proxy+runDir+"/model/MLmodel", "flavors: {}")
			e.ok("PUT", proxy+runDir+"/./notes.txt", "hi")
			e.ok("POST", "/ajax-api/2.0/mlflow/upload-artifact?run_uuid="+run+"&path=up.txt", "uploaded")
			for key, want := range map[string]string{runDir + "/model/MLmodel": "flavors: {}", runDir + "/notes.txt": "hi", runDir + "/up.txt": "uploaded"} {
				if got := read(key); got != want {
					t.Fatalf("%s holds %q, want %q", key, got, want)
				}
			}
			// A file fw's own API stored for the run (its artifact storage and event).
			if err := os.MkdirAll(filepath.Join(e.art, run), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(e.art, run, "fw.txt"), []byte("fw"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := e.st.Apply(ctx, []store.Event{{Type: store.EventArtifact, RunID: run, Writer: "sdk", Seq: 1, Path: "fw.txt", Size: store.Ptr(int64(2))}}); err != nil {
				t.Fatal(err)
			}
			names := func(files []any) string {
				var out []string
				for _, f := range files {
					out = append(out, f.(map[string]any)["path"].(string))
				}
				return strings.Join(out, ",")
			}
			if got := names(e.ok("GET", api+"artifacts/list?run_id="+run, nil)["files"].([]any)); got != "fw.txt,model,notes.txt,up.txt" {
				t.Fatalf("artifacts/list: %s", got)
			}
			if got := names(e.ok("GET", proxy[:len(proxy)-1]+"?path="+runDir, nil)["files"].([]any)); got != "fw.txt,model,notes.txt,up.txt" {
				t.Fatalf("the proxy's listing: %s", got)
			}
			if got := names(e.ok("GET", api+"artifacts/list?run_id="+run+"&path=model", nil)["files"].([]any)); got != "model/MLmodel" {
				t.Fatalf("artifacts/list model: %s", got)
			}
			for p, want := range map[string]string{"model/MLmodel": "flavors: {}", "fw.txt": "fw"} {
				if _, out := e.call("GET", "/get-artifact?run_id="+run+"&path="+p, nil); out["raw"] != want {
					t.Fatalf("get-artifact %s: %v", p, out)
				}
				if _, out := e.call("GET", proxy+runDir+"/"+p, nil); out["raw"] != want {
					t.Fatalf("the proxy's download of %s: %v", p, out)
				}
			}
			if code, _ := e.call("GET", "/get-artifact?run_id="+run+"&path=none", nil); code != 404 {
				t.Fatalf("a missing file: %d", code)
			}
			// fw's run page sees the destination's files.
			files, from, prefix, ok, err := e.srv.ClientFiles(ctx, run, true)
			if err != nil || !ok || from != dest || prefix != runDir || len(files) != 3 {
				t.Fatalf("ClientFiles: %v %v %v %q %v", files, ok, err, prefix, from)
			}
			// Any other path is stored as given, listed level by level.
			e.ok("PUT", proxy+"free/a.txt", "0")
			e.ok("PUT", proxy+"free/dir/b.txt", "1")
			if got := read("free/dir/b.txt"); got != "1" {
				t.Fatalf("free/dir/b.txt holds %q", got)
			}
			if _, out := e.call("GET", proxy+"free/a.txt", nil); out["raw"] != "0" {
				t.Fatalf("a free file: %v", out)
			}
			listing := e.ok("GET", proxy[:len(proxy)-1]+"?path=free", nil)["files"].([]any)
			if got := names(listing); got != "a.txt,dir" || listing[0].(map[string]any)["file_size"] != float64(1) || listing[1].(map[string]any)["is_dir"] != true {
				t.Fatalf("listing free/: %v", listing)
			}
			if got := names(e.ok("GET", proxy[:len(proxy)-1], nil)["files"].([]any)); got != exp+",free" {
				t.Fatalf("listing the top: %s", got)
			}
			if code, _ := e.call("GET", proxy+"free/none.txt", nil); code != 404 {
				t.Fatalf("a missing free file: %d", code)
			}
			// A free file the proxy stored in fw's storage before the
			// destination was set is listed and served beside it.
			before := New(context.Background(), e.st, Config{ArtifactDir: e.art}, e.srv.log)
			old := &env{t: t, st: e.st, srv: before, art: e.art}
			old.ok("PUT", proxy+"free/old.txt", "before")
			if got := names(e.ok("GET", proxy[:len(proxy)-1]+"?path=free", nil)["files"].([]any)); got != "a.txt,dir,old.txt" {
				t.Fatalf("listing free/ with an earlier file: %s", got)
			}
			if _, out := e.call("GET", proxy+"free/old.txt", nil); out["raw"] != "before" {
				t.Fatalf("an earlier free file: %v", out)
			}
			if code, _ := e.call("GET", proxy+"free/../../etc/passwd", nil); code != 400 && code != 404 {
				t.Fatalf("a path climbing out: %d", code)
			}
		})
	}
}
