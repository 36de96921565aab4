package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/drift"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/lru"
	"github.com/fw-serve/fw/payloadlog"
)

// The payload store: request/response records deployments log (fw serve
// --log-payloads, package payloadlog), and the drift of a deployment's
// traffic against a reference window of it.

// Limits and defaults of the payload store.
const (
	maxPayloadRecordBytes = 1 << 20
	// DefaultPayloadRetention and DefaultPayloadMaxRecords bound the store
	// unless configured (Config.PayloadRetention, PayloadMaxRecords).
	DefaultPayloadRetention  = 7 * 24 * time.Hour
	DefaultPayloadMaxRecords = 1_000_000
	defaultDriftReference    = 200
	defaultDriftCurrent      = 500
	// ReferenceArtifact is the run artifact a training run's data summary
	// is logged as (fw.track's Run.log_reference): JSON Lines, one payload
	// record per row of the data, read as a drift reference with
	// ?reference_run=.
	ReferenceArtifact = "fw-reference.jsonl"
	// maxReferenceBytes and maxReferenceRecords bound what is read of it.
	maxReferenceBytes   = 64 << 20
	maxReferenceRecords = 100_000
)

// payloadStore is the receiver's state.
type payloadStore struct {
	lastPrune atomic.Int64
	// refs keeps runs' data summaries, summarized: the Traffic view asks
	// for the drift every 10 s, and a summary changes only when it is
	// logged again.
	refs referenceCache
}

// referenceCache holds the summarized data summaries of the runs asked for
// last, each with its file's Tag (blob.Info), bounded by the samples held
// in all. Safe for concurrent use. Its slices are shared: callers do not
// modify them.
type referenceCache struct {
	once sync.Once
	c    *lru.Cache[string, cachedReference] // by run ID, weighed in samples
}

type cachedReference struct {
	tag     string
	samples []drift.Sample
}

// maxCachedSamples bounds the samples the cache holds (a few hundred bytes
// each): about twice the largest summary the dashboard reads.
const maxCachedSamples = 2 * maxReferenceRecords

func (c *referenceCache) cache() *lru.Cache[string, cachedReference] {
	c.once.Do(func() { c.c = lru.New[string, cachedReference](maxCachedSamples) })
	return c.c
}

func (c *referenceCache) get(id, tag string) ([]drift.Sample, bool) {
	e, ok := c.cache().Get(id)
	if !ok || e.tag != tag {
		return nil, false
	}
	return e.samples, true
}

func (c *referenceCache) put(id, tag string, samples []drift.Sample) {
	c.cache().Put(id, cachedReference{tag: tag, samples: samples}, int64(len(samples)))
}

var payloadIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// refusedRecord is one record of a batch the dashboard did not keep.
type refusedRecord struct {
	Line    int    `json:"line"`
	Message string `json:"message"`
}

// receivePayloads is POST /api/payloads: records as NDJSON (one
// payloadlog.Record a line) or a JSON array. A record already stored (the
// same deployment and ID, resent from a spool) is kept once. Records that
// do not validate are refused one by one, the rest kept.
func (s *Server) receivePayloads(c *call) (any, error) {
	body, e := s.readBody(c.rc)
	if e != nil {
		return nil, e
	}
	var raws []json.RawMessage
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '[' {
		if err := json.Unmarshal(t, &raws); err != nil {
			return nil, apiErr(400, string(store.CodeInvalidJSON), "the body is not a JSON array of records: "+err.Error())
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 64<<10), maxPayloadRecordBytes+1)
		for sc.Scan() {
			if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
				raws = append(raws, append(json.RawMessage(nil), line...))
			}
		}
		if err := sc.Err(); err != nil {
			return nil, apiErr(413, CodeTooLarge, fmt.Sprintf("a record is larger than %d bytes: %v", maxPayloadRecordBytes, err))
		}
	}
	if len(raws) > store.MaxPayloadsPerBatch {
		return nil, apiErr(413, CodeTooLarge, fmt.Sprintf("%d records in one request; send at most %d", len(raws), store.MaxPayloadsPerBatch))
	}
	deployment := string(c.rc.QueryArgs().Peek("deployment"))
	var keep []store.Payload
	refused := []refusedRecord{}
	for i, raw := range raws {
		p, err := payloadOf(raw, deployment)
		if err != "" {
			refused = append(refused, refusedRecord{Line: i + 1, Message: err})
			continue
		}
		keep = append(keep, p)
	}
	stored := 0
	if len(keep) > 0 {
		n, err := s.st.PutPayloads(c.ctx, keep)
		if err != nil {
			return nil, err
		}
		stored = n
		s.prunePayloads(c)
	}
	return map[string]any{"accepted": len(keep), "stored": stored, "refused": refused}, nil
}

