package ray

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/jobs"
)

func TestParseAddress(t *testing.T) {
	f := func(in, want, problem string) {
		t.Helper()
		u, err := ParseAddress(in)
		if problem != "" {
			if err == nil || !strings.Contains(err.Error(), problem) {
				t.Errorf("ParseAddress(%q) = %v, %v; want an error with %q", in, u, err, problem)
			}
			return
		}
		if err != nil || u.String() != want {
			t.Errorf("ParseAddress(%q) = %v, %v; want %s", in, u, err, want)
		}
	}
	f("http://127.0.0.1:8265", "http://127.0.0.1:8265", "")
	f("https://ray.example.com/prefix/", "https://ray.example.com/prefix", "")
	f("127.0.0.1:8265", "", "http:// or https://")
	f("ray://head:10001", "", "http:// or https://")
	f("file:///etc/passwd", "", "http:// or https://")
	f("http://", "", "no host")
	f("http://user:pw@head:8265", "", "user, query or fragment")
	f("http://head:8265/?x=1", "", "user, query or fragment")
	f("http://head:8265/#f", "", "user, query or fragment")
	f("http://head:8265/\x00", "", "invalid control character")
}

func TestShellQuote(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		got, err := shellQuote(in)
		if err != nil || got != want {
			t.Errorf("shellQuote(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	f("python", "python")
	f("/venv/bin/python", "/venv/bin/python")
	f(`{"lr":0.1}`, `'{"lr":0.1}'`)
	f("it's $(rm -rf /); `x` \\ \n", `'it'\''s $(rm -rf /); `+"`x`"+` \ `+"\n'")
	f("", "''")
	if _, err := shellQuote("a\x00b"); err == nil {
		t.Error("a NUL byte was quoted")
	}
}

// TestShellQuoteThroughSh runs quoted words through a real sh: each comes
// back as the one argument it was.
func TestShellQuoteThroughSh(t *testing.T) {
	words := []string{"plain", "it's", `"dq" $HOME $(id) ; | & > < * ? [a] {b,c} ~ # !`, "tab\tnew\nline", `back\slash'`, "ünï €", ""}
	var quoted []string
	for _, w := range words {
		q, err := shellQuote(w)
		if err != nil {
			t.Fatal(err)
		}
		quoted = append(quoted, q)
	}
	out, err := runSh(`for a in "$@"; do printf '%s\0' "$a"; done`, strings.Join(quoted, " "))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
	if strings.Join(got, "|") != strings.Join(words, "|") {
		t.Fatalf("through sh: %q, want %q", got, words)
	}
}

func TestRequest(t *testing.T) {
	e, err := New(Config{Address: "http://127.0.0.1:1", Python: "/opt/venv/bin/python", StopGrace: 2500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	spec := jobs.Spec{RunID: "r1", ID: "fw-r1-abcdefgh", Recipe: jobs.Recipe{Name: "digits"},
		Args:   []string{"-m", "fw.recipes.digits_mlp", "--run-id", "r1", "--experiment", "my exp", "--params", `{"num_cpus":2,"x":"'"}`},
		Env:    []string{"FW_TRACKING_URI=http://10.0.0.1:8080", "FW_DASHBOARD_TOKEN=", "FW_JOB_RUN_ID=r1"},
		Params: map[string]any{"num_cpus": int64(2), "num_gpus": 0.5}}
	req, err := e.Request(spec)
	if err != nil {
		t.Fatal(err)
	}
	wantEntry := `/opt/venv/bin/python -m fw.recipes.digits_mlp --run-id r1 --experiment 'my exp' --params '{"num_cpus":2,"x":"'\''"}'`
	if req.Entrypoint != wantEntry || req.SubmissionID != "fw-r1-abcdefgh" {
		t.Errorf("entrypoint %s, submission %s", req.Entrypoint, req.SubmissionID)
	}
	env := req.RuntimeEnv.EnvVars
	if env["FW_TRACKING_URI"] != "http://10.0.0.1:8080" || env["FW_DASHBOARD_TOKEN"] != "" || env["FW_JOB_RUN_ID"] != "r1" || env["RAY_JOB_STOP_WAIT_TIME_S"] != "3" {
		t.Errorf("env_vars %v", env)
	}
	if *req.EntrypointNumCPUs != 2 || *req.EntrypointNumGPUs != 0.5 || req.Metadata["fw.run_id"] != "r1" || req.Metadata["fw.recipe"] != "digits" {
		t.Errorf("resources %v %v, metadata %v", *req.EntrypointNumCPUs, *req.EntrypointNumGPUs, req.Metadata)
	}
	// Without the params: one CPU, no GPU.
	spec.Params = map[string]any{}
	if req, err = e.Request(spec); err != nil || *req.EntrypointNumCPUs != DefaultCPUs || req.EntrypointNumGPUs != nil {
		t.Errorf("default resources: %v", err)
	}
	for _, p := range []map[string]any{{"num_cpus": -1.0}, {"num_gpus": "2"}, {"num_cpus": 1e300}} {
		spec.Params = p
		if _, err := e.Request(spec); err == nil {
			t.Errorf("params %v accepted as resources", p)
		}
	}
	spec.Params, spec.ID = nil, "../x"
	if _, err := e.Request(spec); err == nil {
		t.Error("a submission ID with a path in it was accepted")
	}
	if _, err := e.Attach(spec, "fw-x/../../api"); err == nil {
		t.Error("Attach took a submission ID with a path in it")
	}
}

// hostile answers every request with handler h and counts them.
func hostile(t *testing.T, h http.HandlerFunc) (*Client, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1); h(w, r) }))
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, &n
}

