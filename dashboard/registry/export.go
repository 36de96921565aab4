package registry

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Export job states.
const (
	StateQueued   = "queued"
	StateRunning  = "running"
	StateFinished = "finished"
	StateFailed   = "failed"
)

// ExportRequest is the body of POST /api/models/export.
type ExportRequest struct {
	RunID        string `json:"run_id,omitempty"`
	Checkpoint   string `json:"checkpoint,omitempty"`
	Model        string `json:"model,omitempty"`
	Version      int    `json:"version,omitempty"`
	Format       string `json:"format"`
	OpsetVersion int    `json:"opset_version,omitempty"`
	Method       string `json:"method,omitempty"`
	Name         string `json:"name,omitempty"`
	// Quantization is how format onnx_int8 quantizes: "dynamic" (the
	// default) or "static", calibrated on the rows the checkpoint carries
	// (fw.checkpoint.save(..., calibration_input=...); fw's recipes save them).
	Quantization string `json:"quantization,omitempty"`
}

// ExportJob is the state of one export.
type ExportJob struct {
	ID       string          `json:"id"`
	State    string          `json:"state"`
	Progress string          `json:"progress"`
	Request  ExportRequest   `json:"request"`
	Report   json.RawMessage `json:"report,omitempty"`
	Error    string          `json:"error,omitempty"`
	Model    string          `json:"model"`
	Version  int             `json:"version,omitempty"` // the registered version once finished
	Started  time.Time       `json:"started"`
	Finished *time.Time      `json:"finished,omitempty"`
}

// RestartedMsg is the error of an export that was running when the
// dashboard stopped: on the next start it is failed with this message.
const RestartedMsg = "dashboard restarted while exporting; start the export again"

// maxExportJobs is how many ended export jobs are kept (the oldest go first).
const maxExportJobs = 1000

// exporter holds the export jobs; every change is persisted to
// FW_EXPERIMENT_DIR/registry/exports.json (written atomically), so a job
// still answers after a restart.
type exporter struct {
	mu   sync.Mutex
	jobs map[string]*ExportJob
	n    int
	wg   sync.WaitGroup
	// saveMu orders the writes of exports.json: each write takes a snapshot
	// while holding it, so the last write holds the latest state.
	saveMu sync.Mutex
}

func (s *Service) exportsFile() string {
	return filepath.Join(s.cfg.ExperimentDir, "registry", "exports.json")
}

// loadExports reads exports.json: a job that was queued or running when the
// dashboard stopped is failed with RestartedMsg (its process is gone and
// its output never registered); the temporary export directories left
// behind are removed.
func (s *Service) loadExports() error {
	e := &s.exp
	e.jobs = map[string]*ExportJob{}
	b, err := os.ReadFile(s.exportsFile())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var list []*ExportJob
	if len(b) > 0 {
		if err := json.Unmarshal(b, &list); err != nil {
			return fmt.Errorf("reading %s: %w", s.exportsFile(), err)
		}
	}
	now := time.Now().UTC()
	changed := false
	for _, j := range list {
		if j == nil || j.ID == "" {
			continue
		}
		if j.State == StateQueued || j.State == StateRunning {
			j.State, j.Progress, j.Error, j.Finished = StateFailed, "failed", RestartedMsg, &now
			changed = true
			if s.log != nil {
				s.log.Warn("export job failed: the dashboard restarted while it ran", "id", j.ID, "model", j.Model)
			}
		}
		e.jobs[j.ID] = j
		if i := strings.LastIndexByte(j.ID, '-'); i >= 0 {
			if n, err := strconv.Atoi(j.ID[i+1:]); err == nil && n > e.n {
				e.n = n
			}
		}
	}
	if tmp, _ := filepath.Glob(filepath.Join(s.cfg.ExperimentDir, "registry", "export-*")); len(tmp) > 0 {
		for _, d := range tmp {
			_ = os.RemoveAll(d)
		}
	}
	if changed {
		return s.saveExports()
	}
	return nil
}