// payloadOf validates one record; its message says what is wrong.
func payloadOf(raw json.RawMessage, deployment string) (store.Payload, string) {
	if len(raw) > maxPayloadRecordBytes {
		return store.Payload{}, fmt.Sprintf("the record is larger than %d bytes", maxPayloadRecordBytes)
	}
	var r payloadlog.Record
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&r); err != nil {
		return store.Payload{}, "not a payload record: " + err.Error()
	}
	if r.Deployment == "" {
		r.Deployment = deployment
	}
	switch {
	case !payloadIDRe.MatchString(r.ID):
		return store.Payload{}, `"id" must be 1 to 64 letters, digits, - or _`
	case r.Model == "" || len(r.Model) > 256 || len(r.Version) > 64 || len(r.Deployment) > 256:
		return store.Payload{}, `"model" (1 to 256 bytes), "version" (up to 64) and "deployment" (up to 256) name the sender`
	case r.Time.IsZero():
		return store.Payload{}, `"time" (RFC 3339) is required`
	}
	emptyTensorLists(&r)
	out, err := json.Marshal(&r) // the record as fw reads it: unknown fields dropped
	if err != nil {
		return store.Payload{}, "the record cannot be stored: " + err.Error()
	}
	return store.Payload{ID: r.ID, Deployment: r.Deployment, Model: r.Model, Version: r.Version, Time: r.Time.UTC(), Failed: r.Error != "", Record: out}, ""
}

// emptyTensorLists gives a record without inputs or outputs (absent, or
// null) empty lists: the API's document describes both as arrays.
func emptyTensorLists(r *payloadlog.Record) {
	if r.Inputs == nil {
		r.Inputs = []payloadlog.Tensor{}
	}
	if r.Outputs == nil {
		r.Outputs = []payloadlog.Tensor{}
	}
}

// prunePayloads removes old records, at most once every pruneEvery.
func (s *Server) prunePayloads(c *call) {
	now := time.Now()
	last := s.payloads.lastPrune.Load()
	if now.UnixNano()-last < int64(pruneEvery) || !s.payloads.lastPrune.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	retention, keep := s.cfg.PayloadRetention, s.cfg.PayloadMaxRecords
	if retention <= 0 {
		retention = DefaultPayloadRetention
	}
	if keep <= 0 {
		keep = DefaultPayloadMaxRecords
	}
	if _, err := s.st.PrunePayloads(c.ctx, now.Add(-retention), keep); err != nil {
		s.log.Warn("pruning the payload store", "err", err)
	}
}

// payloadQuery reads ?deployment=&model=&version= (none: every sender's).
func payloadQuery(c *call) (store.PayloadQuery, *Error) {
	args := c.rc.QueryArgs()
	return store.PayloadQuery{Deployment: string(args.Peek("deployment")), Model: string(args.Peek("model")), Version: string(args.Peek("version"))}, nil
}

// queryTime reads an RFC 3339 time parameter (zero when absent; present
// but empty, "?since=", is refused).
func queryTime(c *call, name string) (time.Time, *Error) {
	if !c.rc.QueryArgs().Has(name) {
		return time.Time{}, nil
	}
	v := c.rc.QueryArgs().Peek(name)
	t, err := parseRFC3339(string(v))
	if err != nil {
		return time.Time{}, apiErr(400, string(store.CodeInvalidArgument), fmt.Sprintf("?%s=%q: give an RFC 3339 time such as 2026-11-27T09:00:00Z", name, v))
	}
	return t, nil
}

