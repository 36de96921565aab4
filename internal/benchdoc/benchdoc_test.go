package benchdoc

import (
	"os"
	"path/filepath"
	"testing"
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
