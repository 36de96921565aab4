package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fw-serve/fw/dashboard/fault"
	"github.com/fw-serve/fw/dashboard/replica"
	"github.com/fw-serve/fw/dashboard/store"
)

// StateLost is the state of a job whose dashboard replica stopped while it
// ran (GET /api/training): another replica took its lease over and ended
// its run (see Fleet).
const StateLost = "lost"

// LeasePrefix names the lease of a training job: LeasePrefix + run ID.
const LeasePrefix = "job/"

// kindJob is the store record kind of a job as every replica lists it.
const kindJob = "job"

// maxEndedJobRecords is how many ended jobs stay listed (the oldest go).
const maxEndedJobRecords = 1000

// FleetJob is a job as the replicas of one dashboard list it: Info, which
// replica runs (or ran) it, and for a lost job why.
type FleetJob struct {
	Info
	// Replica is the ID of the dashboard replica that started it.
	Replica string `json:"replica,omitempty"`
	// Error says why a lost job was lost.
	Error string `json:"error,omitempty"`
}

// Fleet puts a Manager's jobs under replica ownership, for dashboards
// sharing one database (docs/replicas.md): each job this process starts
// holds the lease "job/<run id>" (renewed by the Member) and is recorded in
// the store, so every replica lists every job. When a replica stops while
// its jobs run, the replica that takes a job's lease over calls Adopt when
// set (an executor whose jobs outlive the dashboard re-attaches to it);
// otherwise, or when Adopt fails, the job is lost: a local process cannot
// be re-adopted, so its run ends failed with a message saying so (resume
// it from a checkpoint). A replica that finds its job's lease taken (it was
// cut off from the database for longer than the lease TTL) stops the job.
type Fleet struct {
	m      *Manager
	st     store.Store
	member *replica.Member
	log    *slog.Logger
	// Adopt, when set, re-attaches to the job of a run started by a
	// replica that stopped (an executor whose jobs outlive the dashboard);
	// nil: jobs cannot be re-attached and are lost.
	Adopt func(ctx context.Context, runID string) (Info, error)

	mu      sync.Mutex
	written map[string]FleetJob // what the store has, for this process's jobs
}

// NewFleet wraps m for member; it registers the takeover of job leases.
func NewFleet(m *Manager, st store.Store, member *replica.Member, log *slog.Logger) *Fleet {
	f := &Fleet{m: m, st: st, member: member, log: log, written: map[string]FleetJob{}}
	member.Handle(LeasePrefix, replica.Handler{Takeover: f.takeover, Lost: f.lost})
	return f
}

// Manager is the wrapped manager.
func (f *Fleet) Manager() *Manager { return f.m }

// Recipes lists the registered recipes.
func (f *Fleet) Recipes() []Recipe { return f.m.Recipes() }

// Start starts a job on this replica and takes its lease.
func (f *Fleet) Start(ctx context.Context, req StartRequest) (Info, error) {
	if req.ResumeFrom != nil {
		// The run's last job may belong to another live replica.
		if owner, alive, ok, err := f.member.Owner(ctx, LeasePrefix+req.ResumeFrom.RunID); err != nil {
			return Info{}, err
		} else if ok && alive && owner.ID != f.member.Self().ID {
			return Info{}, fault.Newf(fault.Conflict, store.CodeConflict, "run %s still has a training job on dashboard replica %s; stop it or wait for it to end before resuming", req.ResumeFrom.RunID, owner.ID)
		}
	}
	info, err := f.m.Start(ctx, req)
	if err != nil {
		return Info{}, err
	}
	if owner, ok, err := f.member.Claim(ctx, LeasePrefix+info.RunID); err != nil || !ok {
		f.log.Warn("training job started without its lease: if this replica stops, no other marks it", "run_id", info.RunID, "holder", owner.ID, "err", err)
	}
	f.Sync(ctx)
	return info, nil
}

