package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/fw-serve/fw/dashboard/store"
)

// Dir is a Store in a directory: a local disk for one dashboard, a shared
// file system (NFS, a shared volume) for replicas. Keys are resolved with
// store.SafeJoin: no escape from the directory, not even through a
// symbolic link.
type Dir struct {
	root string
}

// NewDir opens the directory store at root (created when missing).
func NewDir(root string) (*Dir, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", abs, err)
	}
	return &Dir{root: abs}, nil
}

func (d *Dir) String() string { return d.root }

func (d *Dir) path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	p, err := store.SafeJoin(d.root, key)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return p, nil
}

// mkdirs creates the directories above p (key's path) and resolves key
// again, so that a symbolic link made in between is refused.
func (d *Dir) mkdirs(key, p string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return "", fmt.Errorf("%w: a file is in the way of %s", ErrInvalidKey, key)
		}
		return "", err
	}
	p, err := d.path(key)
	if err != nil {
		return "", err
	}
	if st, err := os.Lstat(p); err == nil && !st.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is taken by a directory or a link", ErrInvalidKey, key)
	}
	return p, nil
}

// Local implements Store.
func (d *Dir) Local(key string) (string, bool) {
	p, err := d.path(key)
	return p, err == nil
}

// Put implements Store: written to a temporary file beside the target and
// renamed, so a reader never sees a partial file.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if size < 0 || size > MaxObjectBytes {
		return fmt.Errorf("blob: %d bytes is outside 0..%d", size, int64(MaxObjectBytes))
	}
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if p, err = d.mkdirs(key, p); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, io.LimitReader(r, size+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", key, err)
	}
	if n != size {
		return fmt.Errorf("writing %s: got %d bytes, want %d", key, n, size)
	}
	return os.Rename(tmp.Name(), p)
}

// PutFile implements Store: the file is moved into the directory (copied
// when it is on another file system).
func (d *Dir) PutFile(ctx context.Context, key, src string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if p, err = d.mkdirs(key, p); err != nil {
		return err
	}
	if err := os.Rename(src, p); err == nil {
		return nil
	}
	return putFromFile(ctx, d, key, src) // another file system: copy
}

// Get implements Store.
func (d *Dir) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, Info{}, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, Info{}, ErrNotFound
	}
	if err != nil {
		return nil, Info{}, err
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, Info{}, ErrNotFound
	}
	return f, info(st), nil
}

// Stat implements Store.
func (d *Dir) Stat(ctx context.Context, key string) (Info, error) {
	p, err := d.path(key)
	if err != nil {
		return Info{}, err
	}
	st, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) || (err == nil && !st.Mode().IsRegular()) {
		return Info{}, ErrNotFound
	}
	if err != nil {
		return Info{}, err
	}
	return info(st), nil
}

func info(st os.FileInfo) Info {
	return Info{Size: st.Size(), Tag: strconv.FormatInt(st.Size(), 10) + "-" + strconv.FormatInt(st.ModTime().UnixNano(), 36)}
}

// DeletePrefix implements Store.
func (d *Dir) DeletePrefix(ctx context.Context, prefix string) error {
	p, err := d.path(prefix)
	if err != nil {
		return err
	}
	return os.RemoveAll(p)
}