// saveExports writes every export job to exports.json, dropping the oldest
// ended jobs beyond maxExportJobs.
func (s *Service) saveExports() error {
	e := &s.exp
	e.saveMu.Lock()
	defer e.saveMu.Unlock()
	e.mu.Lock()
	list := make([]ExportJob, 0, len(e.jobs))
	ended := 0
	for _, j := range s.sortedExportsLocked() {
		if j.State == StateFinished || j.State == StateFailed {
			if ended++; ended > maxExportJobs {
				delete(e.jobs, j.ID)
				continue
			}
		}
		list = append(list, *j)
	}
	e.mu.Unlock()
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(s.exportsFile(), b)
}

func (s *Service) persistExports() {
	if err := s.saveExports(); err != nil && s.log != nil {
		s.log.Error("saving the export jobs", "file", s.exportsFile(), "err", err)
	}
}

// sortedExportsLocked lists the jobs newest first (s.exp.mu held).
func (s *Service) sortedExportsLocked() []*ExportJob {
	out := make([]*ExportJob, 0, len(s.exp.jobs))
	for _, j := range s.exp.jobs {
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b *ExportJob) int {
		if c := b.Started.Compare(a.Started); c != 0 {
			return c
		}
		return cmp.Compare(exportSeq(b.ID), exportSeq(a.ID))
	})
	return out
}

// exportSeq is the counter at the end of an export ID (exp-<unix>-<n>).
func exportSeq(id string) int {
	n, _ := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
	return n
}

// Exports lists the export jobs, newest first: those of this dashboard
// process and, from exports.json, those of earlier ones.
func (s *Service) Exports() []ExportJob {
	s.exp.mu.Lock()
	defer s.exp.mu.Unlock()
	list := s.sortedExportsLocked()
	out := make([]ExportJob, len(list))
	for i, j := range list {
		out[i] = *j
	}
	return out
}

// StartExport validates req, resolves the checkpoint and starts the export
// in the background; the job's copy is returned (state running).
func (s *Service) StartExport(ctx context.Context, req ExportRequest) (ExportJob, error) {
	switch req.Format {
	case "onnx", "torchscript", "quantized", "onnx_int8", "aoti":
	default:
		return ExportJob{}, invalid("format %q is not one of onnx, torchscript, quantized, onnx_int8, aoti", req.Format)
	}
	switch {
	case req.Quantization != "" && req.Format != "onnx_int8":
		return ExportJob{}, invalid("quantization applies to format onnx_int8 only, not %s", req.Format)
	case req.Quantization != "" && req.Quantization != "dynamic" && req.Quantization != "static":
		return ExportJob{}, invalid("quantization %q is not dynamic or static", req.Quantization)
	}
	switch req.Method {
	case "", "trace", "script":
	default:
		return ExportJob{}, invalid("method %q is not trace or script", req.Method)
	}
	if req.Method != "" && req.Format == "aoti" {
		return ExportJob{}, invalid("method does not apply to format aoti (AOTInductor always captures the model with torch.export); leave it out")
	}
	if req.OpsetVersion != 0 && (req.OpsetVersion < 7 || req.OpsetVersion > 30) {
		return ExportJob{}, invalid("opset_version %d is outside 7..30", req.OpsetVersion)
	}
	var ckpt string
	var metrics map[string]float64
	src := Source{}
	switch {
	case req.Model != "" && req.RunID == "":
		v, err := s.Reg.Resolve(req.Model, strconv.Itoa(req.Version))
		if err != nil {
			return ExportJob{}, err
		}
		if v.Format != FormatCheckpoint {
			return ExportJob{}, invalid("model %q version %d is an exported %s file; export needs a checkpoint-backed version or {run_id, checkpoint}", req.Model, v.Version, v.Format)
		}
		ckpt, metrics = v.File, v.Metrics
		src = Source{RunID: v.Source.RunID, Checkpoint: v.Source.Checkpoint, Model: req.Model, Version: v.Version}
		if req.Name == "" {
			req.Name = req.Model
		}
	case req.RunID != "" && req.Checkpoint != "" && req.Model == "":
		abs, c, err := s.checkpoint(ctx, req.RunID, req.Checkpoint)
		if err != nil {
			return ExportJob{}, err
		}
		ckpt, metrics = abs, c
		src = Source{RunID: req.RunID, Checkpoint: req.Checkpoint}
	default:
		return ExportJob{}, invalid(`name the checkpoint with {"run_id", "checkpoint"} or a checkpoint-backed version with {"model", "version"}`)
	}
	if req.Name == "" {
		req.Name = req.RunID
	}
	if err := ValidName("model name", req.Name); err != nil {
		return ExportJob{}, err
	}
	e := &s.exp
	e.mu.Lock()
	e.n++
	j := &ExportJob{ID: fmt.Sprintf("exp-%d-%d", time.Now().Unix(), e.n), State: StateRunning, Progress: "exporting",
		Request: req, Model: req.Name, Started: time.Now().UTC()}
	e.jobs[j.ID] = j
	cp := *j
	e.mu.Unlock()
	s.persistExports()
	s.publish("export", j.ID, cp)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		s.runExport(j, ckpt, src, metrics)
	}()
	return cp, nil
}

