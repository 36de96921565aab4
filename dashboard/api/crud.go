package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/query"
	"github.com/fw-serve/fw/dashboard/store"
)

// listQuery reads ?filter=&sort=&desc=&limit=&cursor=[&columns=] of a
// listing.
func listQuery(ctx *fasthttp.RequestCtx) (store.ListQuery, *Error) {
	args := ctx.QueryArgs()
	q := store.ListQuery{Filter: string(args.Peek("filter")), Sort: string(args.Peek("sort")), Cursor: string(args.Peek("cursor"))}
	var e *Error
	if q.Desc, e = queryBool(ctx, "desc"); e != nil {
		return q, e
	}
	if q.Limit, e = queryInt(ctx, "limit", 100, 1, 10000); e != nil {
		return q, e
	}
	if args.Has("columns") {
		if q.Columns, e = parseColumns(string(args.Peek("columns"))); e != nil {
			return q, e
		}
	}
	return q, nil
}

// maxColumns bounds ?columns=.
const maxColumns = 2000

// parseColumns reads ?columns=: comma-separated params.KEY, metrics.KEY
// and system.KEY fields (a key with odd characters quoted, as the query
// language writes it; a metric's .last/.min/.max names its key), the only
// ones each run of the page carries. Empty: none.
func parseColumns(v string) (*store.Columns, *Error) {
	cols := &store.Columns{}
	var fields []string
	start, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] == '\\' && quoted:
			i++
		case v[i] == '"':
			quoted = !quoted
		case v[i] == ',' && !quoted:
			fields = append(fields, v[start:i])
			start = i + 1
		}
	}
	fields = append(fields, v[start:])
	if len(fields) > maxColumns {
		return nil, apiErr(400, string(store.CodeInvalidArgument), fmt.Sprintf("?columns= names %d fields; at most %d", len(fields), maxColumns))
	}
	for _, f := range fields {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		fd, err := query.ParseField(f, query.Runs)
		if err != nil {
			return nil, apiErr(400, string(store.CodeInvalidArgument), fmt.Sprintf("?columns= field %q: %v; give params.KEY, metrics.KEY or system.KEY, comma-separated", f, err))
		}
		switch fd.Kind {
		case query.ParamKey:
			cols.Params = append(cols.Params, fd.Key)
		case query.Metric:
			cols.Metrics = append(cols.Metrics, fd.Key)
		case query.System:
			cols.System = append(cols.System, fd.Key)
		default:
			return nil, apiErr(400, string(store.CodeInvalidArgument), fmt.Sprintf("?columns= field %q is not a param or metric; give params.KEY, metrics.KEY or system.KEY (tags and the run's own fields are always there)", f))
		}
	}
	return cols, nil
}

// queryBool reads an optional ?name=true|false (absent: false); any other
// value, "" included, is refused instead of read as false, as the API
// document says.
func queryBool(ctx *fasthttp.RequestCtx, name string) (bool, *Error) {
	args := ctx.QueryArgs()
	if !args.Has(name) {
		return false, nil
	}
	switch v := string(args.Peek(name)); v {
	case "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, apiErr(400, string(store.CodeInvalidArgument), fmt.Sprintf("?%s=%q must be true or false", name, v))
	}
}

// decodeStrict decodes a JSON object body, refusing unknown fields.
func (s *Server) decodeStrict(ctx *fasthttp.RequestCtx, v any, shape string) *Error {
	body, e := s.readBody(ctx)
	if e != nil {
		return e
	}
	if !isJSONObject(body) {
		return apiErr(400, string(store.CodeInvalidJSON), "the body must be a JSON object "+shape)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apiErr(400, string(store.CodeInvalidJSON), "the body must be a JSON object "+shape+": "+err.Error())
	}
	return nil
}

