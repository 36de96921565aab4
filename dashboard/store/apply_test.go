package store

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestCanTransition(t *testing.T) {
	f := func(from, to Status, want bool) {
		t.Helper()
		if got := CanTransition(from, to); got != want {
			t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
		}
	}
	f(StatusQueued, StatusRunning, true)
	f(StatusQueued, StatusFailed, true)
	f(StatusQueued, StatusStopped, true)
	f(StatusRunning, StatusFinished, true)
	f(StatusRunning, StatusFailed, true)
	f(StatusRunning, StatusStopped, true)
	f(StatusRunning, StatusRunning, true)
	f(StatusRunning, StatusQueued, false)
	f(StatusFinished, StatusRunning, false)
	f(StatusFailed, StatusFinished, false)
	f(StatusStopped, StatusRunning, false)
	f(StatusFinished, StatusFinished, true)
	f("bogus", StatusRunning, false)
}

func TestLifecycle(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		e := &ev{run: "run1"}
		mustApply(t, s, e.next(Event{Type: EventRunStart, Experiment: "exp", Status: StatusQueued}))
		r, err := s.GetRun(ctx, "run1")
		if err != nil || r.Status != StatusQueued || r.Started != nil {
			t.Fatalf("queued run: %+v %v", r, err)
		}
		mustApply(t, s, e.next(Event{Type: EventStatus, Status: StatusRunning}))
		res, err := s.Apply(ctx, []Event{e.next(Event{Type: EventStatus, Status: StatusQueued})})
		if err != nil || len(res.Errors) != 1 || res.Errors[0].Code != CodeInvalidTransition {
			t.Fatalf("running -> queued: %+v %v", res, err)
		}
		mustApply(t, s, e.next(Event{Type: EventRunEnd, Status: StatusFailed, Error: "boom", ExitCode: Ptr(3)}))
		res, _ = s.Apply(ctx, []Event{e.next(Event{Type: EventStatus, Status: StatusRunning})})
		if len(res.Errors) != 1 || res.Errors[0].Code != CodeInvalidTransition {
			t.Fatalf("failed -> running must be refused: %+v", res)
		}
		r, _ = s.GetRun(ctx, "run1")
		if r.Status != StatusFailed || r.Error != "boom" || r.ExitCode == nil || *r.ExitCode != 3 || r.Started == nil || r.Ended == nil {
			t.Fatalf("failed run: %+v", r)
		}
		res, _ = s.Apply(ctx, []Event{e.next(Event{Type: EventRunEnd, Status: StatusRunning})})
		if len(res.Errors) != 1 || res.Errors[0].Code != CodeInvalidTransition {
			t.Fatalf("run_end running: %+v", res)
		}
	})
}

func TestReconcile(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		for i, pid := range []int{100, 200, 300} {
			e := &ev{run: fmt.Sprintf("r%d", i)}
			mustApply(t, s, e.next(Event{Type: EventRunStart, Experiment: "exp", Source: &Source{Host: "h", PID: pid}}))
			if i == 2 {
				mustApply(t, s, e.next(Event{Type: EventRunEnd}))
			}
		}
		failed, err := s.Reconcile(ctx, func(r Run) bool { return r.Source.PID == 100 }, "process 200 is gone")
		if err != nil || len(failed) != 1 || failed[0] != "r1" {
			t.Fatalf("reconcile: %v %v", failed, err)
		}
		r, _ := s.GetRun(ctx, "r1")
		if r.Status != StatusFailed || r.Error != "process 200 is gone" || r.Ended == nil {
			t.Fatalf("reconciled run: %+v", r)
		}
		for id, want := range map[string]Status{"r0": StatusRunning, "r2": StatusFinished} {
			if r, _ := s.GetRun(ctx, id); r.Status != want {
				t.Errorf("%s: %s, want %s", id, r.Status, want)
			}
		}
	})
}

