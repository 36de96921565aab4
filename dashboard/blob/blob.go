// Package blob keeps the files that every dashboard replica must see (the
// model registry's version files; with a bucket, the runs' checkpoints and
// artifacts too, under Sub prefixes) on shared storage: a directory (a
// local or shared file system: the default, FW_EXPERIMENT_DIR) or an
// S3-compatible bucket (FW_ARTIFACT_URI=s3://bucket/prefix). Keys are
// relative, '/'-separated and clean (store.ValidateRelPath): nothing a user
// sends reaches a path or an object name unchecked. What must be a local
// file (the model a `fw serve` child loads) is fetched into a cache
// directory of this machine (Fetch).
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/fw-serve/fw/dashboard/store"
)

// MaxObjectBytes bounds one object (a model file): what Put accepts and
// what Fetch downloads.
const MaxObjectBytes = 8 << 30

// ErrNotFound is returned for a key that does not exist.
var ErrNotFound = errors.New("blob: no such object")

// ErrInvalidKey is returned (wrapped, with the reason) for a key that is
// not a clean relative path, that resolves out of a directory store
// through a symbolic link, or whose place in a directory store is taken by
// a directory: the request's fault, not the storage's.
var ErrInvalidKey = errors.New("blob: invalid key")

// Info describes a stored object.
type Info struct {
	Size int64
	// Tag changes whenever the object's content does (S3's ETag; a
	// directory's size and modification time).
	Tag string
}

// Store is where shared files live.
type Store interface {
	// Put stores size bytes from r under key (replacing an object there).
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// PutFile stores the local file at path under key; a directory store
	// may move it there instead of copying (the file is then gone).
	PutFile(ctx context.Context, key, path string) error
	// Get opens the object under key (ErrNotFound when missing).
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// Stat describes the object under key (ErrNotFound when missing).
	Stat(ctx context.Context, key string) (Info, error)
	// DeletePrefix deletes every object whose key is prefix or starts
	// with prefix + "/".
	DeletePrefix(ctx context.Context, prefix string) error
	// Local returns the local path of key when the store is a directory
	// (nothing to download), else "", false.
	Local(key string) (string, bool)
	// String names the store for messages (no credentials).
	String() string
}

// S3Config configures an S3-compatible store (read by cmd/fw from the
// environment).
type S3Config struct {
	// Endpoint is host:port or a URL of the S3 API (FW_S3_ENDPOINT, else
	// AWS_ENDPOINT_URL; default s3.amazonaws.com). An http:// URL turns
	// TLS off (a local test server).
	Endpoint  string
	Region    string // AWS_REGION (default us-east-1)
	AccessKey string // AWS_ACCESS_KEY_ID
	SecretKey string // AWS_SECRET_ACCESS_KEY
	// PathStyle addresses buckets as endpoint/bucket (MinIO, moto, most
	// self-hosted servers) instead of bucket.endpoint.
	PathStyle bool
}

// Open opens the store uri names: "" is the directory dir; file:///path a
// directory; s3://bucket[/prefix] an S3-compatible bucket.
func Open(uri, dir string, s3 S3Config) (Store, error) {
	if uri == "" {
		return NewDir(dir)
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("FW_ARTIFACT_URI %q: %w", uri, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("FW_ARTIFACT_URI %q: a file URI names a local directory: file:///path", uri)
		}
		return NewDir(u.Path)
	case "s3":
		prefix := strings.Trim(u.Path, "/")
		if u.Host == "" {
			return nil, fmt.Errorf("FW_ARTIFACT_URI %q: name the bucket: s3://bucket/prefix", uri)
		}
		if prefix != "" {
			if err := store.ValidateRelPath(prefix); err != nil {
				return nil, fmt.Errorf("FW_ARTIFACT_URI %q: the prefix: %w", uri, err)
			}
		}
		return NewS3(u.Host, prefix, s3)
	}
	return nil, fmt.Errorf("FW_ARTIFACT_URI %q: use s3://bucket/prefix or file:///path", uri)
}

// checkKey refuses a key that is not a clean relative path.
func checkKey(key string) error {
	if err := store.ValidateRelPath(key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return nil
}

// Fetch makes the object under key available as a local file and returns
// its path (ErrNotFound when there is none): the file itself for a
// directory store; for a bucket, a copy in
// cacheDir (downloaded once per content: named after the key and the
// object's tag, written to a temporary file and renamed, so concurrent
// fetches and crashes never leave a partial file under that name).
func Fetch(ctx context.Context, s Store, key, cacheDir string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	if p, ok := s.Local(key); ok {
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			return "", fmt.Errorf("fetching %s from %s: %w", key, s, ErrNotFound)
		}
		return p, nil
	}
	info, err := s.Stat(ctx, key)
	if err != nil {
		return "", fmt.Errorf("fetching %s from %s: %w", key, s, err)
	}
	if info.Size > MaxObjectBytes {
		return "", fmt.Errorf("fetching %s from %s: %d bytes is more than the %d this dashboard fetches", key, s, info.Size, int64(MaxObjectBytes))
	}
	// <key hash>-<content hash>-<base name>: one copy per content; older
	// copies of the key are removed once the new one is in place.
	ks, ts := sha256.Sum256([]byte(key)), sha256.Sum256([]byte(info.Tag))
	keyPart := hex.EncodeToString(ks[:12]) + "-"
	dst := filepath.Join(cacheDir, keyPart+hex.EncodeToString(ts[:6])+"-"+filepath.Base(key))
	if st, err := os.Stat(dst); err == nil && st.Size() == info.Size {
		return dst, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	r, got, err := s.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("fetching %s from %s: %w", key, s, err)
	}
	defer r.Close()
	tmp, err := os.CreateTemp(cacheDir, ".fetch-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, io.LimitReader(r, MaxObjectBytes+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("fetching %s from %s: %w", key, s, err)
	}
	if n != got.Size || n > MaxObjectBytes {
		return "", fmt.Errorf("fetching %s from %s: got %d bytes, the object has %d", key, s, n, got.Size)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	if old, _ := filepath.Glob(filepath.Join(cacheDir, keyPart+"*")); len(old) > 1 {
		for _, o := range old {
			if o != dst {
				_ = os.Remove(o) // a deployment still running from it keeps its open file
			}
		}
	}
	return dst, nil
}
