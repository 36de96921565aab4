package blob

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDirKey: whatever key is given, a directory store either refuses it or
// resolves it inside its root, and a stored object reads back there.
func FuzzDirKey(f *testing.F) {
	for _, s := range []string{"models/m/1/model.onnx", "../x", "a/../../b", "/etc/passwd", "a//b", ".", "..", "a\\b", "ü/ß", "x/./y", "link/out"} {
		f.Add(s)
	}
	root := f.TempDir()
	d, err := NewDir(root)
	if err != nil {
		f.Fatal(err)
	}
	outside := f.TempDir()
	// A symbolic link out of the root: keys through it must be refused.
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if len(key) > 2048 {
			return
		}
		p, ok := d.Local(key)
		if !ok {
			return
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
			t.Fatalf("key %q resolves outside the root: %s", key, p)
		}
		if err := d.Put(context.Background(), key, strings.NewReader("x"), 1); err != nil {
			return // a directory in the way, or a name the file system refuses
		}
		if entries, _ := os.ReadDir(outside); len(entries) > 0 {
			t.Fatalf("key %q wrote outside the root", key)
		}
		_ = d.DeletePrefix(context.Background(), key)
	})
}

// FuzzSubKey: whatever key is given, a Sub store either refuses it or
// resolves it under its prefix (never to a sibling such as models/).
func FuzzSubKey(f *testing.F) {
	for _, s := range []string{"r1/plots/loss.png", "../models/m", "..", "a/../../b", "/x", "", "r1//x", "r1/./x"} {
		f.Add(s)
	}
	root := f.TempDir()
	d, err := NewDir(root)
	if err != nil {
		f.Fatal(err)
	}
	s, err := Sub(d, "artifacts")
	if err != nil {
		f.Fatal(err)
	}
	under := filepath.Join(root, "artifacts") + string(filepath.Separator)
	f.Fuzz(func(t *testing.T, key string) {
		if len(key) > 2048 {
			return
		}
		if p, ok := s.Local(key); ok && !strings.HasPrefix(p, under) {
			t.Fatalf("key %q resolves outside the prefix: %s", key, p)
		}
	})
}