func TestParamsWriteOnce(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		e := &ev{run: "p1"}
		mustApply(t, s, e.start("exp", map[string]any{"lr": 0.01, "opt": "adam", "layers": []any{1, 2}}, nil))
		// The same values again are fine, in any spelling of the same JSON.
		mustApply(t, s, e.next(Event{Type: EventParam, Params: map[string]any{"lr": 0.01, "layers": []any{1.0, 2.0}, "new": true}}))
		res, err := s.Apply(ctx, []Event{
			e.next(Event{Type: EventParam, Params: map[string]any{"lr": 0.02}}),
			e.next(Event{Type: EventParam, Params: map[string]any{"other": 1, "opt": "sgd"}}),
			e.next(Event{Type: EventParam, Params: map[string]any{"batch": 64}}),
		})
		if err != nil || len(res.Errors) != 2 || res.Errors[0].Code != CodeParamConflict || res.Errors[1].Code != CodeParamConflict || res.Applied != 1 {
			t.Fatalf("conflicts: %+v %v", res, err)
		}
		r, _ := s.GetRun(ctx, "p1")
		if r.Params["lr"] != 0.01 || r.Params["opt"] != "adam" || r.Params["batch"] != 64.0 || r.Params["new"] != true {
			t.Fatalf("params: %v", r.Params)
		}
		if _, ok := r.Params["other"]; ok {
			t.Fatal("a refused event must write none of its params")
		}
	})
}

// A sweep's run logs hundreds of params and tags in one event; they are
// read and written up to 400 per statement, so these cross the statements'
// boundaries: every one is stored, a conflict in the last statement's keys
// is named and writes none of its event's params, and tags are set and
// deleted across the boundaries too.
func TestManyParamsAndTagsInOneEvent(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		e := &ev{run: "wide"}
		params, tags := map[string]any{}, map[string]string{}
		for i := range 1000 {
			params[fmt.Sprintf("p%04d", i)] = float64(i)
			tags[fmt.Sprintf("t%04d", i)] = fmt.Sprint(i)
		}
		mustApply(t, s, e.start("exp", params, tags))
		again := map[string]any{"extra": "x"}
		for k, v := range params {
			again[k] = v
		}
		again["p0950"] = "changed"
		res, err := s.Apply(ctx, []Event{e.next(Event{Type: EventParam, Params: again})})
		if err != nil || len(res.Errors) != 1 || res.Errors[0].Code != CodeParamConflict || !strings.Contains(res.Errors[0].Msg, `"p0950"`) {
			t.Fatalf("a conflict among 1001 params: %+v %v", res, err)
		}
		var del []string
		for i := 0; i < 1000; i += 2 {
			del = append(del, fmt.Sprintf("t%04d", i))
		}
		mustApply(t, s, e.next(Event{Type: EventTag, Tags: map[string]string{"t0001": "one", "new": "yes"}, DeleteTags: del}))
		r, err := s.GetRun(ctx, "wide")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Params) != 1000 || r.Params["p0950"] != 950.0 || r.Params["p0999"] != 999.0 {
			t.Fatalf("%d params stored (p0950 = %v), want the 1000 first written", len(r.Params), r.Params["p0950"])
		}
		if _, ok := r.Params["extra"]; ok {
			t.Fatal("the refused event wrote a param")
		}
		if r.Tags["t0001"] != "one" || r.Tags["new"] != "yes" || r.Tags["t0999"] != "999" {
			t.Fatalf("tags t0001=%q new=%q t0999=%q", r.Tags["t0001"], r.Tags["new"], r.Tags["t0999"])
		}
		for _, k := range del {
			if _, ok := r.Tags[k]; ok {
				t.Fatalf("tag %s was deleted but is still there", k)
			}
		}
	})
}

// RunTag reads one tag as GetRun has it, and says when the run or the
// tag is not there.
func TestRunTag(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		e := &ev{run: "tagged"}
		mustApply(t, s, e.start("exp", nil, map[string]string{"team": "vision", "empty": ""}))
		for _, c := range []struct {
			run, key, want string
			ok             bool
		}{{"tagged", "team", "vision", true}, {"tagged", "empty", "", true}, {"tagged", "nope", "", false}, {"no-such-run", "team", "", false}} {
			v, ok, err := s.RunTag(ctx, c.run, c.key)
			if err != nil || v != c.want || ok != c.ok {
				t.Errorf("RunTag(%s, %s) = %q, %v, %v; want %q, %v", c.run, c.key, v, ok, err, c.want, c.ok)
			}
		}
		mustApply(t, s, e.next(Event{Type: EventTag, DeleteTags: []string{"team"}}))
		if _, ok, _ := s.RunTag(ctx, "tagged", "team"); ok {
			t.Fatal("a deleted tag is still read")
		}
	})
}

