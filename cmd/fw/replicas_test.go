package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/internal/testlog"
	"github.com/fw-serve/fw/internal/testmoto"
	"github.com/fw-serve/fw/internal/testpg"
)

// replicaDB gives the test its own schema on the throwaway PostgreSQL of
// scripts/pg-test.sh, or skips (fails with FW_REQUIRE_POSTGRES=1).
func replicaDB(t *testing.T) string {
	t.Helper()
	base := os.Getenv("FW_TEST_DATABASE_URL")
	if base == "" {
		if os.Getenv("FW_REQUIRE_POSTGRES") == "1" {
			t.Fatal("FW_REQUIRE_POSTGRES=1 but FW_TEST_DATABASE_URL is unset: run through scripts/pg-test.sh (make test-replicas)")
		}
		t.Skip("dashboard replicas need PostgreSQL: run through scripts/pg-test.sh (make test-replicas)")
	}
	return testpg.Schema(t, base)
}

// startReplica runs `fw dashboard` on db with the shared directory dir
// (experiment dir and checkpoints, as replicas on one file system share
// them), and waits for /health.
func startReplica(t *testing.T, db, dir string, args ...string) *proc {
	t.Helper()
	port := freePort(t)
	cmd := fwCmd(append([]string{"dashboard", "--port", strconv.Itoa(port), "--spool-interval", "200ms"}, args...)...)
	cmd.Env = append(cmd.Env, "FW_EXPERIMENT_DIR="+filepath.Join(dir, "exp"), "FW_CHECKPOINT_DIR="+filepath.Join(dir, "ckpt"),
		"FW_DASHBOARD_TOKEN=", "FW_DATABASE_URL="+db)
	out := &testlog.Buffer{}
	cmd.Stderr, cmd.Stdout = out, out
	return startProc(t, "fw dashboard", cmd, port, out, 60*time.Second)
}

// deployment returns the deployment id as dashboard url lists it.
func deployment(t *testing.T, url, id string) map[string]any {
	t.Helper()
	code, out := call(t, "GET", url+"/api/deployments", "", "", "")
	if code != 200 {
		t.Fatalf("deployments: %d %v", code, out)
	}
	for _, d := range out["deployments"].([]any) {
		if dm := d.(map[string]any); dm["id"] == id {
			return dm
		}
	}
	return nil
}

