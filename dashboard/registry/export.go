package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

type exporter struct {
	mu   sync.Mutex
	jobs map[string]*ExportJob
	n    int
	wg   sync.WaitGroup
}

// StartExport validates req, resolves the checkpoint and starts the export
// in the background; the job's copy is returned (state running).
func (s *Service) StartExport(ctx context.Context, req ExportRequest) (ExportJob, error) {
	switch req.Format {
	case "onnx", "torchscript", "quantized":
	default:
		return ExportJob{}, invalid("format %q is not one of onnx, torchscript, quantized", req.Format)
	}
	switch req.Method {
	case "", "trace", "script":
	default:
		return ExportJob{}, invalid("method %q is not trace or script", req.Method)
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
	s.publish("export", j.ID, cp)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		s.runExport(j, ckpt, src, metrics)
	}()
	return cp, nil
}

// Export returns an export job by id.
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
