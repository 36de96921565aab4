package registry

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
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
	// Replica is the dashboard replica that runs (ran) its exporter
	// (docs/replicas.md); empty without replicas.
	Replica string `json:"replica,omitempty"`
}

// RestartedMsg is the error of an export that was running when the
// dashboard stopped: on the next start it is failed with this message.
const RestartedMsg = "dashboard restarted while exporting; start the export again"

// maxExportJobs is how many ended export jobs are kept (the oldest go first).
const maxExportJobs = 1000

// exporter runs this process's exports; the jobs themselves are records in
// the store (kind "export"), written on every change, so a job still
// answers after a restart and on every dashboard sharing the database.
type exporter struct {
	wg sync.WaitGroup
}

func decodeExport(rec store.Record) (*ExportJob, error) {
	var j ExportJob
	if err := json.Unmarshal(rec.Body, &j); err != nil {
		return nil, fmt.Errorf("reading export job %q from the store: %w", rec.Key, err)
	}
	return &j, nil
}

// loadExports fails the export jobs an earlier dashboard process left
// queued or running (their process is gone and their output was never
// registered) with RestartedMsg, and removes the temporary export
// directories left behind.
func (s *Service) loadExports(ctx context.Context) error {
	list, err := s.listExports(ctx)
	if err != nil {
		return err
	}
	for _, j := range list {
		if j.State != StateQueued && j.State != StateRunning {
			continue
		}
		if s.cfg.Member != nil && j.Replica != "" {
			continue // a replica's: failed by the sweep when that replica stopped
		}
		if err := s.failExport(ctx, j.ID, RestartedMsg); err != nil {
			return err
		}
		if s.log != nil {
			s.log.Warn("export job failed: the dashboard restarted while it ran", "id", j.ID, "model", j.Model)
		}
	}
	s.removeStaleExportDirs(ctx)
	return nil
}

// exportTmp is the directory of this process's temporary export outputs:
// registry/tmp/<replica ID> (registry/tmp/local without replicas), so that
// replicas sharing the experiment directory remove only what is stale.
func (s *Service) exportTmp() string {
	id := s.self()
	if id == "" {
		id = "local"
	}
	return filepath.Join(s.cfg.ExperimentDir, "registry", "tmp", id)
}

// removeStaleExportDirs removes the temporary export directories that no
// running exporter uses: those of replicas that are not alive (all of
// them without replicas), and those of fw versions that kept them
// directly under registry/.
func (s *Service) removeStaleExportDirs(ctx context.Context) {
	legacy, _ := filepath.Glob(filepath.Join(s.cfg.ExperimentDir, "registry", "export-*"))
	for _, d := range legacy {
		_ = os.RemoveAll(d)
	}
	live := map[string]bool{}
	if s.cfg.Member != nil {
		reps, err := s.cfg.Member.Replicas(ctx)
		if err != nil {
			return // cannot tell which are stale
		}
		for _, r := range reps {
			live[r.ID] = r.Alive && !r.Self
		}
	}
	dirs, _ := os.ReadDir(filepath.Join(s.cfg.ExperimentDir, "registry", "tmp"))
	for _, d := range dirs {
		if !live[d.Name()] {
			_ = os.RemoveAll(filepath.Join(s.cfg.ExperimentDir, "registry", "tmp", d.Name()))
		}
	}
}

// failExport ends a queued or running job as failed with msg.
func (s *Service) failExport(ctx context.Context, id, msg string) error {
	_, err := s.st.UpdateRecord(ctx, kindExport, id, func(cur *store.Record) (json.RawMessage, error) {
		if cur == nil {
			return nil, store.ErrKeep
		}
		j, err := decodeExport(*cur)
		if err != nil || (j.State != StateQueued && j.State != StateRunning) {
			return nil, store.ErrKeep
		}
		now := time.Now().UTC()
		j.State, j.Progress, j.Error, j.Finished = StateFailed, "failed", msg, &now
		return json.Marshal(j)
	})
	return err
}

