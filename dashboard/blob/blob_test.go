package blob

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/testleak"
	"github.com/fw-serve/fw/internal/testmoto"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) { testleak.Main(m) }

// stores returns a directory store and, when moto's server is available
// (make test-s3), a bucket on it, under a prefix.
func stores(t *testing.T) map[string]Store {
	t.Helper()
	dir, err := NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Store{"dir": dir}
	if os.Getenv("FW_MOTO_SERVER") != "" || os.Getenv("FW_REQUIRE_S3") == "1" {
		m := testmoto.Start(t)
		s, err := Open("s3://"+m.Bucket+"/team/a", "", S3Config{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, PathStyle: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.(*S3).Check(context.Background()); err != nil {
			t.Fatal(err)
		}
		out["s3"] = s
	}
	return out
}

func read(t *testing.T, s Store, key string) string {
	t.Helper()
	r, info, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil || int64(len(b)) != info.Size {
		t.Fatalf("get %s: %d bytes, info %+v, %v", key, len(b), info, err)
	}
	return string(b)
}

func TestStores(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			put := func(key, body string) {
				t.Helper()
				if err := s.Put(ctx, key, strings.NewReader(body), int64(len(body))); err != nil {
					t.Fatalf("put %s: %v", key, err)
				}
			}
			put("models/mlp/1/model.onnx", "one")
			put("models/mlp/2/model.onnx", "two")
			put("models/mlpx/1/model.onnx", "other")
			if got := read(t, s, "models/mlp/2/model.onnx"); got != "two" {
				t.Fatalf("read back %q", got)
			}
			if info, err := s.Stat(ctx, "models/mlp/1/model.onnx"); err != nil || info.Size != 3 || info.Tag == "" {
				t.Fatalf("stat: %+v %v", info, err)
			}
			if _, err := s.Stat(ctx, "models/none"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("stat of a missing key: %v", err)
			}
			if _, _, err := s.Get(ctx, "models/none"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get of a missing key: %v", err)
			}
			// Replacing changes the tag.
			before, _ := s.Stat(ctx, "models/mlp/1/model.onnx")
			put("models/mlp/1/model.onnx", "uno!")
			if after, _ := s.Stat(ctx, "models/mlp/1/model.onnx"); after.Tag == before.Tag || after.Size != 4 {
				t.Fatalf("tag after a replace: %+v, before %+v", after, before)
			}
			// Keys a user could have sent are checked: no traversal, no
			// absolute path, nothing unclean.
			for _, bad := range []string{"../x", "a/../../x", "/etc/passwd", "a//b", "a/./b", "", "a\\b", "a\x00b", strings.Repeat("x", 1025)} {
				if err := s.Put(ctx, bad, strings.NewReader("x"), 1); err == nil {
					t.Errorf("put %q accepted", bad)
				}
				if _, _, err := s.Get(ctx, bad); err == nil || errors.Is(err, ErrNotFound) {
					t.Errorf("get %q: %v", bad, err)
				}
				if err := s.DeletePrefix(ctx, bad); err == nil {
					t.Errorf("delete %q accepted", bad)
				}
			}
			// Sizes are checked: a short body, and beyond the bound.
			if err := s.Put(ctx, "short", strings.NewReader("ab"), 3); err == nil {
				t.Error("a body shorter than its size was stored")
			}
			if err := s.Put(ctx, "huge", strings.NewReader(""), MaxObjectBytes+1); err == nil {
				t.Error("a size beyond MaxObjectBytes was accepted")
			}
			// PutFile.
			src := filepath.Join(t.TempDir(), "f")
			if err := os.WriteFile(src, []byte("file"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := s.PutFile(ctx, "models/cnn/1/model.pt", src); err != nil {
				t.Fatal(err)
			}
			if got := read(t, s, "models/cnn/1/model.pt"); got != "file" {
				t.Fatalf("PutFile: %q", got)
			}
			// DeletePrefix removes the key and what is under it, not a
			// sibling that merely starts with the same letters.
			if err := s.DeletePrefix(ctx, "models/mlp"); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"models/mlp/1/model.onnx", "models/mlp/2/model.onnx"} {
				if _, err := s.Stat(ctx, k); !errors.Is(err, ErrNotFound) {
					t.Fatalf("%s after deleting its prefix: %v", k, err)
				}
			}
			if got := read(t, s, "models/mlpx/1/model.onnx"); got != "other" {
				t.Fatalf("a sibling of the deleted prefix: %q", got)
			}
		})
	}
}

