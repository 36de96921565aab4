package blob

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/minio/minio-go/v7"
)

// Entry is one object a List returns.
type Entry struct {
	// Key is relative to the prefix listed.
	Key  string
	Size int64
	// Dir marks a directory (ListDir): a key with objects under it.
	Dir bool
}

// Lister is a Store that lists the objects under a prefix: files the store
// did not write itself (an MLflow client writing a run's files straight
// into the directory or bucket) are found this way.
type Lister interface {
	// List returns the objects whose key starts with prefix + "/", keys
	// relative to it; ErrTooMany when there are more than max.
	List(ctx context.Context, prefix string, max int) ([]Entry, error)
	// ListDir returns what lies directly under prefix ("" for the
	// store's root): each object with its size, and each directory once
	// (Dir), sorted by key; ErrTooMany when there are more than max.
	ListDir(ctx context.Context, prefix string, max int) ([]Entry, error)
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

// ListDir implements Lister: the regular files and directories in the
// prefix's directory (symbolic links and other entries are left out, so
// nothing outside the root is listed); a missing directory lists nothing.
func (d *Dir) ListDir(ctx context.Context, prefix string, max int) ([]Entry, error) {
	dir := d.root
	if prefix != "" {
		var err error
		if dir, err = d.path(prefix); err != nil {
			return nil, err
		}
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil // nothing there, or a file: no entries under it
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var en Entry
		switch {
		case e.IsDir():
			en = Entry{Key: e.Name(), Dir: true}
		case e.Type().IsRegular():
			st, err := e.Info()
			if err != nil {
				continue // removed meanwhile
			}
			en = Entry{Key: e.Name(), Size: st.Size()}
		default:
			continue
		}
		if len(out) >= max {
			return nil, ErrTooMany
		}
		out = append(out, en)
	}
	return out, nil // os.ReadDir sorts by name
}

// ListDir implements Lister: a listing by delimiter (the objects directly
// under the prefix, and its "subdirectories" once each).
func (s *S3) ListDir(ctx context.Context, prefix string, max int) ([]Entry, error) {
	obj := s.prefix
	if prefix != "" {
		var err error
		if obj, err = s.object(prefix); err != nil {
			return nil, err
		}
	}
	if obj != "" {
		obj += "/"
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []Entry
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: obj}) {
		if o.Err != nil {
			return nil, fmt.Errorf("listing %s in %s: %w", prefix, s.name, o.Err)
		}
		rel := strings.TrimPrefix(o.Key, obj)
		if rel == "" {
			continue // the prefix's own marker
		}
		en := Entry{Key: rel, Size: o.Size}
		if name, ok := strings.CutSuffix(rel, "/"); ok {
			en = Entry{Key: name, Dir: true}
		}
		if len(out) >= max {
			return nil, ErrTooMany
		}
		out = append(out, en)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
