package blob

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/minio/minio-go/v7"
)

// Entry is one object a List returns.
type Entry struct {
	// Key is relative to the prefix listed.
	Key  string
	Size int64
}

// Lister is a Store that lists the objects under a prefix: files the store
// did not write itself (an MLflow client writing a run's files straight
// into the directory or bucket) are found this way.
type Lister interface {
	// List returns the objects whose key starts with prefix + "/", keys
	// relative to it; ErrTooMany when there are more than max.
	List(ctx context.Context, prefix string, max int) ([]Entry, error)
}

// ErrTooMany is List's answer past its bound.
var ErrTooMany = errors.New("blob: too many objects to list")

// List implements Lister: the regular files under the prefix's directory
// (symbolic links are not followed, so nothing outside the root is
// listed); a missing directory lists nothing.
func (d *Dir) List(ctx context.Context, prefix string, max int) ([]Entry, error) {
	dir, err := d.path(prefix)
	if err != nil {
		return nil, err
	}
	var out []Entry
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if !e.Type().IsRegular() {
			return nil
		}
		if len(out) >= max {
			return ErrTooMany
		}
		st, err := e.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out = append(out, Entry{Key: filepath.ToSlash(rel), Size: st.Size()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// List implements Lister.
func (s *S3) List(ctx context.Context, prefix string, max int) ([]Entry, error) {
	obj, err := s.object(prefix)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio-go's listing goroutine when we return early
	var out []Entry
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: obj + "/", Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("listing %s in %s: %w", prefix, s.name, o.Err)
		}
		rel := strings.TrimPrefix(o.Key, obj+"/")
		if rel == "" || strings.HasSuffix(rel, "/") {
			continue // a "directory" marker
		}
		if len(out) >= max {
			return nil, ErrTooMany
		}
		out = append(out, Entry{Key: rel, Size: o.Size})
	}
	return out, nil
}
