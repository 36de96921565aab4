package blob

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
)

// Sub returns the part of s under prefix: key k of the result is
// prefix/k in s. The dashboard keeps its kinds of files apart in one
// bucket this way (models/..., artifacts/<run id>/...). prefix must be a
// clean relative path; every key is checked before it is joined to it.
func Sub(s Store, prefix string) (Store, error) {
	if err := checkKey(prefix); err != nil {
		return nil, err
	}
	return &sub{s: s, prefix: prefix}, nil
}

type sub struct {
	s      Store
	prefix string
}

func (b *sub) key(k string) (string, error) {
	if err := checkKey(k); err != nil {
		return "", err
	}
	return b.prefix + "/" + k, nil
}

func (b *sub) String() string { return strings.TrimSuffix(b.s.String(), "/") + "/" + b.prefix }

func (b *sub) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	k, err := b.key(key)
	if err != nil {
		return err
	}
	return b.s.Put(ctx, k, r, size)
}

func (b *sub) PutFile(ctx context.Context, key, path string) error {
	k, err := b.key(key)
	if err != nil {
		return err
	}
	return b.s.PutFile(ctx, k, path)
}

func (b *sub) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	k, err := b.key(key)
	if err != nil {
		return nil, Info{}, err
	}
	return b.s.Get(ctx, k)
}

func (b *sub) Stat(ctx context.Context, key string) (Info, error) {
	k, err := b.key(key)
	if err != nil {
		return Info{}, err
	}
	return b.s.Stat(ctx, k)
}

func (b *sub) DeletePrefix(ctx context.Context, prefix string) error {
	k, err := b.key(prefix)
	if err != nil {
		return err
	}
	return b.s.DeletePrefix(ctx, k)
}

func (b *sub) Local(key string) (string, bool) {
	k, err := b.key(key)
	if err != nil {
		return "", false
	}
	return b.s.Local(k)
}

// Layered returns a store that writes to first and reads from first, then
// from each of more in turn (the first that has the key answers). The
// dashboard reads run artifacts this way with a bucket: what was uploaded
// through its API is in the bucket; what a training process on this host
// wrote into FW_ARTIFACT_DIR is found in that directory.
func Layered(first Store, more ...Store) Store {
	return layered(append([]Store{first}, more...))
}

type layered []Store

func (l layered) String() string {
	names := make([]string, len(l))
	for i, s := range l {
		names[i] = s.String()
	}
	return strings.Join(names, ", then ")
}

// Put writes to the first layer.
func (l layered) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return l[0].Put(ctx, key, r, size)
}

// PutFile writes to the first layer.
func (l layered) PutFile(ctx context.Context, key, path string) error {
	return l[0].PutFile(ctx, key, path)
}

// Get answers from the first layer that has key; an error other than
// ErrNotFound is returned at once (a bucket that cannot be reached is not
// a missing object).
func (l layered) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	for _, s := range l {
		r, info, err := s.Get(ctx, key)
		if !errors.Is(err, ErrNotFound) {
			return r, info, err
		}
	}
	return nil, Info{}, ErrNotFound
}

// Stat answers like Get.
func (l layered) Stat(ctx context.Context, key string) (Info, error) {
	for _, s := range l {
		info, err := s.Stat(ctx, key)
		if !errors.Is(err, ErrNotFound) {
			return info, err
		}
	}
	return Info{}, ErrNotFound
}

// DeletePrefix deletes from every layer.
func (l layered) DeletePrefix(ctx context.Context, prefix string) error {
	var errs []error
	for _, s := range l {
		errs = append(errs, s.DeletePrefix(ctx, prefix))
	}
	return errors.Join(errs...)
}

// Local returns the path of key in the first directory layer that holds it
// as a regular file.
func (l layered) Local(key string) (string, bool) {
	for _, s := range l {
		if p, ok := s.Local(key); ok {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p, true
			}
		}
	}
	return "", false
}
