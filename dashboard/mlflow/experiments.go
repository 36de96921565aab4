package mlflow

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/fw-serve/fw/dashboard/store"
)

// kv is MLflow's key-value pair (tags, params).
type kv struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// experiment is MLflow's Experiment message.
type experiment struct {
	ExperimentID     string `json:"experiment_id"`
	Name             string `json:"name"`
	ArtifactLocation string `json:"artifact_location"`
	LifecycleStage   string `json:"lifecycle_stage"`
	LastUpdateTime   int64  `json:"last_update_time"`
	CreationTime     int64  `json:"creation_time"`
	Tags             []kv   `json:"tags,omitempty"`
}

// mlExperimentID is the MLflow ID of an fw experiment: "0" for Default.
func mlExperimentID(id, name string) string {
	if name == DefaultExperiment {
		return "0"
	}
	return id
}

func (s *Server) toExperiment(e store.Experiment) experiment {
	out := experiment{
		ExperimentID:     mlExperimentID(e.ID, e.Name),
		Name:             e.Name,
		ArtifactLocation: experimentLocation(e),
		LifecycleStage:   "active",
		LastUpdateTime:   e.Updated.UnixMilli(),
		CreationTime:     e.Created.UnixMilli(),
	}
	if e.Archived {
		out.LifecycleStage = "deleted"
	}
	for _, k := range sortedKeys(e.Tags) {
		out.Tags = append(out.Tags, kv{k, e.Tags[k]})
	}
	return out
}

// defaultExperimentID returns the fw ID of MLflow's experiment "0", creating
// the Default experiment on first use. fresh skips the cached ID (after the
// store reported it gone).
func (s *Server) defaultExperimentID(ctx context.Context, fresh bool) (string, *apiError) {
	s.defaultMu.Lock()
	defer s.defaultMu.Unlock()
	if s.defaultID != "" && !fresh {
		return s.defaultID, nil
	}
	page, err := s.st.ListExperiments(ctx, store.ListQuery{Filter: fmt.Sprintf("name = %s", quote(DefaultExperiment)), Limit: 1})
	if err != nil {
		return "", s.fromStore(err, "looking up the Default experiment")
	}
	if len(page.Experiments) == 1 {
		s.defaultID = page.Experiments[0].ID
		return s.defaultID, nil
	}
	in := store.ExperimentInput{Name: DefaultExperiment, Description: "MLflow's default experiment (ID 0)"}
	if root := s.cfg.DefaultArtifactRoot; root != "" {
		in.ArtifactLocation = strings.TrimRight(root, "/") + "/0" // MLflow's ID of it
	}
	e, err := s.st.CreateExperiment(ctx, in)
	if err != nil {
		if store.ErrorCode(err) != store.CodeConflict {
			return "", s.fromStore(err, "creating the Default experiment")
		}
		d, gerr := s.st.GetExperiment(ctx, DefaultExperiment)
		if gerr != nil {
			return "", s.fromStore(gerr, "looking up the Default experiment")
		}
		e = d.Experiment
	}
	s.defaultID = e.ID
	return s.defaultID, nil
}

// fwExperiment resolves an MLflow experiment ID to fw's experiment. Only IDs
// are accepted here (fw's store also finds experiments by name).
func (s *Server) fwExperiment(ctx context.Context, id string) (store.Experiment, *apiError) {
	if id == "0" {
		fid, e := s.defaultExperimentID(ctx, false)
		if e != nil {
			return store.Experiment{}, e
		}
		id = fid
	}
	if id == "" {
		return store.Experiment{}, errf(400, codeInvalidParameter, "missing value for required parameter 'experiment_id'")
	}
	// A listing by ID, not GetExperiment: that also builds the experiment's
	// metric overview over all its runs, which create_run does not need.
	page, err := s.st.ListExperiments(ctx, store.ListQuery{Filter: "id = " + quote(id), Limit: 1})
	if err != nil {
		return store.Experiment{}, s.fromStore(err, "reading experiment "+id)
	}
	if len(page.Experiments) == 0 {
		return store.Experiment{}, errf(404, codeNotFound, "No Experiment with id=%s exists", id)
	}
	return page.Experiments[0].Experiment, nil
}