// TestReplicas runs two `fw dashboard` processes on one PostgreSQL and one
// shared directory, behind no proxy: events ingested through A reach a
// stream client of B in order (and a reconnect to A replays from B's
// cursor); a model registered on A is deployed from B, predicted through A
// and undeployed through A (forwarded to B, its owner); then A is killed
// with SIGKILL while it runs a training job and owns two deployments: B
// marks the job lost and its run failed, adopts the deployment whose
// process still answers and starts the other one again.
func TestReplicas(t *testing.T) {
	db := replicaDB(t)
	models := modelsDir(t)
	py := trainingPython(t)
	mod := t.TempDir()
	// A training job that runs until it is stopped (no SDK: only the
	// dashboard's capture of its output, so only a takeover ends its run).
	script := "import time\nfor i in range(600):\n    print('step', i, flush=True)\n    time.sleep(0.2)\n"
	if err := os.WriteFile(filepath.Join(mod, "fwtest_forever.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	recipes := filepath.Join(mod, "recipes.toml")
	if err := os.WriteFile(recipes, []byte("[recipes.forever]\nmodule = \"fwtest_forever\"\ndescription = \"prints until stopped\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FW_PYTHON", py)
	t.Setenv("PYTHONPATH", mod)
	t.Setenv("FW_SYSTEM_INTERVAL", "0")
	shared := t.TempDir()
	const ttl = 2 * time.Second
	flags := []string{"--lease-ttl", ttl.String(), "--recipes", recipes, "--stop-grace", "3s"}
	a := startReplica(t, db, shared, flags...)
	b := startReplica(t, db, shared, flags...)

	// Both are listed as replicas, alive.
	code, out := call(t, "GET", b.url+"/api/system/replicas", "", "", "")
	if code != 200 || len(out["replicas"].([]any)) != 2 {
		t.Fatalf("replicas: %d %v", code, out)
	}
	var aID string
	for _, r := range out["replicas"].([]any) {
		rm := r.(map[string]any)
		if rm["alive"] != true {
			t.Fatalf("replica not alive: %v", rm)
		}
		if rm["url"] == a.url {
			aID = rm["id"].(string)
		}
	}
	if aID == "" {
		t.Fatalf("replica A (%s) not listed with its URL: %v", a.url, out)
	}

	// Ingest on A, subscribe on B.
	c, _, err := dialStream(t, b.url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	subscribe(t, c, "*", nil)
	ingest(t, a.url, `[{"type":"run_start","run_id":"r1","writer":"w1","seq":1,"experiment":"replicas"}]`)
	ingest(t, a.url, metricEvents("r1", 2, 21))
	got := readEvents(t, c, 21)
	if got[0].Type != "status" || got[20].Type != "metric" || got[20].Seq != 21 {
		t.Fatalf("stream on B: first %+v, last %+v", got[0], got[20])
	}
	c.Close()
	// Reconnect to the other replica with the last cursor: nothing lost or
	// repeated.
	ingest(t, b.url, metricEvents("r1", 22, 25))
	c2, _, err := dialStream(t, a.url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	last := got[20].Cursor
	subscribe(t, c2, []string{"r1"}, &last)
	if again := readEvents(t, c2, 4); again[0].Cursor != last+1 || again[0].Seq != 22 || again[3].Seq != 25 {
		t.Fatalf("replay on A after %d: %+v", last, again)
	}

	// Register on A, deploy from B, predict and undeploy through A.
	if code, out := upload(t, a.url+"/api/models?name=mlp", filepath.Join(models, "digits_mlp.onnx")); code != 201 {
		t.Fatalf("upload on A: %d %v", code, out)
	}
	findModel(t, b.url, "mlp")
	code, out = call(t, "POST", b.url+"/api/models/mlp/deploy", "", "application/json", fmt.Sprintf(`{"version":1,"port":%d}`, freePort(t)))
	if code != 201 {
		t.Fatalf("deploy from B: %d %v\n%s", code, out, b.stderr.String())
	}
	dep1 := out["id"].(string)
	if d := deployment(t, a.url, dep1); d == nil || d["replica"] == aID || d["healthy"] != true {
		t.Fatalf("B's deployment as A lists it: %v", d)
	}
	body := `{"data": [[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]]}`
	if code, out := call(t, "POST", a.url+"/api/deployments/"+dep1+"/predict", "", "application/json", body); code != 200 || out["predictions"] == nil {
		t.Fatalf("predict through A: %d %v", code, out)
	}
	pid1 := int(deployment(t, b.url, dep1)["pid"].(float64))
	if code, out := call(t, "DELETE", a.url+"/api/deployments/"+dep1, "", "", ""); code != 200 || out["state"] != "stopped" {
		t.Fatalf("undeploy through A (forwarded to B): %d %v\n%s", code, out, a.stderr.String())
	}
	if err := syscall.Kill(pid1, 0); err == nil {
		t.Fatalf("deployment process %d still alive after the undeploy", pid1)
	}

	// A owns a training job and two deployments; one deployment's process
	// dies first (it must be started again), then A is killed.
	code, out = call(t, "POST", a.url+"/api/training/start", "", "application/json", `{"recipe":"forever","experiment":"replicas"}`)
	if code != 202 {
		t.Fatalf("start a job on A: %d %v\n%s", code, out, a.stderr.String())
	}
	job := out["id"].(string)
	waitUntil(t, 60*time.Second, "the job's output", func() bool { return strings.Contains(runLogs(t, b.url, job), "step 2") })
	if j := jobInfo(t, b.url, job); j["replica"] != aID || j["state"] != "running" {
		t.Fatalf("A's job as B lists it: %v", j)
	}
	deploy := func() (string, int, int) {
		t.Helper()
		port := freePort(t)
		code, out := call(t, "POST", a.url+"/api/models/mlp/deploy", "", "application/json", fmt.Sprintf(`{"version":1,"port":%d}`, port))
		if code != 201 {
			t.Fatalf("deploy on A: %d %v", code, out)
		}
		pid := int(out["pid"].(float64))
		t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL) })
		return out["id"].(string), pid, port
	}
	adopted, adoptedPID, _ := deploy()
	restarted, deadPID, restartedPort := deploy()
	syscall.Kill(-deadPID, syscall.SIGKILL)
	waitUntil(t, 10*time.Second, "the killed deployment to exit", func() bool { return syscall.Kill(deadPID, 0) != nil })

	killed := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := a.exitCode(t); code != -1 {
		t.Fatalf("A's exit after SIGKILL: %d", code)
	}

	// B takes over: the job is lost, its run failed with the reason.
	waitUntil(t, 30*time.Second, "B to mark A's job lost", func() bool { return jobInfo(t, b.url, job)["state"] == "lost" })
	j := jobInfo(t, b.url, job)
	if msg, _ := j["error"].(string); !strings.Contains(msg, aID) || !strings.Contains(msg, "cannot be adopted") {
		t.Fatalf("lost job: %v", j)
	}
	r := waitRun(t, b.url, job, "ended", func(r map[string]any) bool { return r["status"] == "failed" || r["status"] == "stopped" })
	if r["status"] == "failed" && !strings.Contains(r["error"].(string), "lost") {
		t.Fatalf("the lost job's run: %v", r)
	}
	// The deployment that still answers is adopted as it is...
	waitUntil(t, 30*time.Second, "B to take A's deployments over", func() bool {
		d1, d2 := deployment(t, b.url, adopted), deployment(t, b.url, restarted)
		return d1 != nil && d2 != nil && d1["replica"] != aID && d2["replica"] != aID && d2["restarts"] != nil
	})
	t.Logf("takeover within %s of the SIGKILL (lease TTL %s)", time.Since(killed).Round(100*time.Millisecond), ttl)
	if d := deployment(t, b.url, adopted); d["pid"].(float64) != float64(adoptedPID) || d["healthy"] != true || d["state"] != "running" {
		t.Fatalf("adopted deployment: %v", d)
	}
	// ...the other is started again on its port, by B.
	d := deployment(t, b.url, restarted)
	if d["pid"].(float64) == float64(deadPID) || d["state"] != "running" || d["healthy"] != true || d["port"].(float64) != float64(restartedPort) || d["restarts"].(float64) != 1 {
		t.Fatalf("restarted deployment: %v\n%s", d, b.stderr.String())
	}
	for _, id := range []string{adopted, restarted} {
		if code, out := call(t, "POST", b.url+"/api/deployments/"+id+"/predict", "", "application/json", body); code != 200 {
			t.Fatalf("predict %s through B: %d %v", id, code, out)
		}
	}
	// B owns them now: it undeploys both.
	for _, id := range []string{adopted, restarted} {
		if code, out := call(t, "DELETE", b.url+"/api/deployments/"+id, "", "", ""); code != 200 {
			t.Fatalf("undeploy %s on B: %d %v", id, code, out)
		}
	}
	if err := syscall.Kill(adoptedPID, 0); err == nil {
		t.Fatal("the adopted deployment's process outlived its undeploy")
	}
	// A is listed as stopped (or forgotten), B as alive.
	if code, out = call(t, "GET", b.url+"/api/system/replicas", "", "", ""); code != 200 {
		t.Fatalf("replicas after the kill: %d %v", code, out)
	}
	for _, rr := range out["replicas"].([]any) {
		rm := rr.(map[string]any)
		if rm["id"] == aID && rm["alive"] == true {
			t.Fatalf("A is still alive after SIGKILL: %v", rm)
		}
	}
	b.stop(t)
}

// TestReplicasS3: two dashboards on one PostgreSQL that share no
// directory, their files in an S3 bucket (moto's S3 server, a real
// S3-protocol server): a run artifact uploaded on A through MLflow's
// artifact API, and a checkpoint and an artifact written into A's
// directories, are in the bucket and downloaded on B, where the checkpoint
// is registered (runFilesAcrossReplicas); a model uploaded on A is stored in the
// bucket, deployed from B (which fetches it into its own cache) and
// predicted through A; deleting it removes its objects.
func TestReplicasS3(t *testing.T) {
	db := replicaDB(t)
	models := modelsDir(t)
	m := testmoto.Start(t)
	t.Setenv("FW_SYSTEM_INTERVAL", "0")
	t.Setenv("FW_S3_ENDPOINT", m.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
	t.Setenv("FW_S3_PATH_STYLE", "1")
	uri := "s3://" + m.Bucket + "/fw"
	aDir := t.TempDir()
	a := startReplica(t, db, aDir, "--artifact-uri", uri)
	bDir := t.TempDir()
	b := startReplica(t, db, bDir, "--artifact-uri", uri)
	bucket, err := blob.Open(uri, "", blob.S3Config{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	runFilesAcrossReplicas(t, a, aDir, b, bucket)

	if code, out := upload(t, a.url+"/api/models?name=mlp", filepath.Join(models, "digits_mlp.onnx")); code != 201 {
		t.Fatalf("upload on A: %d %v", code, out)
	}
	key := findModel(t, b.url, "mlp")["versions"].([]any)[0].(map[string]any)["file"].(string)
	want, _ := os.Stat(filepath.Join(models, "digits_mlp.onnx"))
	if info, err := bucket.Stat(context.Background(), key); err != nil || info.Size != want.Size() {
		t.Fatalf("the version in the bucket (%s): %+v %v", key, info, err)
	}
	code, out := call(t, "POST", b.url+"/api/models/mlp/deploy", "", "application/json", fmt.Sprintf(`{"version":1,"port":%d}`, freePort(t)))
	if code != 201 {
		t.Fatalf("deploy from B: %d %v\n%s", code, out, b.stderr.String())
	}
	id := out["id"].(string)
	t.Cleanup(func() { syscall.Kill(-int(out["pid"].(float64)), syscall.SIGKILL) })
	if cached, _ := filepath.Glob(filepath.Join(bDir, "exp", "cache", "models", "*model.onnx")); len(cached) != 1 {
		t.Fatalf("B's fetched copy: %v", cached)
	}
	body := `{"data": [[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]]}`
	if code, out := call(t, "POST", a.url+"/api/deployments/"+id+"/predict", "", "application/json", body); code != 200 {
		t.Fatalf("predict through A: %d %v", code, out)
	}
	if code, out := call(t, "DELETE", b.url+"/api/deployments/"+id, "", "", ""); code != 200 {
		t.Fatalf("undeploy: %d %v", code, out)
	}
	if code, out := call(t, "DELETE", a.url+"/api/models/mlp", "", "", ""); code != 200 {
		t.Fatalf("delete the model: %d %v", code, out)
	}
	if _, err := bucket.Stat(context.Background(), key); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("the version's object after the model's delete: %v", err)
	}
	// A wrong bucket stops the start with the reason.
	cmd := fwCmd("dashboard", "--port", "0", "--artifact-uri", "s3://no-such-bucket-fw/x")
	cmd.Env = append(cmd.Env, "FW_EXPERIMENT_DIR="+t.TempDir(), "FW_DATABASE_URL="+db)
	outb, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(outb), "no-such-bucket-fw") || !strings.Contains(string(outb), "create it first") {
		t.Fatalf("a missing bucket: %v\n%s", err, outb)
	}
}

// runFilesAcrossReplicas: an artifact uploaded through MLflow's artifact
// API on replica A is stored in the bucket (<prefix>/artifacts/<run
// id>/<path>), not in A's directory; replica B, which shares no directory
// with A, lists it and downloads it through fw's download and MLflow's.
// A checkpoint and an artifact written into A's directories (as a training
// process on A's host does) and reported to A are copied into the bucket
// by A; B downloads both and registers the checkpoint as a model version.
// A traversal is refused in each API's error shape; deleting the run on B
// deletes its objects.
func runFilesAcrossReplicas(t *testing.T, a *proc, aDir string, b *proc, bucket blob.Store) {
	t.Helper()
	ingest := `[{"type":"run_start","run_id":"art1","writer":"w","seq":1,"experiment":"files"}]`
	if code, out := call(t, "POST", a.url+"/api/ingest", "", "application/json", ingest); code != 200 || len(out["errors"].([]any)) != 0 {
		t.Fatalf("ingest on A: %d %v", code, out)
	}
	body := strings.Repeat("artifact bytes ", 1000)
	put := "/api/2.0/mlflow-artifacts/artifacts/0/art1/artifacts/"
	if code, out := call(t, "PUT", a.url+put+"plots/loss.txt", "", "application/octet-stream", body); code != 200 {
		t.Fatalf("artifact upload on A: %d %v", code, out)
	}
	if info, err := bucket.Stat(context.Background(), "artifacts/art1/plots/loss.txt"); err != nil || info.Size != int64(len(body)) {
		t.Fatalf("the artifact in the bucket: %+v %v", info, err)
	}
	if code, out := call(t, "GET", b.url+"/api/runs/art1/artifacts", "", "", ""); code != 200 || len(out["artifacts"].([]any)) != 1 {
		t.Fatalf("artifacts listed on B: %d %v", code, out)
	}
	if code, out := call(t, "GET", b.url+"/api/2.0/mlflow-artifacts/artifacts?path=0/art1/artifacts/plots", "", "", ""); code != 200 ||
		len(out["files"].([]any)) != 1 || out["files"].([]any)[0].(map[string]any)["path"] != "loss.txt" {
		t.Fatalf("MLflow's list on B: %d %v", code, out)
	}
	download := func(u, want string) {
		t.Helper()
		resp, err := http.Get(b.url + u)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != want {
			t.Fatalf("download on B (%s): %d, %d bytes: %.200s", u, resp.StatusCode, len(got), got)
		}
	}
	download("/api/runs/art1/download?kind=artifact&path=plots/loss.txt", body)
	download(put+"plots/loss.txt", body)

	// Files a training process on A's host writes, reported to A.
	weights := strings.Repeat("w", 100000)
	for p, data := range map[string]string{filepath.Join(aDir, "ckpt", "art1", "step-1.ckpt.pt"): weights, filepath.Join(aDir, "exp", "artifacts", "art1", "sdk.txt"): "from the sdk"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ingest = `[{"type":"checkpoint","run_id":"art1","writer":"w","seq":2,"step":1,"path":"step-1.ckpt.pt"},
		{"type":"artifact","run_id":"art1","writer":"w","seq":3,"path":"sdk.txt","size":12}]`
	if code, out := call(t, "POST", a.url+"/api/ingest", "", "application/json", ingest); code != 200 || len(out["errors"].([]any)) != 0 {
		t.Fatalf("ingest on A: %d %v", code, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, k := range []string{"checkpoints/art1/step-1.ckpt.pt", "artifacts/art1/sdk.txt"} {
		for {
			if _, err := bucket.Stat(context.Background(), k); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("A never copied %s into the bucket: %v\n%s", k, err, a.stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	download("/api/runs/art1/download?kind=checkpoint&path=step-1.ckpt.pt", weights)
	download("/api/runs/art1/download?kind=artifact&path=sdk.txt", "from the sdk")
	code, out := call(t, "POST", b.url+"/api/models", "", "application/json", `{"name":"ck","run_id":"art1","checkpoint":"step-1.ckpt.pt"}`)
	if code != 201 || out["version"].(map[string]any)["size"] != float64(len(weights)) {
		t.Fatalf("registering A's checkpoint on B: %d %v", code, out)
	}

	// Files a training process on another machine wrote (its own
	// checkpoint and artifact directories, which no replica sees; fw.track
	// with FW_UPLOAD_FILES=1 sends them like this): uploaded through A
	// into the bucket, then served and registered by B, which never had
	// them on its disk.
	remote := t.TempDir()
	remoteWeights := strings.Repeat("r", 200000)
	remoteCk := filepath.Join(remote, "checkpoints", "art1", "step-2.ckpt.pt")
	if err := os.MkdirAll(filepath.Dir(remoteCk), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(remoteCk, []byte(remoteWeights), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(remoteCk)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("PUT", a.url+"/api/runs/art1/files?kind=checkpoint&path=step-2.ckpt.pt", f)
	req.ContentLength = int64(len(remoteWeights))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 {
		t.Fatalf("a checkpoint upload from another machine to A: %d %s", resp.StatusCode, got)
	}
	resp.Body.Close()
	if code, out := call(t, "PUT", a.url+"/api/runs/art1/files?kind=artifact&path=remote/report.txt", "", "text/plain", "from afar"); code != 200 || out["size"] != float64(9) {
		t.Fatalf("an artifact upload from another machine to A: %d %v", code, out)
	}
	for k, size := range map[string]int64{"checkpoints/art1/step-2.ckpt.pt": int64(len(remoteWeights)), "artifacts/art1/remote/report.txt": 9} {
		if info, err := bucket.Stat(context.Background(), k); err != nil || info.Size != size {
			t.Fatalf("the upload in the bucket (%s): %+v %v", k, info, err)
		}
	}
	if _, err := os.Stat(filepath.Join(aDir, "ckpt", "art1", "step-2.ckpt.pt")); !os.IsNotExist(err) {
		t.Fatalf("the upload went to A's own checkpoint directory: %v", err)
	}
	ingest = `[{"type":"checkpoint","run_id":"art1","writer":"remote","seq":1,"step":2,"path":"step-2.ckpt.pt"},
		{"type":"artifact","run_id":"art1","writer":"remote","seq":2,"path":"remote/report.txt","size":9}]`
	if code, out := call(t, "POST", a.url+"/api/ingest", "", "application/json", ingest); code != 200 || len(out["errors"].([]any)) != 0 {
		t.Fatalf("ingest of the remote events on A: %d %v", code, out)
	}
	download("/api/runs/art1/download?kind=checkpoint&path=step-2.ckpt.pt", remoteWeights)
	download("/api/runs/art1/download?kind=artifact&path=remote/report.txt", "from afar")
	code, out = call(t, "POST", b.url+"/api/models", "", "application/json", `{"name":"remote-ck","run_id":"art1","checkpoint":"step-2.ckpt.pt"}`)
	if code != 201 || out["version"].(map[string]any)["size"] != float64(len(remoteWeights)) {
		t.Fatalf("registering the remote checkpoint on B: %d %v", code, out)
	}
	// Hostile uploads: the JSON error shape, nothing stored, A still up.
	for _, c := range []struct {
		url    string
		status int
	}{
		{"/api/runs/art1/files?kind=checkpoint&path=..%2F..%2Fmodels%2Fx", 400},
		{"/api/runs/art1/files?kind=model&path=x", 400},
		{"/api/runs/nope/files?kind=artifact&path=x", 404},
	} {
		if code, out := call(t, "PUT", a.url+c.url, "", "application/octet-stream", "evil"); code != c.status || errorCode(t, out) == "" {
			t.Fatalf("PUT %s: %d %v", c.url, code, out)
		}
	}
	for _, k := range []string{"models/x", "artifacts/nope/x"} {
		if _, err := bucket.Stat(context.Background(), k); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("a refused upload is in the bucket as %s: %v", k, err)
		}
	}

	if code, out := call(t, "GET", b.url+"/api/runs/art1/download?kind=artifact&path=..%2Fx", "", "", ""); code != 404 || errorCode(t, out) != "not_found" {
		t.Fatalf("a traversal on B: %d %v", code, out)
	}
	if code, out := call(t, "PUT", a.url+put+"a/../../x", "", "application/octet-stream", "x"); code != 400 || out["error_code"] != "INVALID_PARAMETER_VALUE" {
		t.Fatalf("a traversal through MLflow's API: %d %v", code, out)
	}
	if code, out := call(t, "DELETE", b.url+"/api/runs/art1", "", "", ""); code != 200 {
		t.Fatalf("deleting the run on B: %d %v", code, out)
	}
	for _, k := range []string{"artifacts/art1/plots/loss.txt", "artifacts/art1/sdk.txt", "checkpoints/art1/step-1.ckpt.pt", "checkpoints/art1/step-2.ckpt.pt", "artifacts/art1/remote/report.txt"} {
		if _, err := bucket.Stat(context.Background(), k); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("%s after its run's delete: %v", k, err)
		}
	}
}