func TestExactlyOnce(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		e := &ev{run: "x1", writer: "w1"}
		var all []Event
		all = append(all, e.start("exp", map[string]any{"lr": 0.1}, nil))
		for i := int64(0); i < 50; i++ {
			all = append(all, e.metrics(i, map[string]float64{"loss": float64(i)}))
			if i%10 == 0 {
				all = append(all, e.next(Event{Type: EventLog, Stream: "stdout", Lines: []string{fmt.Sprintf("line %d", i)}}))
			}
		}
		// Deliver: first 30, then the whole thing (spool re-import), then an
		// overlapping range, then the same batch with duplicates inside.
		mustApply(t, s, all[:30]...)
		res := mustApply(t, s, all...)
		if res.Duplicates != 30 || res.Applied != len(all)-30 {
			t.Fatalf("re-import: %+v", res)
		}
		res = mustApply(t, s, append(append([]Event{}, all[20:40]...), all[10:50]...)...)
		if res.Applied != 0 || res.Duplicates != 60 {
			t.Fatalf("overlap: %+v", res)
		}
		if len(res.Acked) != 1 || res.Acked[0].Seq != int64(len(all)) || res.Acked[0].Writer != "w1" {
			t.Fatalf("acked: %+v", res.Acked)
		}
		// A second writer (a resumed process) has its own seq space.
		e2 := &ev{run: "x1", writer: "w2"}
		mustApply(t, s, e2.metrics(100, map[string]float64{"loss": 100}))
		r, _ := s.GetRun(ctx, "x1")
		if got := r.Metrics["loss"]; got.Count != 51 || got.Last != 100 || got.Min != 0 || got.Max != 100 {
			t.Fatalf("summary after re-delivery: %+v", got)
		}
		logs, _ := s.Logs(ctx, "x1", LogQuery{})
		if len(logs) != 5 {
			t.Fatalf("logs duplicated or lost: %d", len(logs))
		}
		ser, _ := s.Metrics(ctx, "x1", MetricsQuery{Keys: []string{"loss"}})
		if len(ser) != 1 || len(ser[0].Buckets) != 51 {
			t.Fatalf("points: %+v", ser)
		}
	})
}