func (s *Server) createExperiment(r *request) (any, *apiError) {
	name, e := r.need("name")
	if e != nil {
		return nil, e
	}
	var tags []kv
	if e := r.decode("tags", &tags); e != nil {
		return nil, e
	}
	if err := store.ValidateExperimentName(name); err != nil {
		return nil, errf(400, codeInvalidParameter, "Invalid experiment name: %v", err)
	}
	loc, e := r.str("artifact_location")
	if e != nil {
		return nil, e
	}
	if loc != "" && !strings.Contains(loc, ":") && !strings.HasPrefix(loc, "/") {
		// A relative directory, as MLflow's server reads it: against the
		// server's working directory.
		if abs, err := filepath.Abs(loc); err == nil {
			loc = abs
		}
	}
	if loc != "" && !s.honoured(loc) {
		// Never ignored: a client that asked for s3://... must not find its
		// files elsewhere.
		return nil, errf(400, codeInvalidParameter, "artifact_location %q is not supported by fw: give an absolute local directory (a path or a file:// URI; MLflow's client writes the run files there itself), an s3:// location inside the dashboard's --default-artifact-root s3://bucket/prefix, or leave it out for the dashboard's own artifact storage (its artifact proxy; a bucket with FW_ARTIFACT_URI=s3://bucket/prefix)", loc)
	}
	in := store.ExperimentInput{Name: name, Tags: map[string]string{}, ArtifactLocation: loc, ArtifactRoot: s.cfg.DefaultArtifactRoot}
	for _, t := range tags {
		if t.Key == "mlflow.note.content" {
			in.Description = t.Value
		}
		in.Tags[t.Key] = t.Value
	}
	x, err := s.st.CreateExperiment(r.ctx, in)
	if err != nil {
		if store.ErrorCode(err) == store.CodeConflict {
			return nil, errf(400, codeAlreadyExists, "Experiment(name=%s) already exists", name)
		}
		return nil, s.fromStore(err, "creating experiment "+name)
	}
	return map[string]string{"experiment_id": mlExperimentID(x.ID, x.Name)}, nil
}

func (s *Server) getExperiment(r *request) (any, *apiError) {
	id, e := r.need("experiment_id")
	if e != nil {
		return nil, e
	}
	x, e := s.fwExperiment(r.ctx, id)
	if e != nil {
		return nil, e
	}
	return map[string]any{"experiment": s.toExperiment(x)}, nil
}

func (s *Server) getExperimentByName(r *request) (any, *apiError) {
	name, e := r.need("experiment_name")
	if e != nil {
		return nil, e
	}
	page, err := s.st.ListExperiments(r.ctx, store.ListQuery{Filter: "name = " + quote(name), Limit: 1})
	if err != nil {
		return nil, s.fromStore(err, "looking up experiment "+name)
	}
	if len(page.Experiments) == 0 {
		if name == DefaultExperiment {
			id, e := s.defaultExperimentID(r.ctx, true)
			if e != nil {
				return nil, e
			}
			x, e := s.fwExperiment(r.ctx, id)
			if e != nil {
				return nil, e
			}
			return map[string]any{"experiment": s.toExperiment(x)}, nil
		}
		return nil, errf(404, codeNotFound, "Could not find experiment with name '%s'", name)
	}
	return map[string]any{"experiment": s.toExperiment(page.Experiments[0].Experiment)}, nil
}

func (s *Server) searchExperiments(r *request) (any, *apiError) {
	maxResults, set, e := r.int64Field("max_results")
	if e != nil {
		return nil, e
	}
	if !set {
		maxResults = 1000
	}
	if maxResults < 1 || maxResults > maxResultsExps {
		return nil, errf(400, codeInvalidParameter, "max_results must be within 1..%d (got %d)", maxResultsExps, maxResults)
	}
	filter, e := r.str("filter")
	if e != nil {
		return nil, e
	}
	view, e := r.str("view_type")
	if e != nil {
		return nil, e
	}
	var orderBy []string
	if e := r.decode("order_by", &orderBy); e != nil {
		if orderBy, e = r.strs("order_by"); e != nil {
			return nil, e
		}
	}
	token, e := r.str("page_token")
	if e != nil {
		return nil, e
	}
	fwFilter, e := translateFilter(filter, true)
	if e != nil {
		return nil, e
	}
	if v := viewFilter(view, "archived = true", "archived = false"); v != "" {
		fwFilter = and(fwFilter, v)
	}
	q := store.ListQuery{Filter: fwFilter, Limit: int(min(maxResults, 10000)), Sort: "created", Desc: true, IDAsc: true}
	if len(orderBy) > 0 {
		sort, desc, e := translateOrder(orderBy[0], true)
		if e != nil {
			return nil, e
		}
		q.Sort, q.Desc = sort, desc
	}
	if q.Cursor, e = decodeToken(token); e != nil {
		return nil, e
	}
	// MLflow's experiment "0" exists from the start: listed before any run
	// is logged into it.
	if _, e := s.defaultExperimentID(r.ctx, false); e != nil {
		return nil, e
	}
	page, err := s.st.ListExperiments(r.ctx, q)
	if err != nil {
		return nil, s.fromStore(err, "searching experiments")
	}
	out := struct {
		Experiments   []experiment `json:"experiments"`
		NextPageToken string       `json:"next_page_token,omitempty"`
	}{Experiments: []experiment{}, NextPageToken: encodeToken(page.Next)}
	for _, d := range page.Experiments {
		out.Experiments = append(out.Experiments, s.toExperiment(d.Experiment))
	}
	return out, nil
}