// parseRFC3339 reads an RFC 3339 date-time as the standard allows it
// (lowercase t and z, any number of fractional digits: past nanoseconds
// they are dropped), which Go's own layout is stricter about.
func parseRFC3339(v string) (time.Time, error) {
	v = strings.ToUpper(v)
	if i := strings.IndexByte(v, '.'); i >= 0 {
		j := i + 1
		for j < len(v) && v[j] >= '0' && v[j] <= '9' {
			j++
		}
		if j-i-1 > 9 {
			v = v[:i+10] + v[j:]
		}
	}
	return time.Parse(time.RFC3339Nano, v)
}

// listPayloads is GET /api/payloads: a deployment's (or model version's)
// records, newest first.
func (s *Server) listPayloads(c *call) (any, error) {
	q, e := payloadQuery(c)
	if e != nil {
		return nil, e
	}
	limit, e := queryInt(c.rc, "limit", 20, 1, 500)
	if e != nil {
		return nil, e
	}
	q.Limit = limit
	if q.Until, e = queryTime(c, "before"); e != nil {
		return nil, e
	}
	ps, err := s.st.ListPayloads(c.ctx, q)
	if err != nil {
		return nil, err
	}
	return map[string]any{"records": ps}, nil
}

// payloadDrift is GET /api/payloads/drift: the drift of a deployment's (or
// model version's) traffic. The reference is the data summary a training
// run logged (reference_run: its ReferenceArtifact), else the records
// logged within [reference_from, reference_to), else the first
// reference_records (200) it logged; the current window the records within
// [from, to), else the latest records (500) logged after the reference.
func (s *Server) payloadDrift(c *call) (any, error) {
	q, e := payloadQuery(c)
	if e != nil {
		return nil, e
	}
	refRun := string(c.rc.QueryArgs().Peek("reference_run"))
	if c.rc.QueryArgs().Has("reference_run") {
		if err := store.ValidateID(refRun); err != nil {
			return nil, apiErr(400, CodeBadRequest, fmt.Sprintf("reference_run: %v; give the ID of the run that logged the data summary (fw.track's run.log_reference)", err))
		}
	}
	refN, e := queryInt(c.rc, "reference_records", defaultDriftReference, 10, store.MaxPayloadsListed)
	if e != nil {
		return nil, e
	}
	curN, e := queryInt(c.rc, "records", defaultDriftCurrent, 10, store.MaxPayloadsListed)
	if e != nil {
		return nil, e
	}
	buckets, e := queryInt(c.rc, "buckets", 12, 1, 100)
	if e != nil {
		return nil, e
	}
	var times [4]time.Time
	for i, name := range []string{"reference_from", "reference_to", "from", "to"} {
		if times[i], e = queryTime(c, name); e != nil {
			return nil, e
		}
	}
	decode := func(ps []store.Payload) []*payloadlog.Record {
		out := make([]*payloadlog.Record, 0, len(ps))
		for _, p := range ps {
			var r payloadlog.Record
			if json.Unmarshal(p.Record, &r) == nil {
				emptyTensorLists(&r) // one stored before they were
				out = append(out, &r)
			}
		}
		return out
	}
	var ref []drift.Sample
	var refEnd time.Time
	if refRun != "" {
		var err error
		if ref, err = s.runReference(c.ctx, refRun); err != nil {
			return nil, err
		}
		// The window parameters pick the summary's rows as they pick logged
		// records: by their time, then the first reference_records (all by
		// default). The cache's slice is shared: filtered into a copy, and
		// only when a time is given (the page's poll gives none).
		if !times[0].IsZero() || !times[1].IsZero() {
			ref = slices.DeleteFunc(slices.Clone(ref), func(x drift.Sample) bool {
				return !times[0].IsZero() && x.Time().Before(times[0]) || !times[1].IsZero() && !x.Time().Before(times[1])
			})
		}
		if c.rc.QueryArgs().Has("reference_records") && len(ref) > refN {
			ref = ref[:refN]
		}
	} else {
		rq := q
		rq.Oldest, rq.Limit, rq.Since, rq.Until = true, refN, times[0], times[1]
		ps, err := s.st.ListPayloads(c.ctx, rq)
		if err != nil {
			return nil, err
		}
		for _, r := range decode(ps) {
			ref = append(ref, drift.Summarize(r))
		}
		if len(ps) > 0 {
			refEnd = ps[len(ps)-1].Time
		}
	}
	cq := q
	cq.Limit, cq.Since, cq.Until = curN, times[2], times[3]
	if cq.Since.IsZero() && !refEnd.IsZero() {
		cq.Since = refEnd.Add(time.Nanosecond) // after the reference
	}
	cur, err := s.st.ListPayloads(c.ctx, cq)
	if err != nil {
		return nil, err
	}
	rep := drift.CompareSummarized(ref, decode(cur), buckets)
	out := map[string]any{"deployment": q.Deployment, "model": q.Model, "version": q.Version, "statistic": rep.Statistic,
		"reference": rep.Reference, "current": rep.Current, "features": rep.Features}
	if refRun != "" {
		out["reference_run"] = refRun
	}
	return out, nil
}

