package jobs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/testpg"
)

// replayExec is an executor whose jobs outlive the dashboard, as Ray's do,
// for the Manager's side of a re-attach: the job's log is a file that
// every attach reads from its first line (lines line-1 ... line-N, N the
// size of the log when it is attached). The job runs until detached, or,
// once attached with the log complete, ends finished. The real executor
// is tested against a real Ray head in dashboard/jobs/ray.
type replayExec struct {
	mu     sync.Mutex
	lines  int // lines the job's log holds now
	starts []Spec
}

func (e *replayExec) Name() string     { return "replay" }
func (e *replayExec) Address() string  { return "test://replay" }
func (e *replayExec) Attachable() bool { return true }
func (e *replayExec) Queues() bool     { return true }
func (e *replayExec) Close()           {}
func (e *replayExec) setLines(n int)   { e.mu.Lock(); e.lines = n; e.mu.Unlock() }
func (e *replayExec) Start(s Spec) (Process, error) {
	e.mu.Lock()
	e.starts = append(e.starts, s)
	e.mu.Unlock()
	return e.proc(s.ID, false), nil
}
func (e *replayExec) Attach(s Spec, id string) (Process, error) { return e.proc(id, true), nil }

func (e *replayExec) proc(id string, final bool) *replayProc {
	e.mu.Lock()
	n := e.lines
	e.mu.Unlock()
	pr, pw := io.Pipe()
	p := &replayProc{id: id, started: make(chan struct{}), done: make(chan struct{}), detach: make(chan struct{}), pr: pr}
	close(p.started)
	go func() {
		for i := 1; i <= n; i++ {
			fmt.Fprintf(pw, "line-%d\n", i)
		}
		if final {
			pw.Close()
			p.res = Result{Status: store.StatusFinished}
			close(p.done)
			return
		}
		<-p.detach
		pw.Close()
		p.res = Result{Detached: true}
		close(p.done)
	}()
	return p
}

type replayProc struct {
	id            string
	started, done chan struct{}
	detach        chan struct{}
	once          sync.Once
	pr            *io.PipeReader
	res           Result
}

func (p *replayProc) ID() string                 { return p.id }
func (p *replayProc) PID() int                   { return 0 }
func (p *replayProc) Started() <-chan struct{}   { return p.started }
func (p *replayProc) Done() <-chan struct{}      { return p.done }
func (p *replayProc) Result() Result             { return p.res }
func (p *replayProc) Stop(context.Context) error { return nil }
func (p *replayProc) Detach()                    { p.once.Do(func() { close(p.detach) }) }
func (p *replayProc) Output() []Output {
	return []Output{{Stream: "stdout", R: p.pr, Writer: "replay-" + p.id}}
}

// TestAdoptCapturesEachLineOnce: a job's run is tagged with its executor
// job ID, the dashboard shuts down (the job is detached, its run stays
// running), a new Manager adopts it from the store, and the replayed log
// lands in the run exactly once: the lines captured before are skipped.
// It runs on SQLite, and on PostgreSQL when FW_TEST_DATABASE_URL is set
// (make test-postgres), where replicas will re-attach to each other's jobs.
func TestAdoptCapturesEachLineOnce(t *testing.T) {
	dir := t.TempDir()
	cfgs := map[string]store.Config{}
	if testpg.SQLite() {
		cfgs["sqlite"] = store.Config{Dir: filepath.Join(dir, "experiments")}
	}
	if base := os.Getenv("FW_TEST_DATABASE_URL"); base != "" {
		cfgs["postgres"] = store.Config{DatabaseURL: testpg.Schema(t, base), CheckpointDir: filepath.Join(dir, "ckpt"), ArtifactDir: filepath.Join(dir, "art")}
	} else {
		testpg.NoCluster(t)
	}
	for name, cfg := range cfgs {
		t.Run(name, func(t *testing.T) { adoptOnce(t, cfg) })
	}
}

func adoptOnce(t *testing.T, cfg store.Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ex := &replayExec{lines: 1234}
	recipes := []Recipe{{Name: "r", Module: "m"}}
	m := New(st, recipes, Config{Executor: ex}, log)
	info, err := m.Start(ctx, StartRequest{Recipe: "r", Experiment: "e"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Executor != "replay" || info.ExecutorID != ex.starts[0].ID || info.State != StateRunning {
		t.Fatalf("started job: %+v", info)
	}
	logs := func() []string {
		ls, err := st.Logs(ctx, info.RunID, store.LogQuery{Limit: 100000})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range ls {
			out = append(out, l.Line)
		}
		return out
	}
	for deadline := time.Now().Add(20 * time.Second); len(logs()) < 1234; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 1234 lines captured", len(logs()))
		}
	}
	m.Shutdown(ctx)
	r, err := st.GetRun(ctx, info.RunID)
	if err != nil || r.Status != store.StatusRunning || r.Tags[TagExecutorJob] != info.ExecutorID || r.Tags[TagExecutorAddress] != "test://replay" {
		t.Fatalf("after the shutdown: %v %s %v", err, r.Status, r.Tags)
	}

	// The job went on meanwhile: its log now has 3000 lines.
	ex.setLines(3000)
	m2 := New(st, recipes, Config{Executor: ex}, log)
	ids, err := m2.AdoptAll(ctx, nil, nil)
	if err != nil || len(ids) != 1 || ids[0] != info.RunID {
		t.Fatalf("AdoptAll: %v %v", ids, err)
	}
	if err := m2.Wait(ctx, info.RunID); err != nil {
		t.Fatal(err)
	}
	got := logs()
	var want []string
	for i := 1; i <= 3000; i++ {
		want = append(want, fmt.Sprintf("line-%d", i))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%d lines after the re-attach, want line-1 ... line-3000 once each; first %q, around 1234: %q", len(got), got[:3], got[1230:min(len(got), 1240)])
	}
	if r, _ := st.GetRun(ctx, info.RunID); r.Status != store.StatusFinished {
		t.Fatalf("run %s, want finished", r.Status)
	}
	// An ended run has no job to adopt; a local executor adopts nothing.
	if _, err := m2.Adopt(ctx, info.RunID); err == nil || !strings.Contains(err.Error(), "has ended") {
		t.Fatalf("Adopt of an ended run: %v", err)
	}
	local := New(st, recipes, Config{}, log)
	if _, err := local.Adopt(ctx, info.RunID); err == nil {
		t.Fatal("the local executor adopted a job")
	}
	m2.Shutdown(ctx)
	local.Shutdown(ctx)
}