// Stop stops a job of this replica; for a job of another live replica it
// returns a *replica.NotOwnerError naming it (the API forwards the request).
func (f *Fleet) Stop(ctx context.Context, runID string) (Info, error) {
	if _, ok := f.m.Get(runID); ok {
		info, err := f.m.Stop(ctx, runID)
		f.Sync(ctx)
		return info, err
	}
	if store.ValidateKey(runID) != nil { // no job can have this ID (nor a lease this name)
		return Info{}, notFound("no running training job %s; GET /api/training lists them", runID)
	}
	owner, alive, ok, err := f.member.Owner(ctx, LeasePrefix+runID)
	if err != nil {
		return Info{}, err
	}
	if ok && alive {
		return Info{}, &replica.NotOwnerError{Name: LeasePrefix + runID, Owner: owner}
	}
	if ok {
		return Info{}, fault.Newf(fault.Unavailable, "replica_stopped", "the dashboard replica %s that runs job %s stopped; another replica is taking it over (within the lease time to live, %s): retry then", owner.ID, runID, f.member.TTL())
	}
	return Info{}, notFound("no running training job %s; GET /api/training lists them", runID)
}

// List lists the jobs of every replica (this one's as they are now, the
// others' as last recorded), oldest first.
func (f *Fleet) List(ctx context.Context) ([]FleetJob, error) {
	recs, err := f.st.ListRecords(ctx, kindJob)
	if err != nil {
		return nil, err
	}
	byRun := map[string]FleetJob{}
	for _, r := range recs {
		var j FleetJob
		if json.Unmarshal(r.Body, &j) == nil && j.RunID != "" {
			byRun[j.RunID] = j
		}
	}
	for _, info := range f.m.List() {
		byRun[info.RunID] = FleetJob{Info: info, Replica: f.member.Self().ID}
	}
	out := make([]FleetJob, 0, len(byRun))
	for _, j := range byRun {
		out = append(out, j)
	}
	sort.Slice(out, func(i, k int) bool {
		if !out[i].Queued.Equal(out[k].Queued) {
			return out[i].Queued.Before(out[k].Queued)
		}
		return out[i].RunID < out[k].RunID
	})
	return out, nil
}

// Get returns one job, of any replica.
func (f *Fleet) Get(ctx context.Context, runID string) (FleetJob, bool, error) {
	if info, ok := f.m.Get(runID); ok {
		return FleetJob{Info: info, Replica: f.member.Self().ID}, true, nil
	}
	if store.ValidateKey(runID) != nil {
		return FleetJob{}, false, nil
	}
	r, err := f.st.GetRecord(ctx, kindJob, runID)
	if store.ErrorCode(err) == store.CodeNotFound {
		return FleetJob{}, false, nil
	}
	if err != nil {
		return FleetJob{}, false, err
	}
	var j FleetJob
	if err := json.Unmarshal(r.Body, &j); err != nil {
		return FleetJob{}, false, fmt.Errorf("reading job %s from the store: %w", runID, err)
	}
	return j, true, nil
}

// Run records this replica's jobs in the store every second (and releases
// the lease of each job that ended) until ctx ends.
func (f *Fleet) Run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f.Sync(ctx)
		}
	}
}

// Sync records the jobs of this replica that changed since the last Sync,
// and releases the leases of those that ended. Call it once more after
// Manager.Shutdown.
func (f *Fleet) Sync(ctx context.Context) {
	self := f.member.Self().ID
	ended := false
	for _, info := range f.m.List() {
		j := FleetJob{Info: info, Replica: self}
		f.mu.Lock()
		same := reflect.DeepEqual(f.written[info.RunID], j)
		f.mu.Unlock()
		if same {
			continue
		}
		if err := f.record(ctx, j); err != nil {
			if ctx.Err() == nil {
				f.log.Warn("recording a training job in the store", "run_id", info.RunID, "err", err)
			}
			continue
		}
		f.mu.Lock()
		f.written[info.RunID] = j
		f.mu.Unlock()
		if info.State == StateExited {
			ended = true
			if err := f.member.Release(ctx, LeasePrefix+info.RunID); err != nil && ctx.Err() == nil {
				f.log.Warn("releasing a training job's lease", "run_id", info.RunID, "err", err)
			}
		}
	}
	if ended {
		f.trim(ctx)
	}
}

func (f *Fleet) record(ctx context.Context, j FleetJob) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = f.st.UpdateRecord(ctx, kindJob, j.RunID, func(*store.Record) (json.RawMessage, error) { return b, nil })
	return err
}

