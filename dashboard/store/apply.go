package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fw-serve/fw/dashboard/query"
)

// DefaultWriter is the writer name used when an event has none.
const DefaultWriter = "default"

type runState struct {
	rid          int64
	id           string
	status       Status
	experimentID string
	started      bool
	writers      map[string]*writerState
	touched      bool
}

type writerState struct {
	seq   int64
	dirty bool
}

// applier holds the state of one Apply inside the writer's transaction.
type applier struct {
	s      *sqlStore
	tx     *sql.Tx
	now    int64
	runs   map[string]*runState
	points []point
	res    *ApplyResult
	// feed holds the feed entry of each event (Config.Feed), queued when
	// the event is stored; nil without a feed.
	feed []*FeedEntry
	// counts are the changes of experiment_run_counts (flushCounts).
	counts map[countKey]int64
	// sysKeys are the system metric keys of the batch's points, left out of
	// the experiment summary.
	sysKeys map[int64]bool
	// expTouched holds the new updated time of experiments that got a run.
	expTouched map[string]int64
}

// Apply implements Store.
func (s *sqlStore) Apply(ctx context.Context, events []Event) (ApplyResult, error) {
	if len(events) > MaxBatchEvents {
		return ApplyResult{}, errf(CodeBatchTooLarge, "%d events in one batch; the limit is %d", len(events), MaxBatchEvents)
	}
	values := 0
	for i := range events {
		values += len(events[i].Values) + len(events[i].Lines) + len(events[i].Params)
	}
	if values > MaxBatchValues {
		return ApplyResult{}, errf(CodeBatchTooLarge, "%d values and lines in one batch; the limit is %d", values, MaxBatchValues)
	}
	// Feed entries are made here, outside the writer; it only picks those
	// of the events it stores.
	var feed []*FeedEntry
	if s.cfg.Feed != nil {
		feed = make([]*FeedEntry, len(events))
		for i := range events {
			ev := &events[i]
			if ev.decodeErr != nil {
				continue
			}
			if typ, data, ok := s.cfg.Feed(ev); ok {
				feed[i] = &FeedEntry{Type: typ, RunID: ev.RunID, Seq: ev.Seq, Time: ev.Time.Time, Data: data}
			}
		}
	}
	var res ApplyResult
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res = ApplyResult{}
		a := &applier{s: s, tx: tx, now: time.Now().UnixNano(), runs: map[string]*runState{}, res: &res, feed: feed}
		return a.apply(ctx, events)
	}, nil)
	if err != nil {
		return ApplyResult{}, fmt.Errorf("applying %d events: %w", len(events), err)
	}
	return res, nil
}

func (a *applier) apply(ctx context.Context, events []Event) error {
	for i := range events {
		ev := &events[i]
		if err := a.one(ctx, i, ev); err != nil {
			if ee, ok := err.(*EventError); ok {
				ee.Index = i
				ee.RunID, ee.Seq = ev.RunID, ev.Seq
				a.res.Errors = append(a.res.Errors, *ee)
				continue
			}
			return err
		}
	}
	ids := make([]string, 0, len(a.runs))
	for id := range a.runs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		rs := a.runs[id]
		if rs == nil {
			continue
		}
		writers := make([]string, 0, len(rs.writers))
		for w := range rs.writers {
			writers = append(writers, w)
		}
		slices.Sort(writers)
		for _, w := range writers {
			ws := rs.writers[w]
			if ws.dirty {
				if _, err := a.s.exec(ctx, a.tx, `UPDATE run_writers SET seq = ? WHERE run_rid = ? AND writer = ?`, ws.seq, rs.rid, w); err != nil {
					return fmt.Errorf("recording the applied seq of run %s: %w", id, err)
				}
			}
			a.res.Acked = append(a.res.Acked, Ack{RunID: id, Writer: w, Seq: ws.seq})
		}
		if rs.touched {
			if _, err := a.s.exec(ctx, a.tx, `UPDATE runs SET updated = ? WHERE rid = ?`, a.now, rs.rid); err != nil {
				return fmt.Errorf("touching run %s: %w", id, err)
			}
		}
	}
	// Then the experiment summary: the experiments' rows first, in ID
	// order, then their metric rows and counts (the order DeleteRun and
	// Reconcile lock them in).
	if err := a.lockExperiments(ctx); err != nil {
		return err
	}
	if err := a.flushPoints(ctx); err != nil {
		return err
	}
	if err := a.flushCounts(ctx); err != nil {
		return err
	}
	return nil
}

