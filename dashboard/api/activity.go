package api

import (
	"fmt"
	"sort"
	"time"

	"github.com/fw-serve/fw/dashboard/registry"
	"github.com/fw-serve/fw/dashboard/store"
)

// Activity kinds reported by GET /api/activity.
const (
	ActivityRunStarted     = "run_started"
	ActivityRunFinished    = "run_finished"
	ActivityRunFailed      = "run_failed"
	ActivityRunStopped     = "run_stopped"
	ActivityExportStarted  = "export_started"
	ActivityExportFinished = "export_finished"
	ActivityExportFailed   = "export_failed"
	ActivityDeployed       = "deployed"
	ActivityUndeployed     = "undeployed"
)

// ActivityEvent is one line of the recent-activity feed: something that
// happened to a run, an export or a deployment, with a sentence saying it.
type ActivityEvent struct {
	Time         time.Time `json:"time"`
	Kind         string    `json:"kind"`
	Message      string    `json:"message"`
	RunID        string    `json:"run_id,omitempty"`
	Experiment   string    `json:"experiment,omitempty"`
	ExperimentID string    `json:"experiment_id,omitempty"`
	Name         string    `json:"name,omitempty"`
	Status       string    `json:"status,omitempty"`
	Model        string    `json:"model,omitempty"`
	Version      int       `json:"version,omitempty"`
	DeploymentID string    `json:"deployment_id,omitempty"`
	ExportID     string    `json:"export_id,omitempty"`
}

// activity answers GET /api/activity?limit=N: the newest events across
// runs (started and ended), export jobs and deployments, newest first. It is
// derived from their current state (the store's run times, the registry's
// export and deployment records, all in the store), so it needs no log of
// its own and is the same after a restart and on every replica.
func (s *Server) activity(c *call) (any, error) {
	ctx := c.rc
	limit, e := queryInt(ctx, "limit", 50, 1, 500)
	if e != nil {
		return nil, e
	}
	page, err := s.st.ListRuns(c.ctx, store.ListQuery{Sort: "updated", Desc: true, Limit: limit})
	if err != nil {
		return nil, err
	}
	events := runActivity(page.Runs)
	if r := s.registry.Load(); r != nil {
		exports, err := r.Exports(c.ctx)
		if err != nil {
			return nil, err
		}
		for _, j := range exports {
			name := j.Model
			ev := ActivityEvent{Time: j.Started, Kind: ActivityExportStarted, Model: name, ExportID: j.ID, RunID: j.Request.RunID, Status: j.State,
				Message: fmt.Sprintf("Export of %s to %s started", orDash(j.Request.Checkpoint), j.Request.Format)}
			events = append(events, ev)
			if j.Finished != nil {
				end := ev
				end.Time = *j.Finished
				if j.Error != "" {
					end.Kind, end.Message = ActivityExportFailed, fmt.Sprintf("Export to %s failed: %s", j.Request.Format, j.Error)
				} else {
					end.Kind, end.Version = ActivityExportFinished, j.Version
					end.Message = fmt.Sprintf("Exported %s version %d (%s)", name, j.Version, j.Request.Format)
				}
				events = append(events, end)
			}
		}
		deployed := func(d registry.Deployment) ActivityEvent {
			return ActivityEvent{Time: d.Started, Kind: ActivityDeployed, Model: d.Model, Version: d.Version, DeploymentID: d.ID, Status: d.State,
				Message: fmt.Sprintf("Deployed %s version %d at %s", d.Model, d.Version, d.URL)}
		}
		deps, err := r.Records(c.ctx) // not Deployments(): no health probes, no request-rate sample taken
		if err != nil {
			return nil, err
		}
		for _, d := range deps {
			events = append(events, deployed(*d))
		}
		ended, err := r.EndedDeployments(c.ctx)
		if err != nil {
			return nil, err
		}
		for _, d := range ended {
			events = append(events, deployed(d))
			if d.Stopped != nil {
				events = append(events, ActivityEvent{Time: *d.Stopped, Kind: ActivityUndeployed, Model: d.Model, Version: d.Version, DeploymentID: d.ID, Status: d.State,
					Message: fmt.Sprintf("Undeployed %s version %d (%s)", d.Model, d.Version, d.URL)})
			}
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.After(events[j].Time) })
	if len(events) > limit {
		events = events[:limit]
	}
	return map[string]any{"events": events}, nil
}

// runActivity turns runs into their start and end events.
func runActivity(runs []store.Run) []ActivityEvent {
	out := []ActivityEvent{} // never nil: no activity is "events": [], not null
	for _, r := range runs {
		base := ActivityEvent{RunID: r.ID, Experiment: r.Experiment, ExperimentID: r.ExperimentID, Name: r.Name, Status: string(r.Status)}
		if r.Started != nil {
			ev := base
			ev.Time, ev.Kind = *r.Started, ActivityRunStarted
			ev.Message = fmt.Sprintf("Run %s started in %s", r.Name, r.Experiment)
			out = append(out, ev)
		}
		if r.Ended != nil {
			ev := base
			ev.Time = *r.Ended
			switch r.Status {
			case store.StatusFailed:
				ev.Kind, ev.Message = ActivityRunFailed, fmt.Sprintf("Run %s failed", r.Name)
				if r.Error != "" {
					ev.Message += ": " + r.Error
				}
			case store.StatusStopped:
				ev.Kind, ev.Message = ActivityRunStopped, fmt.Sprintf("Run %s was stopped", r.Name)
			default:
				ev.Kind, ev.Message = ActivityRunFinished, fmt.Sprintf("Run %s finished", r.Name)
			}
			out = append(out, ev)
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
