package blob

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3 is a Store in an S3-compatible bucket (AWS S3, MinIO, Ceph, moto...),
// through minio-go. Keys are stored under the URI's prefix.
type S3 struct {
	c      *minio.Client
	bucket string
	prefix string // "" or "a/b"
	name   string // s3://bucket/prefix, for messages
}

// NewS3 opens bucket (objects under prefix) with cfg. The bucket must
// exist; it is checked here, so a wrong endpoint, bucket or key fails the
// start with the reason instead of the first upload.
func NewS3(bucket, prefix string, cfg S3Config) (*S3, error) {
	endpoint, secure := cfg.Endpoint, true
	if endpoint == "" {
		endpoint = "s3.amazonaws.com"
	}
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("S3 endpoint %q: use host:port or http(s)://host:port", cfg.Endpoint)
		}
		endpoint, secure = u.Host, u.Scheme == "https"
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	var creds *credentials.Credentials
	if cfg.AccessKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	} else {
		// The instance's or pod's role (IAM), as AWS's own clients do.
		creds = credentials.NewIAM("")
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	c, err := minio.New(endpoint, &minio.Options{Creds: creds, Secure: secure, Region: region, BucketLookup: lookup})
	if err != nil {
		return nil, fmt.Errorf("S3 client for %s: %w", endpoint, err)
	}
	s := &S3{c: c, bucket: bucket, prefix: prefix, name: "s3://" + bucket}
	if prefix != "" {
		s.name += "/" + prefix
	}
	return s, nil
}

// Check verifies that the bucket exists and can be reached.
func (s *S3) Check(ctx context.Context) error {
	ok, err := s.c.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("reaching %s: %w", s.name, err)
	}
	if !ok {
		return fmt.Errorf("bucket %s does not exist: create it first", s.bucket)
	}
	return nil
}

func (s *S3) String() string { return s.name }

func (s *S3) object(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	if s.prefix == "" {
		return key, nil
	}
	return s.prefix + "/" + key, nil
}

// Local implements Store: a bucket has no local path.
func (s *S3) Local(string) (string, bool) { return "", false }

// Put implements Store.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if size < 0 || size > MaxObjectBytes {
		return fmt.Errorf("blob: %d bytes is outside 0..%d", size, int64(MaxObjectBytes))
	}
	obj, err := s.object(key)
	if err != nil {
		return err
	}
	if _, err := s.c.PutObject(ctx, s.bucket, obj, io.LimitReader(r, size), size, minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		return fmt.Errorf("uploading %s to %s: %w", key, s.name, err)
	}
	return nil
}

// PutFile implements Store: the file is uploaded (and left in place).
func (s *S3) PutFile(ctx context.Context, key, path string) error {
	return putFromFile(ctx, s, key, path)
}

// putFromFile stores the file at path under key through st.Put.
func putFromFile(ctx context.Context, st Store, key, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	return st.Put(ctx, key, f, info.Size())
}

func notFound(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == "NoSuchKey" || code == "NotFound"
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	obj, err := s.object(key)
	if err != nil {
		return nil, Info{}, err
	}
	o, err := s.c.GetObject(ctx, s.bucket, obj, minio.GetObjectOptions{})
	if err != nil {
		return nil, Info{}, fmt.Errorf("reading %s from %s: %w", key, s.name, err)
	}
	st, err := o.Stat()
	if err != nil {
		o.Close()
		if notFound(err) {
			return nil, Info{}, ErrNotFound
		}
		return nil, Info{}, fmt.Errorf("reading %s from %s: %w", key, s.name, err)
	}
	return o, Info{Size: st.Size, Tag: st.ETag}, nil
}

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	obj, err := s.object(key)
	if err != nil {
		return Info{}, err
	}
	st, err := s.c.StatObject(ctx, s.bucket, obj, minio.StatObjectOptions{})
	if err != nil {
		if notFound(err) {
			return Info{}, ErrNotFound
		}
		return Info{}, fmt.Errorf("reading %s from %s: %w", key, s.name, err)
	}
	return Info{Size: st.Size, Tag: st.ETag}, nil
}

// DeletePrefix implements Store.
func (s *S3) DeletePrefix(ctx context.Context, prefix string) error {
	obj, err := s.object(prefix)
	if err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, obj, minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
		return fmt.Errorf("deleting %s from %s: %w", prefix, s.name, err)
	}
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: obj + "/", Recursive: true}) {
		if o.Err != nil {
			return fmt.Errorf("listing %s in %s: %w", prefix, s.name, o.Err)
		}
		if err := s.c.RemoveObject(ctx, s.bucket, o.Key, minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
			return fmt.Errorf("deleting %s from %s: %w", o.Key, s.name, err)
		}
	}
	return nil
}
