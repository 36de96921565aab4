package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fw-serve/fw/dashboard/store"
)

// ImportedSuffix is appended to a JSON file of an earlier fw once its
// content is in the store: the file is kept (renamed), never deleted, and
// never imported again.
const ImportedSuffix = ".imported"

// legacyFile is one JSON file in which fw kept registry state before the
// store had records, relative to the experiment dir.
type legacyFile struct {
	rel  string
	kind string
	// keys decodes the file into (key, body) pairs.
	keys func(b []byte) ([]string, []json.RawMessage, error)
}

func legacyFiles() []legacyFile {
	byField := func(list []json.RawMessage, field string) ([]string, []json.RawMessage, error) {
		keys := make([]string, 0, len(list))
		bodies := make([]json.RawMessage, 0, len(list))
		for i, raw := range list {
			var head map[string]json.RawMessage
			if err := json.Unmarshal(raw, &head); err != nil {
				return nil, nil, fmt.Errorf("element %d: %w", i, err)
			}
			var key string
			if err := json.Unmarshal(head[field], &key); err != nil || key == "" {
				return nil, nil, fmt.Errorf("element %d has no %q", i, field)
			}
			keys, bodies = append(keys, key), append(bodies, raw)
		}
		return keys, bodies, nil
	}
	list := func(field string) func([]byte) ([]string, []json.RawMessage, error) {
		return func(b []byte) ([]string, []json.RawMessage, error) {
			var l []json.RawMessage
			if err := json.Unmarshal(b, &l); err != nil {
				return nil, nil, err
			}
			return byField(l, field)
		}
	}
	return []legacyFile{
		{filepath.Join("registry", "registry.json"), kindModel, func(b []byte) ([]string, []json.RawMessage, error) {
			var doc struct {
				Models []json.RawMessage `json:"models"`
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				return nil, nil, err
			}
			return byField(doc.Models, "name")
		}},
		{filepath.Join("registry", "exports.json"), kindExport, list("id")},
		{"deployments.json", kindDeployment, list("id")},
		{"deployments-ended.json", kindEndedDeployment, list("id")},
	}
}

// importFiles moves the state an earlier fw kept in JSON files under the
// experiment dir into the store, once: each entry is created unless the
// store already has one with its key (so an import interrupted half-way,
// or run by two dashboards sharing the directory, ends the same), then the
// file is renamed with ImportedSuffix. A file that does not decode fails
// the start, naming it: it is left for the user to repair or remove.
func (s *Service) importFiles(ctx context.Context) error {
	for _, f := range legacyFiles() {
		path := filepath.Join(s.cfg.ExperimentDir, f.rel)
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("importing %s into the store: %w", path, err)
		}
		var keys []string
		var bodies []json.RawMessage
		if len(b) > 0 {
			if keys, bodies, err = f.keys(b); err != nil {
				return fmt.Errorf("importing %s into the store: it is not what fw wrote (%v); repair or remove it", path, err)
			}
		}
		created := 0
		for i, key := range keys {
			if err := store.ValidateKey(key); err != nil {
				return fmt.Errorf("importing %s into the store: key %q: %w", path, key, err)
			}
			_, err := s.st.UpdateRecord(ctx, f.kind, key, func(cur *store.Record) (json.RawMessage, error) {
				if cur != nil {
					return nil, store.ErrKeep
				}
				created++
				return bodies[i], nil
			})
			if err != nil {
				return fmt.Errorf("importing %s into the store: %w", path, err)
			}
		}
		if err := os.Rename(path, path+ImportedSuffix); err != nil {
			return fmt.Errorf("importing %s into the store: %w", path, err)
		}
		if s.log != nil {
			s.log.Info("imported into the store", "file", path, "kind", f.kind, "entries", len(keys), "new", created, "kept_as", path+ImportedSuffix)
		}
	}
	return nil
}