func TestBadEvents(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		body := []byte(`[
{"type":"run_start","run_id":"b1","seq":1,"experiment":"exp","params":{"lr":0.1}},
{"type":"metrics","run_id":"b1","seq":2,"step":1,"values":{"loss":"high"}},
{"type":"metrics","run_id":"b1","seq":3,"step":1,"values":{"loss":"NaN","acc":"Infinity","neg":"-Infinity"}},
{"type":"metrics","run_id":"nope","seq":1,"step":1,"values":{"loss":1}},
{"type":"param","run_id":"b1","seq":4,"params":{"lr":0.2}},
{"type":"metrics","run_id":"b1","seq":5,"step":2,"values":{"bad\u0001key":1}},
{"type":"metrics","run_id":"b1","seq":6,"step":"two","values":{"loss":1}},
{"type":"teleport","run_id":"b1","seq":7},
{"type":"checkpoint","run_id":"b1","seq":8,"path":"../../etc/passwd","step":1},
{"type":"run_start","run_id":"Bad/Id","seq":1,"experiment":"exp"},
{"type":"run_start","run_id":"b2","seq":1,"experiment":"bad\nname"},
{"type":"metrics","run_id":"b1","seq":0,"step":1,"values":{"loss":1}},
{"type":"metrics","run_id":"b1","seq":9,"step":3,"values":{"loss":0.5}},
not json
]`)
		if _, err := DecodeEvents(body); err == nil {
			t.Fatal("a body that is not JSON must fail to decode")
		}
		body = body[:len(body)-len("not json\n]")]
		body = append(body[:len(body)-2], ']')
		events, err := DecodeEvents(body)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Apply(ctx, events)
		if err != nil {
			t.Fatal(err)
		}
		want := map[int]Code{1: CodeInvalidType, 3: CodeUnknownRun, 4: CodeParamConflict, 5: CodeInvalidKey, 6: CodeInvalidType,
			7: CodeInvalidEvent, 8: CodeInvalidPath, 9: CodeInvalidID, 10: CodeInvalidName, 11: CodeInvalidEvent}
		got := map[int]Code{}
		for _, e := range res.Errors {
			got[e.Index] = e.Code
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("codes:\n got %v\nwant %v\n%+v", got, want, res.Errors)
		}
		if res.Applied != 3 {
			t.Fatalf("applied %d, want 3", res.Applied)
		}
		r, _ := s.GetRun(ctx, "b1")
		if !math.IsInf(r.Metrics["acc"].Last, 1) || !math.IsInf(r.Metrics["neg"].Last, -1) || r.Metrics["loss"].Last != 0.5 || r.Metrics["loss"].Count != 2 {
			t.Fatalf("non-finite values: %+v", r.Metrics)
		}
		ser, _ := s.Metrics(ctx, "b1", MetricsQuery{Keys: []string{"loss"}})
		if len(ser) != 1 || len(ser[0].Buckets) != 2 || !math.IsNaN(ser[0].Buckets[0].Last) {
			t.Fatalf("NaN must be stored as NaN: %+v", ser)
		}
		// Oversized batches are refused whole.
		big := make([]Event, MaxBatchEvents+1)
		if _, err := s.Apply(ctx, big); ErrorCode(err) != CodeBatchTooLarge {
			t.Fatalf("oversized batch: %v", err)
		}
		// JSON lines decode like an array.
		lines, err := DecodeEvents([]byte("{\"type\":\"tag\",\"run_id\":\"b1\",\"seq\":10,\"tags\":{\"team\":\"a\"}}\n\n{\"type\":\"progress\",\"run_id\":\"b1\",\"seq\":11,\"step\":5,\"total_steps\":10}\n"))
		if err != nil || len(lines) != 2 {
			t.Fatalf("lines: %v %v", lines, err)
		}
		mustApply(t, s, lines...)
		r, _ = s.GetRun(ctx, "b1")
		if r.Tags["team"] != "a" || r.Progress.Step != 5 || r.Progress.TotalSteps != 10 {
			t.Fatalf("tag/progress: %+v", r)
		}
	})
}

func TestConcurrentApply(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const writers, batches, per = 8, 10, 100
		var wg sync.WaitGroup
		var readErr error
		var readMu sync.Mutex
		stop := make(chan struct{})
		for r := 0; r < 3; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := s.ListRuns(ctx, ListQuery{Filter: `metrics.loss.min >= 0`, Sort: "metrics.loss"}); err != nil {
						readMu.Lock()
						readErr = err
						readMu.Unlock()
						return
					}
					s.Metrics(ctx, "c0", MetricsQuery{MaxPoints: 10})
				}
			}()
		}
		errs := make(chan error, writers)
		var ww sync.WaitGroup
		for w := 0; w < writers; w++ {
			ww.Add(1)
			go func(w int) {
				defer ww.Done()
				e := &ev{run: fmt.Sprintf("c%d", w)}
				if _, err := s.Apply(ctx, []Event{e.start("conc", nil, nil)}); err != nil {
					errs <- err
					return
				}
				step := int64(0)
				for b := 0; b < batches; b++ {
					var evs []Event
					for i := 0; i < per; i++ {
						evs = append(evs, e.metrics(step, map[string]float64{"loss": float64(step)}))
						step++
					}
					res, err := s.Apply(ctx, evs)
					if err == nil && len(res.Errors) > 0 {
						err = fmt.Errorf("%+v", res.Errors[0])
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}(w)
		}
		ww.Wait()
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if readErr != nil {
			t.Fatal(readErr)
		}
		page, err := s.ListRuns(ctx, ListQuery{Experiment: "conc"})
		if err != nil || len(page.Runs) != writers {
			t.Fatalf("runs: %d %v", len(page.Runs), err)
		}
		for _, r := range page.Runs {
			if m := r.Metrics["loss"]; m.Count != batches*per || m.Max != batches*per-1 {
				t.Fatalf("run %s: %+v", r.ID, m)
			}
		}
	})
}

