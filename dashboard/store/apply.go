package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fw-serve/fw/dashboard/query"
)

// Metric key kinds (metric_keys.kind).
const (
	kindMetric = 0
	kindSystem = 1
)

// rollupShifts are the rollup block sizes (2^shift steps: 16, 256, 4096).
func rollupShifts() [3]uint { return [3]uint{4, 8, 12} }

// maxParamJSON is the largest param value, as JSON, in bytes.
const maxParamJSON = 65536

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

type point struct {
	rid   int64
	key   int64
	step  int64
	value float64
	wall  int64
	order int
}

// applier holds the state of one Apply inside the writer's transaction.
type applier struct {
	s      *sqlStore
	tx     *sql.Tx
	now    int64
	runs   map[string]*runState
	points []point
	res    *ApplyResult
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
	var res ApplyResult
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res = ApplyResult{}
		a := &applier{s: s, tx: tx, now: time.Now().UnixNano(), runs: map[string]*runState{}, res: &res}
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
	if err := a.flushPoints(ctx); err != nil {
		return err
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
	err := a.tx.QueryRowContext(ctx, a.s.q(`SELECT rid, status, experiment_id, started FROM runs WHERE id = ?`), id).Scan(&rs.rid, &rs.status, &rs.experimentID, &started)
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
	if err := a.tx.QueryRowContext(ctx, a.s.q(`SELECT seq FROM run_writers WHERE run_rid = ? AND writer = ?`+lock), rs.rid, w).Scan(&ws.seq); err != nil {
		return nil, fmt.Errorf("loading writer %s of run %s: %w", w, rs.id, err)
	}
	rs.writers[w] = ws
	return ws, nil
}

// experimentID returns the ID of the named experiment, creating it.
func (a *applier) experimentID(ctx context.Context, name, description string, t int64) (string, error) {
	var id string
	err := a.tx.QueryRowContext(ctx, a.s.q(`SELECT id FROM experiments WHERE name = ?`), name).Scan(&id)
	if err == nil {
		return id, nil
	}
	if !isNoRows(err) {
		return "", fmt.Errorf("looking up experiment %q: %w", name, err)
	}
	id = NewID()
	if _, err := a.s.exec(ctx, a.tx, `INSERT INTO experiments (id, name, description, created, updated, archived) VALUES (?, ?, ?, ?, ?, 0)`, id, name, description, t, t); err != nil {
		return "", fmt.Errorf("creating experiment %q: %w", name, err)
	}
	return id, nil
}

func (a *applier) createRun(ctx context.Context, ev *Event, t int64) (*runState, error) {
	if err := ValidateName(ev.Experiment); err != nil {
		return nil, evErr(CodeInvalidName, "experiment: %v", err)
	}
	name := ev.Name
	if name == "" {
		name = RunName(ev.RunID) // readable, like W&B's; the ID stays the key
	}
	if err := ValidateName(name); err != nil {
		return nil, evErr(CodeInvalidName, "name: %v", err)
	}
	if err := validateText(ev.Description, 65536, true); err != nil {
		return nil, evErr(CodeInvalidKey, "description: %v", err)
	}
	status := ev.Status
	if status == "" {
		status = StatusRunning
	}
	if status != StatusRunning && status != StatusQueued {
		return nil, evErr(CodeInvalidTransition, "a run starts queued or running, not %q", status)
	}
	if ev.ParentRunID != "" {
		if err := ValidateID(ev.ParentRunID); err != nil {
			return nil, evErr(CodeInvalidID, "parent_run_id: %v", err)
		}
	}
	if ev.ParentCheckpoint != "" {
		if err := ValidateRelPath(ev.ParentCheckpoint); err != nil {
			return nil, evErr(CodeInvalidPath, "parent_checkpoint: %v", err)
		}
	}
	// Params and tags are checked before anything is written; handle records
	// them (and the seq), as for a resumed start.
	if _, perr := prepareParams(ev.Params); perr != nil {
		return nil, perr
	}
	if err := validateTags(ev.Tags, nil); err != nil {
		return nil, err
	}
	src := Source{}
	if ev.Source != nil {
		src = *ev.Source
	}
	if err := validateSource(src); err != nil {
		return nil, err
	}
	expID, err := a.experimentID(ctx, ev.Experiment, "", t)
	if err != nil {
		return nil, err
	}
	var args any
	if len(src.Args) > 0 {
		b, _ := json.Marshal(src.Args)
		args = string(b)
	}
	var started any
	if status == StatusRunning {
		started = t
	}
	rs := &runState{id: ev.RunID, status: status, experimentID: expID, started: started != nil, writers: map[string]*writerState{}}
	err = a.tx.QueryRowContext(ctx, a.s.q(`INSERT INTO runs (id, experiment_id, name, status, created, updated, started, source_recipe, source_command, source_args, git_commit, host, pid, parent_run_id, parent_checkpoint)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING rid`),
		ev.RunID, expID, name, string(status), t, t, started, nullStr(src.Recipe), nullStr(src.Command), args, nullStr(src.GitCommit), nullStr(src.Host), nullInt(src.PID), nullStr(ev.ParentRunID), nullStr(ev.ParentCheckpoint)).Scan(&rs.rid)
	if err != nil {
		return nil, fmt.Errorf("creating run %s: %w", ev.RunID, err)
	}
	if _, err := a.s.exec(ctx, a.tx, `UPDATE experiments SET updated = ? WHERE id = ?`, t, expID); err != nil {
		return nil, fmt.Errorf("touching experiment %s: %w", expID, err)
	}
	a.runs[ev.RunID] = rs
	return rs, nil
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullInt(v int) any {
	if v == 0 {
		return nil
	}
	return int64(v)
}

func validateSource(src Source) *EventError {
	for _, f := range []struct{ name, v string }{{"recipe", src.Recipe}, {"command", src.Command}, {"git_commit", src.GitCommit}, {"host", src.Host}} {
		if err := validateText(f.v, 4096, false); err != nil {
			return evErr(CodeInvalidKey, "source.%s: %v", f.name, err)
		}
	}
	if len(src.Args) > 1000 {
		return evErr(CodeInvalidEvent, "source.args: more than 1000 arguments")
	}
	for _, s := range src.Args {
		if err := validateText(s, 65536, true); err != nil {
			return evErr(CodeInvalidKey, "source.args: %v", err)
		}
	}
	return nil
}

func validateTags(set map[string]string, del []string) *EventError {
	for k, v := range set {
		if err := ValidateKey(k); err != nil {
			return evErr(CodeInvalidKey, "tag: %v", err)
		}
		if err := validateText(v, MaxTagValueLen, false); err != nil {
			return evErr(CodeInvalidKey, "tag %q: %v", k, err)
		}
	}
	for _, k := range del {
		if err := ValidateKey(k); err != nil {
			return evErr(CodeInvalidKey, "delete_tags: %v", err)
		}
	}
	return nil
}

// paramValue is a param in its stored forms.
type paramValue struct {
	key  string
	json string
	num  any // float64 or nil
	str  any // string or nil
}

func prepareParams(in map[string]any) ([]paramValue, *EventError) {
	out := make([]paramValue, 0, len(in))
	for k, v := range in {
		if err := ValidateKey(k); err != nil {
			return nil, evErr(CodeInvalidKey, "param: %v", err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, evErr(CodeInvalidType, "param %q: %v", k, err)
		}
		if len(b) > maxParamJSON {
			return nil, evErr(CodeInvalidEvent, "param %q: value longer than %d bytes as JSON", k, maxParamJSON)
		}
		// Canonical form: decode and encode again (sorted keys, one spelling
		// per number).
		var canon any
		if err := json.Unmarshal(b, &canon); err != nil {
			return nil, evErr(CodeInvalidType, "param %q: %v", k, err)
		}
		b, _ = json.Marshal(canon)
		p := paramValue{key: k, json: string(b)}
		switch c := canon.(type) {
		case float64:
			p.num = c
		case string:
			p.str = c
		case bool:
			p.str = strconv.FormatBool(c)
		default:
			p.str = string(b)
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(x, y paramValue) int { return strings.Compare(x.key, y.key) })
	return out, nil
}

// writeParams enforces write-once then inserts the new params.
func (a *applier) writeParams(ctx context.Context, rs *runState, in map[string]any) error {
	params, perr := prepareParams(in)
	if perr != nil {
		return perr
	}
	var fresh []paramValue
	for _, p := range params {
		var old string
		err := a.tx.QueryRowContext(ctx, a.s.q(`SELECT value_json FROM params WHERE run_rid = ? AND key = ?`), rs.rid, p.key).Scan(&old)
		switch {
		case isNoRows(err):
			fresh = append(fresh, p)
		case err != nil:
			return fmt.Errorf("reading param %q of run %s: %w", p.key, rs.id, err)
		case old != p.json:
			return evErr(CodeParamConflict, "param %q is already %s; params are write-once (got %s)", p.key, old, p.json)
		}
	}
	for _, p := range fresh {
		if _, err := a.s.exec(ctx, a.tx, `INSERT INTO params (run_rid, key, value_json, value_num, value_str) VALUES (?, ?, ?, ?, ?)`, rs.rid, p.key, p.json, p.num, p.str); err != nil {
			return fmt.Errorf("writing param %q of run %s: %w", p.key, rs.id, err)
		}
	}
	return nil
}

func (a *applier) writeTags(ctx context.Context, rid int64, set map[string]string, del []string) error {
	if err := validateTags(set, del); err != nil {
		return err
	}
	return writeRunTags(ctx, a.s, a.tx, rid, set, del)
}

func writeRunTags(ctx context.Context, s *sqlStore, tx *sql.Tx, rid int64, set map[string]string, del []string) error {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if _, err := s.exec(ctx, tx, `INSERT INTO run_tags (run_rid, key, value) VALUES (?, ?, ?) ON CONFLICT (run_rid, key) DO UPDATE SET value = excluded.value`, rid, k, set[k]); err != nil {
			return fmt.Errorf("setting tag %q: %w", k, err)
		}
	}
	for _, k := range del {
		if _, err := s.exec(ctx, tx, `DELETE FROM run_tags WHERE run_rid = ? AND key = ?`, rid, k); err != nil {
			return fmt.Errorf("deleting tag %q: %w", k, err)
		}
	}
	return nil
}

// keyID returns the ID of a metric key, creating it.
func (a *applier) keyID(ctx context.Context, kind int, name string) (int64, error) {
	ref := keyRef{kind, name}
	if id, ok := a.s.keys[ref]; ok {
		return id, nil
	}
	if _, err := a.s.exec(ctx, a.tx, `INSERT INTO metric_keys (kind, name) VALUES (?, ?) ON CONFLICT (kind, name) DO NOTHING`, kind, name); err != nil {
		return 0, fmt.Errorf("creating metric key %q: %w", name, err)
	}
	var id int64
	if err := a.tx.QueryRowContext(ctx, a.s.q(`SELECT id FROM metric_keys WHERE kind = ? AND name = ?`), kind, name).Scan(&id); err != nil {
		return 0, fmt.Errorf("reading metric key %q: %w", name, err)
	}
	a.s.keys[ref] = id
	return id, nil
}

// addValues validates and queues metric values of one event.
func (a *applier) addValues(ctx context.Context, rs *runState, kind int, step int64, values map[string]Float, t int64) error {
	if len(values) == 0 {
		return evErr(CodeInvalidEvent, "no values")
	}
	if step < 0 {
		return evErr(CodeInvalidEvent, "step must be >= 0 (got %d)", step)
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		if err := ValidateKey(k); err != nil {
			return evErr(CodeInvalidKey, "metric: %v", err)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		id, err := a.keyID(ctx, kind, k)
		if err != nil {
			return err
		}
		a.points = append(a.points, point{rid: rs.rid, key: id, step: step, value: float64(values[k]), wall: t, order: len(a.points)})
	}
	return nil
}

// handle applies a non-duplicate event to an existing run.
func (a *applier) handle(ctx context.Context, rs *runState, ev *Event, t int64) error {
	switch ev.Type {
	case EventRunStart:
		var expName string
		if err := a.tx.QueryRowContext(ctx, a.s.q(`SELECT name FROM experiments WHERE id = ?`), rs.experimentID).Scan(&expName); err != nil {
			return fmt.Errorf("reading the experiment of run %s: %w", rs.id, err)
		}
		if expName != ev.Experiment {
			return evErr(CodeRunConflict, "run %s belongs to experiment %q, not %q", rs.id, expName, ev.Experiment)
		}
		if err := validateTags(ev.Tags, nil); err != nil {
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

func ptrArg[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func (a *applier) setStatus(ctx context.Context, rs *runState, ev *Event, t int64) error {
	if !CanTransition(rs.status, ev.Status) {
		return evErr(CodeInvalidTransition, "run %s cannot go from %s to %s", rs.id, rs.status, ev.Status)
	}
	if err := validateText(ev.Error, 65536, true); err != nil {
		return evErr(CodeInvalidKey, "error: %v", err)
	}
	if len(ev.Traceback) > 1<<20 {
		return evErr(CodeInvalidEvent, "traceback longer than 1 MiB")
	}
	if rs.status == ev.Status && !ev.Status.Terminal() {
		return nil
	}
	var started, ended any
	if ev.Status == StatusRunning && !rs.started {
		started = t
		rs.started = true
	}
	if ev.Status.Terminal() {
		ended = t
	}
	_, err := a.s.exec(ctx, a.tx, `UPDATE runs SET status = ?, started = COALESCE(started, ?), ended = COALESCE(?, ended),
		error = COALESCE(?, error), traceback = COALESCE(?, traceback), exit_code = COALESCE(?, exit_code) WHERE rid = ?`,
		string(ev.Status), started, ended, nullStr(ev.Error), nullStr(strings.ToValidUTF8(ev.Traceback, "\uFFFD")), ptrArg(ev.ExitCode), rs.rid)
	if err != nil {
		return fmt.Errorf("setting status of run %s: %w", rs.id, err)
	}
	rs.status = ev.Status
	return nil
}

// resume reopens a terminal run (run_resume): status queued or running
// again, ended, error, traceback and exit code cleared; params, tags,
// metrics, logs and checkpoints kept. With a checkpoint path (one of the
// run's), progress goes back to its step and epoch; with a source, the
// process fields (command, args, host, pid) are replaced, so Reconcile
// watches the new process.
func (a *applier) resume(ctx context.Context, rs *runState, ev *Event, t int64) error {
	to := ev.Status
	if to == "" {
		to = StatusRunning
	}
	if !to.Valid() {
		return evErr(CodeInvalidEvent, "unknown status %q", to)
	}
	if !CanResume(rs.status, to) {
		if !rs.status.Terminal() {
			return evErr(CodeInvalidTransition, "run %s is %s; only a finished, failed or stopped run can be resumed", rs.id, rs.status)
		}
		return evErr(CodeInvalidTransition, "run_resume moves run %s to queued or running, not %q", rs.id, to)
	}
	if err := validateTags(ev.Tags, nil); err != nil {
		return err
	}
	var src *Source
	if ev.Source != nil {
		if err := validateSource(*ev.Source); err != nil {
			return err
		}
		src = ev.Source
	}
	var step, epoch, ptime any
	if ev.Path != "" {
		if err := ValidateRelPath(ev.Path); err != nil {
			return evErr(CodeInvalidPath, "checkpoint: %v", err)
		}
		var st int64
		var ep sql.NullFloat64
		err := a.tx.QueryRowContext(ctx, a.s.q(`SELECT step, epoch FROM checkpoints WHERE run_rid = ? AND path = ?`), rs.rid, ev.Path).Scan(&st, &ep)
		if isNoRows(err) {
			return evErr(CodeNotFound, "run %s has no checkpoint %q", rs.id, ev.Path)
		}
		if err != nil {
			return fmt.Errorf("reading checkpoint %q of run %s: %w", ev.Path, rs.id, err)
		}
		step, ptime = st, t
		if ep.Valid {
			epoch = ep.Float64
		}
	}
	var started any
	if to == StatusRunning && !rs.started {
		started = t
		rs.started = true
	}
	var args any
	if src != nil && len(src.Args) > 0 {
		b, _ := json.Marshal(src.Args)
		args = string(b)
	}
	var command, host, pid any
	if src != nil {
		command, host, pid = nullStr(src.Command), nullStr(src.Host), nullInt(src.PID)
	}
	_, err := a.s.exec(ctx, a.tx, `UPDATE runs SET status = ?, started = COALESCE(started, ?), ended = NULL, error = NULL, traceback = NULL, exit_code = NULL,
		step = COALESCE(?, step), epoch = COALESCE(?, epoch), progress_time = COALESCE(?, progress_time),
		source_command = COALESCE(?, source_command), source_args = COALESCE(?, source_args), host = COALESCE(?, host), pid = COALESCE(?, pid)
		WHERE rid = ?`,
		string(to), started, step, epoch, ptime, command, args, host, pid, rs.rid)
	if err != nil {
		return fmt.Errorf("resuming run %s: %w", rs.id, err)
	}
	rs.status = to
	return a.writeTags(ctx, rs.rid, ev.Tags, nil)
}

func (a *applier) writeLogs(ctx context.Context, rs *runState, stream string, lines []string, t int64) error {
	const per = 200
	for len(lines) > 0 {
		n := min(per, len(lines))
		var b strings.Builder
		b.WriteString(`INSERT INTO logs (run_rid, stream, time, line) VALUES `)
		args := make([]any, 0, 4*n)
		for i, l := range lines[:n] {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("(?, ?, ?, ?)")
			if len(l) > MaxLogLine {
				l = l[:MaxLogLine]
			}
			l = strings.ToValidUTF8(strings.ReplaceAll(l, "\x00", ""), "\uFFFD")
			args = append(args, rs.rid, stream, t, l)
		}
		if _, err := a.s.exec(ctx, a.tx, b.String(), args...); err != nil {
			return fmt.Errorf("writing logs of run %s: %w", rs.id, err)
		}
		lines = lines[n:]
	}
	return nil
}

// agg accumulates points of one (run, key) or one rollup block.
type agg struct {
	rid, key        int64
	level           uint
	block           int64
	first, last     int64
	lastV           float64
	lastT           int64
	min, max        float64
	minStep, maxStp int64
	hasMin          bool
	n               int64
}

func (g *agg) add(p point) {
	if g.n == 0 || p.step < g.first {
		g.first = p.step
	}
	if g.n == 0 || p.step >= g.last {
		g.last, g.lastV, g.lastT = p.step, p.value, p.wall
	}
	if !math.IsNaN(p.value) {
		if !g.hasMin || p.value < g.min {
			g.min, g.minStep = p.value, p.step
		}
		if !g.hasMin || p.value > g.max {
			g.max, g.maxStp = p.value, p.step
		}
		g.hasMin = true
	}
	g.n++
}

func (g *agg) minArg() any {
	if !g.hasMin {
		return nil
	}
	return g.min
}

func (g *agg) maxArg() any {
	if !g.hasMin {
		return nil
	}
	return g.max
}

// flushPoints writes the queued points, their summaries and rollups.
func (a *applier) flushPoints(ctx context.Context) error {
	if len(a.points) == 0 {
		return nil
	}
	pts := a.points
	a.points = nil
	// Summaries and rollups see every write, in event order.
	type sk struct{ rid, key int64 }
	type rk struct {
		rid, key int64
		level    uint
		block    int64
	}
	sums := map[sk]*agg{}
	var sumOrder []sk
	rolls := map[rk]*agg{}
	var rollOrder []rk
	for _, p := range pts {
		k := sk{p.rid, p.key}
		g := sums[k]
		if g == nil {
			g = &agg{rid: p.rid, key: p.key}
			sums[k] = g
			sumOrder = append(sumOrder, k)
		}
		g.add(p)
		for _, sh := range rollupShifts() {
			r := rk{p.rid, p.key, sh, p.step >> sh}
			gr := rolls[r]
			if gr == nil {
				gr = &agg{rid: p.rid, key: p.key, level: sh, block: r.block}
				rolls[r] = gr
				rollOrder = append(rollOrder, r)
			}
			gr.add(p)
		}
	}
	// Points: sorted by primary key, the last write of a step wins.
	slices.SortStableFunc(pts, func(x, y point) int {
		if x.rid != y.rid {
			return cmpInt(x.rid, y.rid)
		}
		if x.key != y.key {
			return cmpInt(x.key, y.key)
		}
		if x.step != y.step {
			return cmpInt(x.step, y.step)
		}
		return x.order - y.order
	})
	uniq := pts[:0]
	for i, p := range pts {
		if i+1 < len(pts) && pts[i+1].rid == p.rid && pts[i+1].key == p.key && pts[i+1].step == p.step {
			continue
		}
		uniq = append(uniq, p)
	}
	const per = 500
	for off := 0; off < len(uniq); off += per {
		chunk := uniq[off:min(off+per, len(uniq))]
		args := make([]any, 0, 5*len(chunk))
		for _, p := range chunk {
			args = append(args, p.rid, p.key, p.step, nullFloat(p.value), p.wall)
		}
		text := valuesSQL(`INSERT INTO metrics (run_rid, key_id, step, value, wall) VALUES `, 5, len(chunk)) +
			` ON CONFLICT (run_rid, key_id, step) DO UPDATE SET value = excluded.value, wall = excluded.wall`
		if _, err := a.s.exec(ctx, a.tx, text, args...); err != nil {
			return fmt.Errorf("writing %d metric points: %w", len(chunk), err)
		}
	}
	for off := 0; off < len(sumOrder); off += per {
		chunk := sumOrder[off:min(off+per, len(sumOrder))]
		args := make([]any, 0, 10*len(chunk))
		for _, k := range chunk {
			g := sums[k]
			args = append(args, g.rid, g.key, nullFloat(g.lastV), g.last, g.lastT, g.minArg(), g.minStep, g.maxArg(), g.maxStp, g.n)
		}
		text := valuesSQL(`INSERT INTO metric_summary (run_rid, key_id, last_value, last_step, last_time, min_value, min_step, max_value, max_step, n) VALUES `, 10, len(chunk)) + `
ON CONFLICT (run_rid, key_id) DO UPDATE SET
	last_value = CASE WHEN excluded.last_step >= metric_summary.last_step THEN excluded.last_value ELSE metric_summary.last_value END,
	last_time = CASE WHEN excluded.last_step >= metric_summary.last_step THEN excluded.last_time ELSE metric_summary.last_time END,
	last_step = CASE WHEN excluded.last_step >= metric_summary.last_step THEN excluded.last_step ELSE metric_summary.last_step END,
	min_step = CASE WHEN metric_summary.min_value IS NULL OR excluded.min_value < metric_summary.min_value THEN excluded.min_step ELSE metric_summary.min_step END,
	min_value = CASE WHEN metric_summary.min_value IS NULL OR excluded.min_value < metric_summary.min_value THEN excluded.min_value ELSE metric_summary.min_value END,
	max_step = CASE WHEN metric_summary.max_value IS NULL OR excluded.max_value > metric_summary.max_value THEN excluded.max_step ELSE metric_summary.max_step END,
	max_value = CASE WHEN metric_summary.max_value IS NULL OR excluded.max_value > metric_summary.max_value THEN excluded.max_value ELSE metric_summary.max_value END,
	n = metric_summary.n + excluded.n`
		if _, err := a.s.exec(ctx, a.tx, text, args...); err != nil {
			return fmt.Errorf("writing metric summaries: %w", err)
		}
	}
	for off := 0; off < len(rollOrder); off += per {
		chunk := rollOrder[off:min(off+per, len(rollOrder))]
		args := make([]any, 0, 10*len(chunk))
		for _, k := range chunk {
			g := rolls[k]
			args = append(args, g.rid, g.key, int64(g.level), g.block, g.first, g.last, g.minArg(), g.maxArg(), nullFloat(g.lastV), g.n)
		}
		text := valuesSQL(`INSERT INTO metric_rollup (run_rid, key_id, level, block, first_step, last_step, min_value, max_value, last_value, n) VALUES `, 10, len(chunk)) + `
ON CONFLICT (run_rid, key_id, level, block) DO UPDATE SET
	first_step = CASE WHEN excluded.first_step < metric_rollup.first_step THEN excluded.first_step ELSE metric_rollup.first_step END,
	last_value = CASE WHEN excluded.last_step >= metric_rollup.last_step THEN excluded.last_value ELSE metric_rollup.last_value END,
	last_step = CASE WHEN excluded.last_step >= metric_rollup.last_step THEN excluded.last_step ELSE metric_rollup.last_step END,
	min_value = CASE WHEN metric_rollup.min_value IS NULL OR excluded.min_value < metric_rollup.min_value THEN excluded.min_value ELSE metric_rollup.min_value END,
	max_value = CASE WHEN metric_rollup.max_value IS NULL OR excluded.max_value > metric_rollup.max_value THEN excluded.max_value ELSE metric_rollup.max_value END,
	n = metric_rollup.n + excluded.n`
		if _, err := a.s.exec(ctx, a.tx, text, args...); err != nil {
			return fmt.Errorf("writing metric rollups: %w", err)
		}
	}
	return nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// valuesSQL appends rows of cols placeholders to prefix.
func valuesSQL(prefix string, cols, rows int) string {
	var b strings.Builder
	b.Grow(len(prefix) + rows*(cols*3+3))
	b.WriteString(prefix)
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", cols), ",") + ")"
	for i := 0; i < rows; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
	}
	return b.String()
}