// trim drops the oldest ended job records beyond maxEndedJobRecords.
func (f *Fleet) trim(ctx context.Context) {
	list, err := f.List(ctx)
	if err != nil {
		return
	}
	var ended []FleetJob
	for _, j := range list {
		if j.State == StateExited || j.State == StateLost {
			ended = append(ended, j)
		}
	}
	for i := 0; i < len(ended)-maxEndedJobRecords; i++ {
		if _, ok := f.m.Get(ended[i].RunID); ok {
			continue
		}
		_, _ = f.st.DeleteRecord(ctx, kindJob, ended[i].RunID)
	}
}

// AdoptOrphans re-attaches to the jobs of the Manager's executor (Ray)
// that are still queued or running in the store but whose lease no live
// replica holds: this replica claims each lease first, so a job another
// replica follows is left alone (the jobs of a replica that stopped are
// taken over by Member.Sweep, which calls Adopt). It returns the run IDs
// adopted.
func (f *Fleet) AdoptOrphans(ctx context.Context) ([]string, error) {
	ids, err := f.m.AdoptAll(ctx,
		func(ctx context.Context, runID string) bool {
			_, ok, err := f.member.Claim(ctx, LeasePrefix+runID)
			return err == nil && ok
		},
		func(ctx context.Context, runID string) { _ = f.member.Release(ctx, LeasePrefix+runID) })
	if len(ids) > 0 {
		f.Sync(ctx)
	}
	return ids, err
}

// takeover handles the lease of a job whose replica stopped.
func (f *Fleet) takeover(ctx context.Context, l store.Lease, prev replica.Info) error {
	runID := strings.TrimPrefix(l.Name, LeasePrefix)
	if f.Adopt != nil {
		if _, err := f.Adopt(ctx, runID); err == nil {
			f.log.Info("training job re-attached after its replica stopped", "run_id", runID, "from", prev.ID)
			f.Sync(ctx)
			return nil
		} else {
			f.log.Warn("re-attaching a training job failed; marking it lost", "run_id", runID, "err", err)
		}
	}
	who := fmt.Sprintf("the dashboard replica %s", prev.ID)
	if prev.Host != "" {
		who += fmt.Sprintf(" (host %s, pid %d)", prev.Host, prev.PID)
	}
	msg := fmt.Sprintf("lost: %s that ran this training job stopped (its lease ran out at %s), and a local training process cannot be adopted by another replica; resume the run from its last checkpoint (resume_from)",
		who, l.Expires.UTC().Format(time.RFC3339))
	if err := f.endLostRun(ctx, runID, msg); err != nil {
		return err
	}
	j, ok, err := f.Get(ctx, runID)
	if err != nil {
		return err
	}
	if !ok {
		j = FleetJob{Info: Info{RunID: runID, Queued: time.Now().UTC()}, Replica: prev.ID}
	}
	now := time.Now().UTC()
	j.State, j.Error, j.Ended, j.PID = StateLost, msg, &now, 0
	if err := f.record(ctx, j); err != nil {
		return err
	}
	f.log.Warn("training job lost: its replica stopped", "run_id", runID, "replica", prev.ID)
	return f.member.Release(ctx, l.Name)
}

// endLostRun fails the run of a lost job unless it already ended (its
// process may have reported its own end through a spool file).
func (f *Fleet) endLostRun(ctx context.Context, runID, msg string) error {
	r, err := f.st.GetRun(ctx, runID)
	if store.ErrorCode(err) == store.CodeNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if r.Status.Terminal() {
		return nil
	}
	res, err := f.st.Apply(ctx, []store.Event{{Type: store.EventRunEnd, RunID: runID, Writer: "lost-" + store.NewID()[8:], Seq: 1, Status: store.StatusFailed, Error: msg}})
	if err != nil {
		return err
	}
	if len(res.Errors) > 0 && res.Errors[0].Code != store.CodeInvalidTransition { // ended meanwhile: fine
		return &res.Errors[0]
	}
	return nil
}

// lost stops this replica's job whose lease another replica took over (it
// has ended the run or re-attached to the job already).
func (f *Fleet) lost(name string) {
	runID := strings.TrimPrefix(name, LeasePrefix)
	if _, ok := f.m.Get(runID); !ok {
		return
	}
	f.log.Warn("stopping a training job whose lease another replica took over", "run_id", runID)
	_, _ = f.m.Stop(context.Background(), runID)
}