// isJSONObject reports whether body starts like a JSON object: Go's decoder
// reads null (or nothing useful) into a struct without an error.
func isJSONObject(body []byte) bool {
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

// splitTags turns {"k": "v", "gone": null} into tags to set and tags to delete.
func splitTags(in map[string]*string) (map[string]string, []string) {
	var set map[string]string
	var del []string
	for k, v := range in {
		if v == nil {
			del = append(del, k)
			continue
		}
		if set == nil {
			set = map[string]string{}
		}
		set[k] = *v
	}
	return set, del
}

// experimentID resolves an experiment ID or name to its ID.
func (s *Server) experimentID(ctx context.Context, idOrName string) (string, error) {
	d, err := s.st.GetExperiment(ctx, idOrName)
	if err != nil {
		return "", err
	}
	return d.ID, nil
}

// patchExperiment answers PATCH /api/experiments/{id}: name, description,
// tags (a null value removes the tag) and archived.
func (s *Server) patchExperiment(c *call) (any, error) {
	var in struct {
		Name        *string            `json:"name"`
		Description *string            `json:"description"`
		Archived    *bool              `json:"archived"`
		Tags        map[string]*string `json:"tags"`
	}
	if e := s.decodeStrict(c.rc, &in, `{"name": "...", "description": "...", "archived": true, "tags": {"key": "value" or null to remove}}`); e != nil {
		return nil, e
	}
	id, err := s.experimentID(c.ctx, c.param("id"))
	if err != nil {
		return nil, err
	}
	p := store.ExperimentPatch{Name: in.Name, Description: in.Description, Archived: in.Archived}
	p.Tags, p.DeleteTags = splitTags(in.Tags)
	return s.st.UpdateExperiment(c.ctx, id, p)
}

// deleteExperiment answers DELETE /api/experiments/{id}: a hard delete of
// the experiment and all its runs.
func (s *Server) deleteExperiment(c *call) (any, error) {
	id, err := s.experimentID(c.ctx, c.param("id"))
	if err != nil {
		return nil, err
	}
	var runs []string
	if s.cfg.Artifacts != nil || s.cfg.Checkpoints != nil { // the store removes files in directories only
		if runs, err = s.runIDs(c.ctx, id); err != nil {
			return nil, err
		}
	}
	if err := s.st.DeleteExperiment(c.ctx, id); err != nil {
		return nil, err
	}
	s.deleteRunObjects(runs...)
	return map[string]any{"id": id, "deleted": true}, nil
}

// experimentRuns answers GET /api/experiments/{id}/runs. An unknown
// experiment is a 404 (ListRuns' not_found), not an empty page.
func (s *Server) experimentRuns(c *call) (any, error) { return s.runPage(c, c.param("id")) }

// runPage answers one page of runs from the request's filter, sort and
// cursor, narrowed to an experiment unless experiment is "".
func (s *Server) runPage(c *call, experiment string) (any, error) {
	q, e := listQuery(c.rc)
	if e != nil {
		return nil, e
	}
	q.Experiment = experiment
	page, err := s.st.ListRuns(c.ctx, q)
	if err != nil {
		return nil, err
	}
	if page.Runs == nil {
		page.Runs = []store.Run{}
	}
	return page, nil
}

// patchRun answers PATCH /api/runs/{id}: name and tags.
func (s *Server) patchRun(c *call) (any, error) {
	var in struct {
		Name *string            `json:"name"`
		Tags map[string]*string `json:"tags"`
	}
	if e := s.decodeStrict(c.rc, &in, `{"name": "...", "tags": {"key": "value" or null to remove}}`); e != nil {
		return nil, e
	}
	p := store.RunPatch{Name: in.Name}
	p.Tags, p.DeleteTags = splitTags(in.Tags)
	return s.st.UpdateRun(c.ctx, c.param("id"), p)
}

// deleteRun answers DELETE /api/runs/{id}: a hard delete of the run, its
// logs, checkpoints and artifacts.
func (s *Server) deleteRun(c *call) (any, error) {
	id := c.param("id")
	if err := s.st.DeleteRun(c.ctx, id); err != nil {
		return nil, err
	}
	s.deleteRunObjects(id)
	return map[string]any{"id": id, "deleted": true}, nil
}

// runIDs lists the IDs of an experiment's runs.
func (s *Server) runIDs(ctx context.Context, exp string) ([]string, error) {
	var ids []string
	cur := ""
	for {
		page, err := s.st.ListRuns(ctx, store.ListQuery{Experiment: exp, Sort: "id", Limit: 1000, Cursor: cur})
		if err != nil {
			return nil, err
		}
		for _, r := range page.Runs {
			ids = append(ids, r.ID)
		}
		if page.Next == "" {
			return ids, nil
		}
		cur = page.Next
	}
}

// deleteRunObjects deletes the files of deleted runs from the stores
// given in Config.Artifacts and Config.Checkpoints (object storage, which
// the store's own delete does not reach). The runs are gone either way: a
// failure is logged, leaving objects nothing lists any more. It runs under
// the server's context, not the request's: a client that goes away once
// the runs are deleted does not leave their files behind.
func (s *Server) deleteRunObjects(runs ...string) {
	for _, files := range []blob.Store{s.cfg.Artifacts, s.cfg.Checkpoints} {
		if files == nil {
			continue
		}
		for _, id := range runs {
			if err := files.DeletePrefix(s.base, id); err != nil {
				s.log.Error("deleting a deleted run's files from storage", "run", id, "store", files.String(), "err", err)
			}
		}
	}
}