// TestFetch: a directory store hands out its own file; a bucket's object
// is downloaded into the cache once per content.
func TestFetch(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			cache := t.TempDir()
			body := bytes.Repeat([]byte("model"), 1000)
			if err := s.Put(ctx, "models/m/1/model.onnx", bytes.NewReader(body), int64(len(body))); err != nil {
				t.Fatal(err)
			}
			p, err := Fetch(ctx, s, "models/m/1/model.onnx", cache)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, body) {
				t.Fatalf("fetched file: %v", err)
			}
			if local, ok := s.Local("models/m/1/model.onnx"); ok != (name == "dir") || (ok && local != p) {
				t.Fatalf("Local: %q %v, fetched %q", local, ok, p)
			}
			if _, err := Fetch(ctx, s, "models/none", cache); !errors.Is(err, ErrNotFound) {
				t.Fatalf("fetch of a missing key: %v", err)
			}
			if name == "dir" {
				return
			}
			if !strings.HasPrefix(p, cache) {
				t.Fatalf("fetched outside the cache: %s", p)
			}
			st1, _ := os.Stat(p)
			p2, err := Fetch(ctx, s, "models/m/1/model.onnx", cache)
			if st2, _ := os.Stat(p2); err != nil || p2 != p || !st2.ModTime().Equal(st1.ModTime()) {
				t.Fatalf("fetched again: %s %v", p2, err)
			}
			// New content: a new file; the stale copy is removed.
			if err := s.Put(ctx, "models/m/1/model.onnx", strings.NewReader("v2"), 2); err != nil {
				t.Fatal(err)
			}
			p3, err := Fetch(ctx, s, "models/m/1/model.onnx", cache)
			if b, _ := os.ReadFile(p3); err != nil || p3 == p || string(b) != "v2" {
				t.Fatalf("after a replace: %s %q %v", p3, b, err)
			}
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Fatalf("the stale copy stayed: %v", err)
			}
			if _, err := Fetch(ctx, s, "../x", cache); err == nil {
				t.Fatal("fetch of a bad key")
			}
			if _, err := Fetch(ctx, s, "models/none", cache); !errors.Is(err, ErrNotFound) {
				t.Fatalf("fetch of a missing key: %v", err)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	f := func(uri string, ok bool) {
		t.Helper()
		_, err := Open(uri, dir, S3Config{Endpoint: "http://127.0.0.1:1"})
		if (err == nil) != ok {
			t.Errorf("Open(%q): %v, want ok=%v", uri, err, ok)
		}
	}
	f("", true)
	f("file://"+dir, true)
	f("s3://bucket/prefix/x", true)
	f("s3://bucket", true)
	f("s3:///prefix", false)
	f("s3://bucket/../x", false)
	f("file://remote/x", false)
	f("gs://bucket", false)
	f("::", false)
}

// TestSubAndLayered: Sub keeps its keys under its prefix of the store
// (checked, no escape from the prefix); Layered writes to its first layer,
// reads from the first layer that has a key and deletes from all.
func TestSubAndLayered(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			arts, err := Sub(s, "artifacts")
			if err != nil {
				t.Fatal(err)
			}
			if err := arts.Put(ctx, "r1/plots/loss.png", strings.NewReader("png"), 3); err != nil {
				t.Fatal(err)
			}
			if got := read(t, s, "artifacts/r1/plots/loss.png"); got != "png" {
				t.Fatalf("under the prefix: %q", got)
			}
			if got := read(t, arts, "r1/plots/loss.png"); got != "png" {
				t.Fatalf("through Sub: %q", got)
			}
			for _, bad := range []string{"../models/x", "..", "", "/r1/x", "r1/../../x"} {
				if err := arts.Put(ctx, bad, strings.NewReader("x"), 1); err == nil {
					t.Errorf("Sub put %q accepted", bad)
				}
				if _, err := arts.Stat(ctx, bad); err == nil || errors.Is(err, ErrNotFound) {
					t.Errorf("Sub stat %q: %v", bad, err)
				}
			}
			for _, bad := range []string{"", "..", "a/../b", "/x"} {
				if _, err := Sub(s, bad); err == nil {
					t.Errorf("Sub(%q) accepted", bad)
				}
			}
			if p, ok := arts.Local("r1/plots/loss.png"); ok != (name == "dir") || (ok && !strings.HasSuffix(p, filepath.FromSlash("artifacts/r1/plots/loss.png"))) {
				t.Fatalf("Sub Local: %q %v", p, ok)
			}

			// A layered store: the bucket (or a directory) first, then
			// this host's directory.
			local, err := NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := local.Put(ctx, "r1/sdk.txt", strings.NewReader("sdk"), 3); err != nil {
				t.Fatal(err)
			}
			if err := local.Put(ctx, "r1/plots/loss.png", strings.NewReader("old"), 3); err != nil {
				t.Fatal(err)
			}
			l := Layered(arts, local)
			if got := read(t, l, "r1/plots/loss.png"); got != "png" {
				t.Fatalf("the first layer answers first: %q", got)
			}
			if got := read(t, l, "r1/sdk.txt"); got != "sdk" {
				t.Fatalf("the second layer answers what the first lacks: %q", got)
			}
			if info, err := l.Stat(ctx, "r1/sdk.txt"); err != nil || info.Size != 3 {
				t.Fatalf("stat through the layers: %+v %v", info, err)
			}
			if _, err := l.Stat(ctx, "r1/none"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a key in no layer: %v", err)
			}
			if p, ok := l.Local("r1/sdk.txt"); !ok || !strings.HasPrefix(p, local.String()) {
				t.Fatalf("Local of a file only the directory layer has: %q %v", p, ok)
			}
			if err := l.Put(ctx, "r1/new.txt", strings.NewReader("new"), 3); err != nil {
				t.Fatal(err)
			}
			if got := read(t, arts, "r1/new.txt"); got != "new" {
				t.Fatalf("a write goes to the first layer: %q", got)
			}
			if _, err := local.Stat(ctx, "r1/new.txt"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a write reached the second layer: %v", err)
			}
			if err := l.DeletePrefix(ctx, "r1"); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"r1/plots/loss.png", "r1/sdk.txt", "r1/new.txt"} {
				if _, err := l.Stat(ctx, k); !errors.Is(err, ErrNotFound) {
					t.Fatalf("%s after DeletePrefix: %v", k, err)
				}
			}
		})
	}
}