func evErr(code Code, format string, args ...any) *EventError {
	return &EventError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// one applies one event; an *EventError refuses just this event, any other
// error aborts the batch.
func (a *applier) one(ctx context.Context, i int, ev *Event) error {
	if ev.decodeErr != nil {
		return &EventError{Code: ev.decodeErr.Code, Msg: ev.decodeErr.Msg}
	}
	if err := ValidateID(ev.RunID); err != nil {
		return evErr(CodeInvalidID, "run_id: %v", err)
	}
	if ev.Seq < 1 {
		return evErr(CodeInvalidEvent, "seq must be >= 1 (got %d)", ev.Seq)
	}
	writer := ev.Writer
	if writer == "" {
		writer = DefaultWriter
	}
	if err := ValidateKey(writer); err != nil {
		return evErr(CodeInvalidKey, "writer: %v", err)
	}
	t := a.now
	if !ev.Time.IsZero() {
		if y := ev.Time.Year(); y < 1678 || y > 2261 {
			return evErr(CodeInvalidEvent, "time %s out of range", ev.Time.Format(time.RFC3339))
		}
		t = ev.Time.UnixNano()
	}
	rs, err := a.run(ctx, ev.RunID)
	if err != nil {
		return err
	}
	if rs == nil {
		if ev.Type != EventRunStart {
			return evErr(CodeUnknownRun, "run %s has no run_start", ev.RunID)
		}
		if rs, err = a.createRun(ctx, ev, t); err != nil {
			return err
		}
	}
	ws, err := a.writer(ctx, rs, writer)
	if err != nil {
		return err
	}
	if ev.Seq <= ws.seq {
		a.res.Duplicates++
		return nil
	}
	if err := a.handle(ctx, rs, ev, t); err != nil {
		return err
	}
	if a.feed != nil && a.feed[i] != nil {
		e := *a.feed[i]
		e.Time = time.Unix(0, t)
		a.s.queueFeed(e)
	}
	ws.seq = ev.Seq
	ws.dirty = true
	rs.touched = true
	a.res.Applied++
	return nil
}

// run loads a run's state (nil when it does not exist).
func (a *applier) run(ctx context.Context, id string) (*runState, error) {
	if rs, ok := a.runs[id]; ok && rs != nil {
		return rs, nil
	}
	rs := &runState{id: id, writers: map[string]*writerState{}}
	var started sql.NullInt64
	err := a.s.queryRow(ctx, a.tx, `SELECT rid, status, experiment_id, started FROM runs WHERE id = ?`, id).Scan(&rs.rid, &rs.status, &rs.experimentID, &started)
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("loading run %s: %w", id, err)
	}
	rs.started = started.Valid
	a.runs[id] = rs
	return rs, nil
}