// viewFilter maps MLflow's view types to a filter clause ("" for ALL).
func viewFilter(view, deleted, active string) string {
	switch strings.ToUpper(view) {
	case "DELETED_ONLY", "2":
		return deleted
	case "ALL", "3":
		return ""
	}
	return active // ACTIVE_ONLY, the default
}

func (s *Server) updateExperiment(r *request) (any, *apiError) {
	id, e := r.need("experiment_id")
	if e != nil {
		return nil, e
	}
	name, e := r.need("new_name")
	if e != nil {
		return nil, e
	}
	x, e := s.fwExperiment(r.ctx, id)
	if e != nil {
		return nil, e
	}
	if err := store.ValidateExperimentName(name); err != nil {
		return nil, errf(400, codeInvalidParameter, "Invalid experiment name: %v", err)
	}
	if _, err := s.st.UpdateExperiment(r.ctx, x.ID, store.ExperimentPatch{Name: &name}); err != nil {
		if store.ErrorCode(err) == store.CodeConflict {
			return nil, errf(400, codeAlreadyExists, "Experiment(name=%s) already exists", name)
		}
		return nil, s.fromStore(err, "renaming experiment "+id)
	}
	return struct{}{}, nil
}

func (s *Server) setArchived(r *request, archived bool) (any, *apiError) {
	id, e := r.need("experiment_id")
	if e != nil {
		return nil, e
	}
	x, e := s.fwExperiment(r.ctx, id)
	if e != nil {
		return nil, e
	}
	if _, err := s.st.UpdateExperiment(r.ctx, x.ID, store.ExperimentPatch{Archived: &archived}); err != nil {
		return nil, s.fromStore(err, "updating experiment "+id)
	}
	return struct{}{}, nil
}

// deleteExperiment is MLflow's soft delete: fw archives the experiment
// (fw's own DELETE /api/experiments/{id} removes it for good).
func (s *Server) deleteExperiment(r *request) (any, *apiError)  { return s.setArchived(r, true) }
func (s *Server) restoreExperiment(r *request) (any, *apiError) { return s.setArchived(r, false) }

func (s *Server) setExperimentTag(r *request) (any, *apiError) {
	id, e := r.need("experiment_id")
	if e != nil {
		return nil, e
	}
	key, e := r.need("key")
	if e != nil {
		return nil, e
	}
	value, e := r.str("value")
	if e != nil {
		return nil, e
	}
	x, e := s.fwExperiment(r.ctx, id)
	if e != nil {
		return nil, e
	}
	p := store.ExperimentPatch{Tags: map[string]string{key: value}}
	if key == "mlflow.note.content" {
		p.Description = &value
	}
	if _, err := s.st.UpdateExperiment(r.ctx, x.ID, p); err != nil {
		return nil, s.fromStore(err, "tagging experiment "+id)
	}
	return struct{}{}, nil
}

func (s *Server) deleteExperimentTag(r *request) (any, *apiError) {
	id, e := r.need("experiment_id")
	if e != nil {
		return nil, e
	}
	key, e := r.need("key")
	if e != nil {
		return nil, e
	}
	x, e := s.fwExperiment(r.ctx, id)
	if e != nil {
		return nil, e
	}
	if _, err := s.st.UpdateExperiment(r.ctx, x.ID, store.ExperimentPatch{DeleteTags: []string{key}}); err != nil {
		return nil, s.fromStore(err, "untagging experiment "+id)
	}
	return struct{}{}, nil
}

// Page tokens wrap fw's cursors (opaque to clients either way).
func encodeToken(cursor string) string {
	if cursor == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(cursor))
}

func decodeToken(token string) (string, *apiError) {
	if token == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return "", errf(400, codeInvalidParameter, "page_token is not one this server gave out; pass next_page_token from the previous answer unchanged")
	}
	return string(b), nil
}

func and(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return "(" + a + ") AND (" + b + ")"
}
