package jobs

import (
	"context"
	"fmt"

	"github.com/fw-serve/fw/dashboard/fault"
	"github.com/fw-serve/fw/dashboard/store"
)

// Tags a re-attachable executor's job leaves on its run (Adopt reads them).
const (
	TagExecutor        = "fw.executor"         // the executor's Name
	TagExecutorJob     = "fw.executor.job"     // the job's ID on it (Spec.ID)
	TagExecutorAddress = "fw.executor.address" // the executor's Address
)

func merge(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// Adopt re-attaches to the job of a run started earlier on this dashboard's
// executor, by this or another dashboard process (after a restart, or a
// replica taking over): the run must still be queued or running and carry
// the executor's tags (TagExecutor, TagExecutorJob, TagExecutorAddress)
// naming this executor and address. The job is then supervised as if this
// dashboard had started it: state, logs (without the lines captured
// before), stop, and the run's end. Executors that cannot re-attach
// (Local) refuse with a Conflict.
func (m *Manager) Adopt(ctx context.Context, runID string) (Info, error) {
	if !m.exec.Attachable() {
		return Info{}, conflict("the %s executor cannot re-attach to a job: %v", m.exec.Name(), ErrNotAttachable)
	}
	if err := store.ValidateID(runID); err != nil {
		return Info{}, invalid("run_id: " + err.Error())
	}
	r, err := m.st.GetRun(ctx, runID)
	if err != nil {
		return Info{}, err
	}
	if r.Status.Terminal() {
		return Info{}, conflict("run %s has ended (%s); there is no job to re-attach to", runID, r.Status)
	}
	id := r.Tags[TagExecutorJob]
	if r.Tags[TagExecutor] != m.exec.Name() || r.Tags[TagExecutorAddress] != m.exec.Address() || id == "" {
		return Info{}, conflict("run %s was not started on this dashboard's executor (%s at %s): its tags name %q at %q",
			runID, m.exec.Name(), m.exec.Address(), r.Tags[TagExecutor], r.Tags[TagExecutorAddress])
	}
	suffix := store.NewID()[8:]
	j := &job{
		Info: Info{RunID: runID, Recipe: r.Source.Recipe, Experiment: r.Experiment, Params: r.Params, State: StateQueued,
			Executor: m.exec.Name(), ExecutorID: id, Queued: r.Created},
		writer: "job-" + suffix, done: make(chan struct{}),
	}
	if r.Status == store.StatusRunning {
		j.State, j.Started = StateRunning, r.Started
	}
	j.spec = Spec{RunID: runID, Recipe: m.recipes[r.Source.Recipe], ID: id, Params: r.Params}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Info{}, conflict("the dashboard is shutting down")
	}
	if old := m.jobs[runID]; old != nil && !old.exited() {
		return Info{}, conflict("run %s already has a training job on this dashboard (%s)", runID, old.State)
	}
	p, err := m.exec.Attach(j.spec, id)
	if err != nil {
		return Info{}, fault.Newf(fault.Unprocessable, "invalid_params", "re-attaching to job %q of run %s: %v", id, runID, err)
	}
	if old := m.jobs[runID]; old != nil {
		for i, x := range m.list {
			if x == old {
				m.list = append(m.list[:i:i], m.list[i+1:]...)
				break
			}
		}
	}
	m.jobs[runID] = j
	m.list = append(m.list, j)
	m.running++
	m.attach(j, p)
	m.log.Info("training job re-attached", "run_id", runID, "executor", m.exec.Name(), "id", id)
	return j.Info, nil
}

// AdoptAll re-attaches to the jobs of every queued or running run that
// carries this executor's tags and address (see Adopt); nothing for an
// executor that cannot re-attach. claim, when not nil, is asked first for
// each run (dashboard replicas: take the job's lease) and a run it refuses
// is skipped; release is called for a claimed run that could not be
// adopted. It returns the run IDs adopted; a run it cannot adopt is logged
// and left as it is.
func (m *Manager) AdoptAll(ctx context.Context, claim func(ctx context.Context, runID string) bool, release func(ctx context.Context, runID string)) ([]string, error) {
	if !m.exec.Attachable() {
		return nil, nil
	}
	// Only constant text in the filter: the address is compared below.
	q := store.ListQuery{Filter: `status IN ("queued", "running") AND tags."` + TagExecutor + `" = "` + m.exec.Name() + `"`, Limit: 1000}
	var ids []string
	for {
		page, err := m.st.ListRuns(ctx, q)
		if err != nil {
			return ids, fmt.Errorf("listing the runs of %s jobs to re-attach: %w", m.exec.Name(), err)
		}
		for _, r := range page.Runs {
			if r.Tags[TagExecutorAddress] != m.exec.Address() {
				m.log.Warn("not re-attaching a training job of another executor address", "run_id", r.ID, "address", r.Tags[TagExecutorAddress])
				continue
			}
			if _, ok := m.Get(r.ID); ok {
				continue // followed already
			}
			if claim != nil && !claim(ctx, r.ID) {
				continue
			}
			if _, err := m.Adopt(ctx, r.ID); err != nil {
				m.log.Warn("re-attaching a training job", "run_id", r.ID, "err", err)
				if release != nil {
					release(ctx, r.ID)
				}
				continue
			}
			ids = append(ids, r.ID)
		}
		if page.Next == "" {
			return ids, nil
		}
		q.Cursor = page.Next
	}
}