func TestCanResume(t *testing.T) {
	f := func(from, to Status, want bool) {
		t.Helper()
		if got := CanResume(from, to); got != want {
			t.Errorf("CanResume(%s, %s) = %v, want %v", from, to, got, want)
		}
	}
	for _, from := range []Status{StatusFinished, StatusFailed, StatusStopped} {
		f(from, StatusRunning, true)
		f(from, StatusQueued, true)
		f(from, StatusFinished, false)
		f(from, StatusStopped, false)
	}
	f(StatusRunning, StatusRunning, false)
	f(StatusQueued, StatusRunning, false)
	f(StatusRunning, StatusQueued, false)
}

// TestResume: only run_resume leaves a terminal status; the same run then
// continues with its data kept, and ends again.
func TestResume(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		refused := func(what string, e Event, code Code) {
			t.Helper()
			res, err := s.Apply(ctx, []Event{e})
			if err != nil || len(res.Errors) != 1 || res.Errors[0].Code != code {
				t.Fatalf("%s: want %s, got %+v %v", what, code, res, err)
			}
		}
		w1 := &ev{run: "r", writer: "w1"}
		mustApply(t, s, w1.start("exp", map[string]any{"lr": 0.1}, map[string]string{"team": "a"}),
			w1.next(Event{Type: EventProgress, Step: Ptr[int64](20), TotalSteps: Ptr[int64](40)}),
			w1.metrics(10, map[string]float64{"loss": 1}),
			w1.next(Event{Type: EventCheckpoint, Path: "step-10.pt", Step: Ptr[int64](10), Epoch: Ptr(1.0)}),
			w1.metrics(20, map[string]float64{"loss": 0.5}),
			w1.next(Event{Type: EventLog, Stream: "stdout", Lines: []string{"first process"}}))
		refused("resume of a running run", w1.next(Event{Type: EventRunResume, Status: StatusRunning}), CodeInvalidTransition)
		mustApply(t, s, w1.next(Event{Type: EventRunEnd, Status: StatusStopped, Error: "stopped by SIGTERM", Traceback: "tb", ExitCode: Ptr(143)}))

		// Ordinary events keep the guard, from any writer.
		w2 := &ev{run: "r", writer: "w2"}
		refused("status running after the end", w2.next(Event{Type: EventStatus, Status: StatusRunning}), CodeInvalidTransition)
		refused("run_start on a stopped run", w2.start("exp", nil, nil), CodeInvalidTransition)
		refused("resume to a terminal status", w2.next(Event{Type: EventRunResume, Status: StatusFinished}), CodeInvalidTransition)
		refused("resume from another run's checkpoint", w2.next(Event{Type: EventRunResume, Path: "nope.pt"}), CodeNotFound)
		refused("resume of an unknown run", (&ev{run: "ghost"}).next(Event{Type: EventRunResume}), CodeUnknownRun)
		if r, _ := s.GetRun(ctx, "r"); r.Status != StatusStopped || r.Ended == nil {
			t.Fatalf("refused events changed the run: %+v", r)
		}

		mustApply(t, s, w2.next(Event{Type: EventRunResume, Status: StatusQueued, Path: "step-10.pt",
			Tags: map[string]string{"fw.job": "resume"}, Source: &Source{Host: "h2", PID: 4242}}))
		r, err := s.GetRun(ctx, "r")
		if err != nil || r.Status != StatusQueued || r.Ended != nil || r.Error != "" || r.Traceback != "" || r.ExitCode != nil || r.Started == nil {
			t.Fatalf("resumed run: %+v %v", r, err)
		}
		if r.Progress.Step != 10 || r.Progress.Epoch != 1 || r.Progress.TotalSteps != 40 || r.Source.Host != "h2" || r.Source.PID != 4242 {
			t.Fatalf("resumed run's progress and source: %+v %+v", r.Progress, r.Source)
		}
		if r.Params["lr"] != 0.1 || r.Tags["team"] != "a" || r.Tags["fw.job"] != "resume" || r.Metrics["loss"].Count != 2 {
			t.Fatalf("resumed run lost data: %+v", r)
		}
		// A new process: run_start with the same experiment moves it to running.
		w3 := &ev{run: "r", writer: "w3"}
		mustApply(t, s, w3.start("exp", map[string]any{"lr": 0.1}, nil),
			w3.metrics(11, map[string]float64{"loss": 0.9}),
			w3.metrics(20, map[string]float64{"loss": 0.4}),
			w3.next(Event{Type: EventLog, Stream: "stdout", Lines: []string{"second process"}}))
		refused("a second resume while running", w3.next(Event{Type: EventRunResume}), CodeInvalidTransition)
		mustApply(t, s, w3.next(Event{Type: EventRunEnd}))
		r, _ = s.GetRun(ctx, "r")
		if r.Status != StatusFinished || r.Ended == nil || r.Error != "" || r.ExitCode != nil {
			t.Fatalf("ended again: %+v", r)
		}
		sr, err := s.Metrics(ctx, "r", MetricsQuery{Keys: []string{"loss"}})
		if err != nil || len(sr) != 1 || len(sr[0].Buckets) != 3 || sr[0].Buckets[2].Last != 0.4 {
			t.Fatalf("metrics (want steps 10, 11, 20 with 20 replaced): %+v %v", sr, err)
		}
		logs, _ := s.Logs(ctx, "r", LogQuery{})
		if len(logs) != 2 || logs[0].Line != "first process" || logs[1].Line != "second process" {
			t.Fatalf("logs: %+v", logs)
		}
		if cks, _ := s.Checkpoints(ctx, "r"); len(cks) != 1 {
			t.Fatalf("checkpoints: %+v", cks)
		}
		// The resume is a fresh start of the same run: a finished run can be resumed too.
		mustApply(t, s, w3.next(Event{Type: EventRunResume}))
		if r, _ = s.GetRun(ctx, "r"); r.Status != StatusRunning {
			t.Fatalf("resumed to running: %+v", r)
		}
	})
}

