package benchdoc

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestReplaceSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "b.md")
	f := func(name, body, want string) {
		t.Helper()
		if err := ReplaceSection(p, name, body); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(p)
		if string(got) != want {
			t.Fatalf("got:\n%s\nwant:\n%s", got, want)
		}
	}
	f("a", "one", "<!-- bench:a:start -->\none\n<!-- bench:a:end -->\n")
	f("b", "two\n", "<!-- bench:a:start -->\none\n<!-- bench:a:end -->\n\n<!-- bench:b:start -->\ntwo\n<!-- bench:b:end -->\n")
	f("a", "three", "<!-- bench:a:start -->\nthree\n<!-- bench:a:end -->\n\n<!-- bench:b:start -->\ntwo\n<!-- bench:b:end -->\n")
}

func TestPercentileMs(t *testing.T) {
	ds := []time.Duration{4 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}
	if got := PercentileMs(ds, 0.5); got != 2 {
		t.Fatalf("p50 %v, want 2", got)
	}
	if got := PercentileMs(ds, 0.99); got != 4 {
		t.Fatalf("p99 %v, want 4", got)
	}
	if got := PercentileMs(nil, 0.5); got != 0 {
		t.Fatalf("p50 of none %v", got)
	}
	if ds[0] != 4*time.Millisecond {
		t.Fatal("PercentileMs sorted its argument")
	}
}