// runReference reads the data summary run id logged (ReferenceArtifact) as
// payload records, bounded in bytes and records, each reduced to its
// features as it is read (a few numbers, whatever its values); a line that
// is not a record is refused with its number.
func (s *Server) runReference(ctx context.Context, id string) ([]drift.Sample, error) {
	if err := s.runFilesReady(ctx, s.artifactFiles, id, "artifacts"); err != nil {
		return nil, err
	}
	listed, err := isListed(ctx, id, ReferenceArtifact, s.st.Artifacts, func(a store.Artifact) string { return a.Path })
	if err != nil {
		return nil, err
	}
	if !listed {
		return nil, apiErr(404, CodeNotFound, fmt.Sprintf("run %s has logged no data summary (artifact %s); log one with run.log_reference(data) in its training script, or compare with a window of the logged traffic (reference_from, reference_to)", id, ReferenceArtifact))
	}
	key := id + "/" + ReferenceArtifact
	if info, err := s.artifactFiles.Stat(ctx, key); err == nil && info.Tag != "" {
		if samples, ok := s.payloads.refs.get(id, info.Tag); ok {
			return samples, nil
		}
	}
	r, info, err := s.artifactFiles.Get(ctx, key)
	switch {
	case errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrInvalidKey):
		return nil, apiErr(404, CodeNotFound, fmt.Sprintf("run %s's data summary (%s) is recorded but its file is gone (or not a regular file); log it again with run.log_reference", id, ReferenceArtifact))
	case err != nil:
		s.log.Error("reading a run's data summary", "run", id, "store", s.artifactFiles.String(), "err", err)
		return nil, apiErr(503, CodeUnavailable, fmt.Sprintf("reading the data summary of run %s from its storage failed; retry, and see the dashboard's log if it persists", id))
	}
	defer r.Close()
	if info.Size > maxReferenceBytes {
		return nil, apiErr(409, CodeConflict, fmt.Sprintf("the data summary of run %s is %d bytes, over the %d read as a reference; log fewer rows (run.log_reference's max_rows)", id, info.Size, maxReferenceBytes))
	}
	sc := bufio.NewScanner(io.LimitReader(r, maxReferenceBytes))
	sc.Buffer(make([]byte, 0, 64<<10), maxPayloadRecordBytes)
	var out []drift.Sample
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if len(out) == maxReferenceRecords {
			return nil, apiErr(409, CodeConflict, fmt.Sprintf("the data summary of run %s has more than %d rows; log fewer (run.log_reference's max_rows)", id, maxReferenceRecords))
		}
		var rec payloadlog.Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, apiErr(409, CodeConflict, fmt.Sprintf("line %d of run %s's data summary (%s) is not a payload record: %v; log it again with run.log_reference", line, id, ReferenceArtifact, err))
		}
		out = append(out, drift.Summarize(&rec))
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		return nil, apiErr(409, CodeConflict, fmt.Sprintf("run %s's data summary (%s) has a line over %d bytes; log it again with run.log_reference (a row of more than 4,096 values is written as its summary)", id, ReferenceArtifact, maxPayloadRecordBytes))
	case err != nil:
		s.log.Error("reading a run's data summary", "run", id, "store", s.artifactFiles.String(), "err", err)
		return nil, apiErr(503, CodeUnavailable, fmt.Sprintf("reading the data summary of run %s from its storage failed part way; retry, and see the dashboard's log if it persists", id))
	}
	if info.Tag != "" {
		s.payloads.refs.put(id, info.Tag, out)
	}
	return out, nil
}

// isPayloadsPath: the ingest route, which also reads NDJSON.
func isPayloadsPath(path string) bool { return strings.TrimSuffix(path, "/") == "/api/payloads" }