// Export returns an export job by id (also one of an earlier dashboard
// process, from exports.json).
func (s *Service) Export(id string) (ExportJob, bool) {
	s.exp.mu.Lock()
	defer s.exp.mu.Unlock()
	j, ok := s.exp.jobs[id]
	if !ok {
		return ExportJob{}, false
	}
	return *j, true
}

func (s *Service) update(j *ExportJob, f func(*ExportJob)) {
	s.exp.mu.Lock()
	f(j)
	cp := *j
	s.exp.mu.Unlock()
	s.persistExports()
	s.publish("export", j.ID, cp)
}

func (s *Service) runExport(j *ExportJob, ckpt string, src Source, metrics map[string]float64) {
	fail := func(msg string) {
		now := time.Now().UTC()
		s.update(j, func(j *ExportJob) { j.State, j.Error, j.Progress, j.Finished = StateFailed, msg, "failed", &now })
	}
	tmpDir, err := os.MkdirTemp(filepath.Join(s.cfg.ExperimentDir, "registry"), "export-")
	if err != nil {
		fail(err.Error())
		return
	}
	defer os.RemoveAll(tmpDir)
	req := j.Request
	out := filepath.Join(tmpDir, "model."+ext(req.Format))
	args := []string{"-m", "fw.export", ckpt, "--format", req.Format, "--out", out, "--name", req.Name}
	if req.OpsetVersion != 0 {
		args = append(args, "--opset", strconv.Itoa(req.OpsetVersion))
	}
	if req.Method != "" {
		args = append(args, "--method", req.Method)
	}
	if req.Quantization != "" {
		args = append(args, "--quantization", req.Quantization)
	}
	cmd := exec.CommandContext(s.base, s.cfg.Python, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	setGroup(cmd, false)
	cmd.Cancel = func() error { return signalGroup(cmd.Process.Pid, sigKill) }
	if err := cmd.Run(); err != nil {
		fail(fmt.Sprintf("python -m fw.export failed (%v): %s", err, lastLines(stderr.String(), 5)))
		return
	}
	line := lastLines(stdout.String(), 1)
	var report struct {
		MaxAbsError *float64 `json:"max_abs_error"`
	}
	if err := json.Unmarshal([]byte(line), &report); err != nil || report.MaxAbsError == nil {
		fail("fw.export printed no JSON report: " + lastLines(stdout.String()+stderr.String(), 5))
		return
	}
	s.update(j, func(j *ExportJob) { j.Progress, j.Report = "registering", json.RawMessage(line) })
	src.ExportID = j.ID
	v, err := s.Reg.AddFile(s.base, req.Name, out, Version{Source: src, Parity: json.RawMessage(line), Metrics: metrics})
	if err != nil {
		fail("registering the exported file: " + err.Error())
		return
	}
	now := time.Now().UTC()
	s.update(j, func(j *ExportJob) {
		j.State, j.Progress, j.Version, j.Finished = StateFinished, "done", v.Version, &now
	})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