// writer loads (creating) the high-water mark of (run, writer), locking the
// row on PostgreSQL so concurrent dashboards cannot apply the same events.
func (a *applier) writer(ctx context.Context, rs *runState, w string) (*writerState, error) {
	if ws, ok := rs.writers[w]; ok {
		return ws, nil
	}
	if _, err := a.s.exec(ctx, a.tx, `INSERT INTO run_writers (run_rid, writer, seq) VALUES (?, ?, 0) ON CONFLICT (run_rid, writer) DO NOTHING`, rs.rid, w); err != nil {
		return nil, fmt.Errorf("creating writer %s of run %s: %w", w, rs.id, err)
	}
	lock := ""
	if a.s.d == query.Postgres {
		lock = " FOR UPDATE"
	}
	ws := &writerState{}
	if err := a.s.queryRow(ctx, a.tx, `SELECT seq FROM run_writers WHERE run_rid = ? AND writer = ?`+lock, rs.rid, w).Scan(&ws.seq); err != nil {
		return nil, fmt.Errorf("loading writer %s of run %s: %w", w, rs.id, err)
	}
	rs.writers[w] = ws
	return ws, nil
}

// handle applies a non-duplicate event to an existing run.
func (a *applier) handle(ctx context.Context, rs *runState, ev *Event, t int64) error {
	switch ev.Type {
	case EventRunStart:
		var expName string
		if err := a.s.queryRow(ctx, a.tx, `SELECT name FROM experiments WHERE id = ?`, rs.experimentID).Scan(&expName); err != nil {
			return fmt.Errorf("reading the experiment of run %s: %w", rs.id, err)
		}
		if ev.ExperimentID != "" && rs.experimentID != ev.ExperimentID {
			return evErr(CodeRunConflict, "run %s belongs to experiment %q, not to the experiment with ID %s", rs.id, expName, ev.ExperimentID)
		}
		if ev.ExperimentID == "" && expName != ev.Experiment {
			return evErr(CodeRunConflict, "run %s belongs to experiment %q, not %q", rs.id, expName, ev.Experiment)
		}
		if err := validateTags(ev.Tags, nil, MaxTagValueLen); err != nil {
			return err
		}
		if err := a.writeParams(ctx, rs, ev.Params); err != nil {
			return err
		}
		if err := a.writeTags(ctx, rs.rid, ev.Tags, nil); err != nil {
			return err
		}
		to := ev.Status
		if to == "" {
			to = StatusRunning
		}
		if to != rs.status {
			return a.setStatus(ctx, rs, &Event{Status: to}, t)
		}
		return nil
	case EventParam:
		if len(ev.Params) == 0 {
			return evErr(CodeInvalidEvent, "param event without params")
		}
		return a.writeParams(ctx, rs, ev.Params)
	case EventTag:
		if len(ev.Tags) == 0 && len(ev.DeleteTags) == 0 {
			return evErr(CodeInvalidEvent, "tag event without tags or delete_tags")
		}
		return a.writeTags(ctx, rs.rid, ev.Tags, ev.DeleteTags)
	case EventMetrics, EventMetric:
		if ev.Step == nil {
			return evErr(CodeInvalidEvent, "%s event without step", ev.Type)
		}
		values := ev.Values
		if ev.Type == EventMetric {
			if ev.Key == "" || ev.Value == nil {
				return evErr(CodeInvalidEvent, "metric event needs key and value")
			}
			values = map[string]Float{ev.Key: *ev.Value}
		}
		return a.addValues(ctx, rs, kindMetric, *ev.Step, values, t)
	case EventSystem:
		step := t / 1e6
		if ev.Step != nil {
			step = *ev.Step
		}
		return a.addValues(ctx, rs, kindSystem, step, ev.Values, t)
	case EventProgress:
		if ev.Step == nil && ev.TotalSteps == nil && ev.Epoch == nil && ev.TotalEpochs == nil {
			return evErr(CodeInvalidEvent, "progress event without step, total_steps, epoch or total_epochs")
		}
		for _, f := range []*float64{ev.Epoch, ev.TotalEpochs} {
			if f != nil && (math.IsNaN(*f) || math.IsInf(*f, 0) || *f < 0) {
				return evErr(CodeInvalidEvent, "epoch values must be finite and >= 0")
			}
		}
		if (ev.Step != nil && *ev.Step < 0) || (ev.TotalSteps != nil && *ev.TotalSteps < 0) {
			return evErr(CodeInvalidEvent, "steps must be >= 0")
		}
		_, err := a.s.exec(ctx, a.tx, `UPDATE runs SET step = COALESCE(?, step), total_steps = COALESCE(?, total_steps), epoch = COALESCE(?, epoch), total_epochs = COALESCE(?, total_epochs), progress_time = ? WHERE rid = ?`,
			ptrArg(ev.Step), ptrArg(ev.TotalSteps), ptrArg(ev.Epoch), ptrArg(ev.TotalEpochs), t, rs.rid)
		if err != nil {
			return fmt.Errorf("writing progress of run %s: %w", rs.id, err)
		}
		return nil
	case EventLog:
		if ev.Stream != "stdout" && ev.Stream != "stderr" {
			return evErr(CodeInvalidEvent, "log stream must be stdout or stderr, not %q", ev.Stream)
		}
		if len(ev.Lines) == 0 {
			return evErr(CodeInvalidEvent, "log event without lines")
		}
		return a.writeLogs(ctx, rs, ev.Stream, ev.Lines, t)
	case EventCheckpoint:
		if err := ValidateRelPath(ev.Path); err != nil {
			return evErr(CodeInvalidPath, "checkpoint: %v", err)
		}
		var step int64
		if ev.Step != nil {
			step = *ev.Step
		}
		if step < 0 {
			return evErr(CodeInvalidEvent, "step must be >= 0")
		}
		for k := range ev.Values {
			if err := ValidateKey(k); err != nil {
				return evErr(CodeInvalidKey, "checkpoint metric: %v", err)
			}
		}
		vals := ev.Values
		if vals == nil {
			vals = map[string]Float{}
		}
		mj, err := json.Marshal(vals)
		if err != nil {
			return evErr(CodeInvalidType, "checkpoint metrics: %v", err)
		}
		_, err = a.s.exec(ctx, a.tx, `INSERT INTO checkpoints (run_rid, path, step, epoch, metrics, time) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (run_rid, path) DO UPDATE SET step = excluded.step, epoch = excluded.epoch, metrics = excluded.metrics, time = excluded.time`,
			rs.rid, ev.Path, step, ptrArg(ev.Epoch), string(mj), t)
		if err != nil {
			return fmt.Errorf("writing checkpoint %q of run %s: %w", ev.Path, rs.id, err)
		}
		return nil
	case EventArtifact:
		if err := ValidateRelPath(ev.Path); err != nil {
			return evErr(CodeInvalidPath, "artifact: %v", err)
		}
		if ev.Size == nil || *ev.Size < 0 {
			return evErr(CodeInvalidEvent, "artifact needs size >= 0")
		}
		_, err := a.s.exec(ctx, a.tx, `INSERT INTO artifacts (run_rid, path, size, time) VALUES (?, ?, ?, ?)
			ON CONFLICT (run_rid, path) DO UPDATE SET size = excluded.size, time = excluded.time`, rs.rid, ev.Path, *ev.Size, t)
		if err != nil {
			return fmt.Errorf("writing artifact %q of run %s: %w", ev.Path, rs.id, err)
		}
		return nil
	case EventStatus, EventRunEnd:
		e := *ev
		if e.Type == EventRunEnd && e.Status == "" {
			e.Status = StatusFinished
		}
		if !e.Status.Valid() {
			return evErr(CodeInvalidEvent, "unknown status %q", e.Status)
		}
		if e.Type == EventRunEnd && !e.Status.Terminal() {
			return evErr(CodeInvalidTransition, "run_end needs finished, failed or stopped, not %q", e.Status)
		}
		return a.setStatus(ctx, rs, &e, t)
	case EventRunResume:
		return a.resume(ctx, rs, ev, t)
	}
	return evErr(CodeInvalidEvent, "unknown event type %q", ev.Type)
}