func (s *Service) listExports(ctx context.Context) ([]*ExportJob, error) {
	recs, err := s.st.ListRecords(ctx, kindExport)
	if err != nil {
		return nil, err
	}
	out := make([]*ExportJob, 0, len(recs))
	for _, rec := range recs {
		j, err := decodeExport(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	// Newest first; IDs (exp-<store.NewID>) sort by creation time too.
	slices.SortFunc(out, func(a, b *ExportJob) int {
		if c := b.Started.Compare(a.Started); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	return out, nil
}

// trimExports drops the oldest ended jobs beyond maxExportJobs.
func (s *Service) trimExports(ctx context.Context) error {
	list, err := s.listExports(ctx)
	if err != nil {
		return err
	}
	ended := 0
	for _, j := range list {
		if j.State != StateFinished && j.State != StateFailed {
			continue
		}
		if ended++; ended > maxExportJobs {
			if _, err := s.st.DeleteRecord(ctx, kindExport, j.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// Exports lists the export jobs, newest first: those of this dashboard
// process and of earlier ones (and of the other dashboards sharing the
// database).
func (s *Service) Exports(ctx context.Context) ([]ExportJob, error) {
	list, err := s.listExports(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ExportJob, len(list))
	for i, j := range list {
		out[i] = *j
	}
	return out, nil
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
		v, err := s.Reg.Resolve(ctx, req.Model, strconv.Itoa(req.Version))
		if err != nil {
			return ExportJob{}, err
		}
		switch {
		case v.Exportable():
		case v.Format == FormatMLflow:
			return ExportJob{}, invalid("model %q version %d is a reference to the MLflow model %s, which fw cannot export: fw exports MLflow PyTorch models saved as torch.export programs (data/model.pt2: mlflow.pytorch.log_model's default with an input_example of 2 or more rows) in the dashboard's artifact storage; a pickled model (serialization_format=\"pickle\", model.pth) is never unpickled. Log the model again and register that version", req.Model, v.Version, v.Source.URI)
		default:
			return ExportJob{}, invalid("model %q version %d is an exported %s file; export needs a checkpoint-backed version, a torch.export program version or {run_id, checkpoint}", req.Model, v.Version, v.Format)
		}
		ckpt, metrics = v.File, v.Metrics
		if v.Format == FormatProgram {
			if req.Format == "onnx_int8" && req.Quantization == "static" {
				return ExportJob{}, invalid("static quantization calibrates on the rows a checkpoint carries; model %q version %d is a torch.export program, which carries none: use quantization dynamic", req.Model, v.Version)
			}
			if ckpt, err = s.Reg.ModelFile(ctx, v); err != nil {
				return ExportJob{}, fmt.Errorf("fetching the program of model %q version %d: %w", req.Model, v.Version, err)
			}
		} else if v.Source.RunID != "" && v.Source.Checkpoint != "" {
			if ckpt, err = s.localCheckpoint(ctx, v.Source.RunID, v.Source.Checkpoint, v.File); err != nil {
				return ExportJob{}, err
			}
		}
		src = Source{RunID: v.Source.RunID, Checkpoint: v.Source.Checkpoint, Model: req.Model, Version: v.Version}
		if req.Name == "" {
			req.Name = req.Model
		}
	case req.RunID != "" && req.Checkpoint != "" && req.Model == "":
		abs, _, c, err := s.checkpoint(ctx, req.RunID, req.Checkpoint)
		if err == nil {
			ckpt, err = s.localCheckpoint(ctx, req.RunID, req.Checkpoint, abs)
		}
		if err != nil {
			return ExportJob{}, err
		}
		metrics = c
		src = Source{RunID: req.RunID, Checkpoint: req.Checkpoint}
	default:
		return ExportJob{}, invalid(`name the checkpoint with {"run_id", "checkpoint"}, or a checkpoint-backed or torch.export program version with {"model", "version"}`)
	}
	if req.Name == "" {
		req.Name = req.RunID
	}
	if err := ValidName("model name", req.Name); err != nil {
		return ExportJob{}, err
	}
	j := &ExportJob{ID: "exp-" + store.NewID(), State: StateRunning, Progress: "exporting",
		Request: req, Model: req.Name, Started: time.Now().UTC()}
	s.claimExport(ctx, j)
	if err := s.saveExport(ctx, j); err != nil {
		s.releaseExport(j.ID)
		return ExportJob{}, err
	}
	cp := *j // j belongs to the export's goroutine from here
	s.publish("export", j.ID, cp)
	s.exp.wg.Add(1)
	go func() {
		defer s.exp.wg.Done()
		s.runExport(j, ckpt, src, metrics)
	}()
	return cp, nil
}

func (s *Service) saveExport(ctx context.Context, j *ExportJob) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = s.st.UpdateRecord(ctx, kindExport, j.ID, func(*store.Record) (json.RawMessage, error) { return b, nil })
	return err
}

// Export returns an export job by id (also one of an earlier dashboard
// process, or of another dashboard sharing the database); false when there
// is none.
func (s *Service) Export(ctx context.Context, id string) (ExportJob, bool, error) {
	if store.ValidateKey(id) != nil {
		return ExportJob{}, false, nil
	}
	rec, err := s.st.GetRecord(ctx, kindExport, id)
	if store.ErrorCode(err) == store.CodeNotFound {
		return ExportJob{}, false, nil
	}
	if err != nil {
		return ExportJob{}, false, err
	}
	j, err := decodeExport(rec)
	if err != nil {
		return ExportJob{}, false, err
	}
	return *j, true, nil
}

// update changes this process's job j, records it and publishes it. The
// job's process is gone or done by then, so the record is written whatever
// happens to base.
func (s *Service) update(j *ExportJob, f func(*ExportJob)) {
	f(j)
	ctx := context.WithoutCancel(s.base)
	if err := s.saveExport(ctx, j); err != nil && s.log != nil {
		s.log.Error("saving an export job", "id", j.ID, "err", err)
	}
	if j.State == StateFinished || j.State == StateFailed {
		s.releaseExport(j.ID)
		if err := s.trimExports(ctx); err != nil && s.log != nil {
			s.log.Warn("dropping old export jobs", "err", err)
		}
	}
	s.publish("export", j.ID, *j)
}

func (s *Service) runExport(j *ExportJob, ckpt string, src Source, metrics map[string]float64) {
	fail := func(msg string) {
		now := time.Now().UTC()
		s.update(j, func(j *ExportJob) { j.State, j.Error, j.Progress, j.Finished = StateFailed, msg, "failed", &now })
	}
	if err := os.MkdirAll(s.exportTmp(), 0o755); err != nil {
		fail(err.Error())
		return
	}
	tmpDir, err := os.MkdirTemp(s.exportTmp(), "export-")
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