// TestClientHostileAnswers: whatever Ray (or whatever answers at its
// address) sends, the client returns an error that says what happened and
// never a panic, a hang or a call elsewhere.
func TestClientHostileAnswers(t *testing.T) {
	ctx := context.Background()
	f := func(name string, h http.HandlerFunc, call func(*Client) error, want string) {
		t.Helper()
		c, _ := hostile(t, h)
		err := call(c)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error with %q", name, err, want)
		}
	}
	job := func(c *Client) error { _, err := c.Job(ctx, "fw-a-b"); return err }
	submit := func(c *Client) error { return c.Submit(ctx, SubmitRequest{Entrypoint: "true", SubmissionID: "fw-a-b"}) }
	stop := func(c *Client) error { return c.Stop(ctx, "fw-a-b") }
	f("not JSON", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>")) }, job, "not Ray's job JSON")
	f("unknown status", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"submission_id":"fw-a-b","status":"EXPLODED"}`))
	}, job, `unknown job status "EXPLODED"`)
	f("another job", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"submission_id":"fw-other","status":"RUNNING"}`))
	}, job, `answered about job "fw-other"`)
	f("wrong types", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"submission_id":"fw-a-b","status":"RUNNING","driver_exit_code":"x"}`))
	}, job, "not Ray's job JSON")
	f("too large", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"submission_id":"fw-a-b","status":"RUNNING","message":"`))
		w.Write([]byte(strings.Repeat("x", maxInfoBytes)))
		w.Write([]byte(`"}`))
	}, job, "over 1048576 bytes")
	f("404", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "Job fw-a-b does not exist", 404) }, job, "no such job on the Ray cluster")
	f("a traceback", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Traceback (most recent call last):\n  File \"x\"\nValueError: Job with submission_id fw-a-b already exists.\n\n \t\n", 500)
	}, submit, "Ray answered 500: ValueError: Job with submission_id fw-a-b already exists.")
	f("an endless error body", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		w.Write([]byte(strings.Repeat("y", 1<<20)))
	}, submit, "Ray answered 500: yyy")
	f("submission ID swapped", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"job_id":"x","submission_id":"fw-evil"}`))
	}, submit, `submission ID "fw-evil"`)
	f("stop without its field", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) }, stop, "not Ray's")
	f("slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}, job, "timeout")

	// A redirect is not followed: the other address never hears from us.
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	f("redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	},
		job, "Ray answered 307")
	if elsewhere.Load() != 0 {
		t.Error("a redirect was followed")
	}
	// The message of an error is bounded and printable.
	c, _ := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, strings.Repeat("\x07é", 5000), 400)
	})
	err := submit(c)
	var api *APIError
	if !errors.As(err, &api) || len(api.Msg) > maxErrorText+len("…") || strings.ContainsRune(api.Msg, '\x07') {
		t.Errorf("error message %q", err)
	}
}

// TestTailLogsHostile: a WebSocket endpoint that is not one, and a job ID
// is always escaped into one path segment.
func TestTailLogsHostile(t *testing.T) {
	var path atomic.Value
	c, _ := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		path.Store(r.URL.EscapedPath())
		http.Error(w, "no", 404)
	})
	var sink strings.Builder
	_, err := c.TailLogs(context.Background(), "fw-a/../b", 0, &sink)
	if err == nil || !strings.Contains(err.Error(), "Ray answered 404") {
		t.Errorf("TailLogs on a 404: %v", err)
	}
	if p := path.Load(); p != "/api/jobs/fw-a%2F..%2Fb/logs/tail" {
		t.Errorf("requested %v", p)
	}
}

func TestResult(t *testing.T) {
	one := 1
	r := result("fw-x", JobInfo{Status: StatusFailed, DriverExitCode: &one,
		Message: "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\nTraceback...\nValueError: boom"})
	if r.Status != "failed" || r.Error != "the Ray job fw-x failed: Job entrypoint command failed with exit code 1" || *r.ExitCode != 1 {
		t.Errorf("failed: %+v", r)
	}
	if r := result("fw-x", JobInfo{Status: StatusSucceeded}); r.Status != "finished" || r.Error != "" {
		t.Errorf("succeeded: %+v", r)
	}
	if r := result("fw-x", JobInfo{Status: StatusStopped, Message: "Job was intentionally stopped."}); r.Status != "stopped" || !strings.Contains(r.Error, "stopped on the cluster") {
		t.Errorf("stopped: %+v", r)
	}
}

// FuzzDecodeJobInfo: any answer decodes to a job with one of Ray's states
// or to an error, never a panic.
func FuzzDecodeJobInfo(f *testing.F) {
	f.Add([]byte(`{"type": "SUBMISSION", "job_id": null, "submission_id": "fw-a", "status": "SUCCEEDED", "message": "Job finished successfully.", "driver_exit_code": 0}`))
	f.Add([]byte(`{"status": "PENDING", "driver_exit_code": null}`))
	f.Add([]byte(`{"status": 1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<16 {
			return
		}
		info, err := DecodeJobInfo(b)
		if err == nil && info.Status != StatusPending && info.Status != StatusRunning && !Terminal(info.Status) {
			t.Fatalf("status %q accepted", info.Status)
		}
		if err == nil {
			_ = result("fw-x", info)
		}
	})
}

// runSh runs script with the positional parameters words (already quoted
// for sh), the way Ray runs an entrypoint: sh -c.
func runSh(script, words string) (string, error) {
	out, err := exec.Command("sh", "-c", "set -- "+words+"; "+script).Output()
	return string(out), err
}
