package store

// Params and tags of Apply: validated, written once (params) or set and
// deleted (tags).

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// maxParamJSON is the largest param value, as JSON, in bytes.
const maxParamJSON = 65536

// validateTags checks tags to set (values up to max characters, see
// ValidateTagValue) and keys to delete.
func validateTags(set map[string]string, del []string, max int) *EventError {
	for k, v := range set {
		if err := ValidateKey(k); err != nil {
			return evErr(CodeInvalidKey, "tag: %v", err)
		}
		if err := ValidateTagValue(v, max); err != nil {
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

// paramsPerStatement bounds the params one statement reads or writes (7
// values each: far below SQLite's and PostgreSQL's limits on a statement's
// values).
const paramsPerStatement = 400

// writeParams enforces write-once then inserts the new params: one
// statement reads the stored values of up to 400 keys, one writes up to 400
// (a sweep's run logs its hundreds of params at once; a statement each was
// most of a run's creation cost, on PostgreSQL a round trip each).
func (a *applier) writeParams(ctx context.Context, rs *runState, in map[string]any) error {
	params, perr := prepareParams(in)
	if perr != nil {
		return perr
	}
	stored := map[string]string{}
	for chunk := range slices.Chunk(params, paramsPerStatement) {
		args := make([]any, 0, 1+len(chunk))
		args = append(args, rs.rid)
		for _, p := range chunk {
			args = append(args, p.key)
		}
		rows, err := a.s.queryTx(ctx, a.tx, `SELECT key, value_json FROM params WHERE run_rid = ? AND key IN (`+placeholders(len(chunk))+`)`, args...)
		if err != nil {
			return fmt.Errorf("reading the params of run %s: %w", rs.id, err)
		}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				rows.Close()
				return fmt.Errorf("reading the params of run %s: %w", rs.id, err)
			}
			stored[k] = v
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("reading the params of run %s: %w", rs.id, err)
		}
	}
	fresh := params[:0:0]
	for _, p := range params { // in key order: the first conflicting key is named
		old, ok := stored[p.key]
		switch {
		case !ok:
			fresh = append(fresh, p)
		case old != p.json:
			return evErr(CodeParamConflict, "param %q is already %s; params are write-once (got %s)", p.key, old, p.json)
		}
	}
	for chunk := range slices.Chunk(fresh, paramsPerStatement) {
		args := make([]any, 0, 7*len(chunk))
		for _, p := range chunk {
			args = append(args, rs.rid, p.key, p.json, p.num, p.str, rs.experimentID, rs.id)
		}
		if _, err := a.s.exec(ctx, a.tx, valuesSQL(`INSERT INTO params (run_rid, key, value_json, value_num, value_str, experiment_id, run_id) VALUES `, 7, len(chunk)), args...); err != nil {
			return fmt.Errorf("writing %d params of run %s: %w", len(chunk), rs.id, err)
		}
	}
	return nil
}

func (a *applier) writeTags(ctx context.Context, rid int64, set map[string]string, del []string) error {
	if err := validateTags(set, del, MaxTagValueLen); err != nil {
		return err
	}
	return writeRunTags(ctx, a.s, a.tx, rid, set, del)
}

// writeRunTags sets and deletes tags of a run, up to 400 in a statement.
func writeRunTags(ctx context.Context, s *sqlStore, tx *sql.Tx, rid int64, set map[string]string, del []string) error {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for chunk := range slices.Chunk(keys, paramsPerStatement) {
		args := make([]any, 0, 3*len(chunk))
		for _, k := range chunk {
			args = append(args, rid, k, set[k])
		}
		if _, err := s.exec(ctx, tx, valuesSQL(`INSERT INTO run_tags (run_rid, key, value) VALUES `, 3, len(chunk))+
			` ON CONFLICT (run_rid, key) DO UPDATE SET value = excluded.value`, args...); err != nil {
			return fmt.Errorf("setting %d tags: %w", len(chunk), err)
		}
	}
	for chunk := range slices.Chunk(del, paramsPerStatement) {
		args := make([]any, 0, 1+len(chunk))
		args = append(args, rid)
		for _, k := range chunk {
			args = append(args, k)
		}
		if _, err := s.exec(ctx, tx, `DELETE FROM run_tags WHERE run_rid = ? AND key IN (`+placeholders(len(chunk))+`)`, args...); err != nil {
			return fmt.Errorf("deleting %d tags: %w", len(chunk), err)
		}
	}
	return nil
}
