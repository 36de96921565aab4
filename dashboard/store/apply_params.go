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

// writeParams enforces write-once then inserts the new params.
func (a *applier) writeParams(ctx context.Context, rs *runState, in map[string]any) error {
	params, perr := prepareParams(in)
	if perr != nil {
		return perr
	}
	var fresh []paramValue
	for _, p := range params {
		var old string
		err := a.s.queryRow(ctx, a.tx, `SELECT value_json FROM params WHERE run_rid = ? AND key = ?`, rs.rid, p.key).Scan(&old)
		switch {
		case isNoRows(err):
			fresh = append(fresh, p)
		case err != nil:
			return fmt.Errorf("reading param %q of run %s: %w", p.key, rs.id, err)
		case old != p.json:
			return evErr(CodeParamConflict, "param %q is already %s; params are write-once (got %s)", p.key, old, p.json)
		}
	}
	for _, p := range fresh {
		if _, err := a.s.exec(ctx, a.tx, `INSERT INTO params (run_rid, key, value_json, value_num, value_str, experiment_id, run_id) VALUES (?, ?, ?, ?, ?, ?, ?)`, rs.rid, p.key, p.json, p.num, p.str, rs.experimentID, rs.id); err != nil {
			return fmt.Errorf("writing param %q of run %s: %w", p.key, rs.id, err)
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

func writeRunTags(ctx context.Context, s *sqlStore, tx *sql.Tx, rid int64, set map[string]string, del []string) error {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if _, err := s.exec(ctx, tx, `INSERT INTO run_tags (run_rid, key, value) VALUES (?, ?, ?) ON CONFLICT (run_rid, key) DO UPDATE SET value = excluded.value`, rid, k, set[k]); err != nil {
			return fmt.Errorf("setting tag %q: %w", k, err)
		}
	}
	for _, k := range del {
		if _, err := s.exec(ctx, tx, `DELETE FROM run_tags WHERE run_rid = ? AND key = ?`, rid, k); err != nil {
			return fmt.Errorf("deleting tag %q: %w", k, err)
		}
	}
	return nil
}