// TestList: the objects under a prefix, keys relative to it, bounded; on a
// directory, symbolic links are not followed (nothing outside the root).
func TestList(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			for _, k := range []string{"1/r/artifacts/a.txt", "1/r/artifacts/sub/b.json", "1/rx/artifacts/c", "2/r/artifacts/d"} {
				if err := s.Put(ctx, k, strings.NewReader(k), int64(len(k))); err != nil {
					t.Fatal(err)
				}
			}
			l := s.(Lister)
			got, err := l.List(ctx, "1/r/artifacts", 10)
			if err != nil {
				t.Fatal(err)
			}
			sort.Slice(got, func(i, j int) bool { return got[i].Key < got[j].Key })
			want := []Entry{{Key: "a.txt", Size: int64(len("1/r/artifacts/a.txt"))}, {Key: "sub/b.json", Size: int64(len("1/r/artifacts/sub/b.json"))}}
			if !slices.Equal(got, want) {
				t.Fatalf("list: %+v, want %+v", got, want)
			}
			if got, err := l.List(ctx, "9/none", 10); err != nil || len(got) != 0 {
				t.Fatalf("a missing prefix: %+v %v", got, err)
			}
			if _, err := l.List(ctx, "1", 2); !errors.Is(err, ErrTooMany) {
				t.Fatalf("past the bound: %v", err)
			}
			if _, err := l.List(ctx, "../x", 10); err == nil {
				t.Fatal("a prefix climbing out was listed")
			}
			if d, ok := s.(*Dir); ok {
				outside := t.TempDir()
				os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600)
				os.Symlink(outside, filepath.Join(d.root, "1", "r", "artifacts", "link"))
				os.Symlink(filepath.Join(outside, "secret"), filepath.Join(d.root, "1", "r", "artifacts", "file-link"))
				got, _ := l.List(ctx, "1/r/artifacts", 10)
				if len(got) != 2 {
					t.Fatalf("links followed: %+v", got)
				}
				if got, _ := l.ListDir(ctx, "1/r/artifacts", 10); len(got) != 2 {
					t.Fatalf("links listed: %+v", got)
				}
			}
			// One level: files with their size, each directory once, sorted.
			got, err = l.ListDir(ctx, "1/r/artifacts", 10)
			if want := []Entry{{Key: "a.txt", Size: int64(len("1/r/artifacts/a.txt"))}, {Key: "sub", Dir: true}}; err != nil || !slices.Equal(got, want) {
				t.Fatalf("listdir: %+v %v, want %+v", got, err, want)
			}
			if got, err := l.ListDir(ctx, "", 10); err != nil || !slices.Equal(got, []Entry{{Key: "1", Dir: true}, {Key: "2", Dir: true}}) {
				t.Fatalf("listdir of the top: %+v %v", got, err)
			}
			if got, err := l.ListDir(ctx, "1/r/artifacts/a.txt", 10); err != nil || len(got) != 0 {
				t.Fatalf("listdir of a file: %+v %v", got, err)
			}
			if got, err := l.ListDir(ctx, "9/none", 10); err != nil || len(got) != 0 {
				t.Fatalf("listdir of a missing prefix: %+v %v", got, err)
			}
			if _, err := l.ListDir(ctx, "1/r/artifacts", 1); !errors.Is(err, ErrTooMany) {
				t.Fatalf("listdir past the bound: %v", err)
			}
			if _, err := l.ListDir(ctx, "../x", 10); err == nil {
				t.Fatal("listdir of a prefix climbing out")
			}
		})
	}
}