// An ingest body of many tiny events is refused at MaxBatchEvents while it
// is split, without first splitting the whole body: the work and memory stop
// at the limit. Data after the array is refused too.
func TestDecodeEventsStopsAtTheLimit(t *testing.T) {
	body := []byte("[" + strings.Repeat("{},", 1_000_000) + "{}]") // 3 MB, a million events
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := DecodeEvents(body)
	runtime.ReadMemStats(&after)
	if ErrorCode(err) != CodeBatchTooLarge {
		t.Fatalf("a million events: %v, want batch_too_large", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 2<<20 {
		t.Errorf("refusing a %d-byte body allocated %d bytes, want under 2 MiB (the body was split past the limit)", len(body), got)
	}
	lines := []byte(strings.Repeat("{}\n", MaxBatchEvents+1))
	if _, err := DecodeEvents(lines); ErrorCode(err) != CodeBatchTooLarge {
		t.Fatalf("%d JSON lines: %v, want batch_too_large", MaxBatchEvents+1, err)
	}
	if evs, err := DecodeEvents([]byte(" [ {\"type\":\"metrics\"} , {} ] \n")); err != nil || len(evs) != 2 {
		t.Fatalf("two events: %v %v", evs, err)
	}
	for _, bad := range []string{`[{}] x`, `[{},]`, `[{}`, `[1 2]`} {
		if _, err := DecodeEvents([]byte(bad)); ErrorCode(err) != CodeInvalidJSON {
			t.Errorf("%q: %v, want invalid_json", bad, err)
		}
	}
}
