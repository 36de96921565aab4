package modelrepo

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/serving"
)

// A repository's BYTES models load (their config says TYPE_STRING, the
// configuration's name for BYTES) and run, and an output's label_filename
// becomes its labels for the classification extension: one label per
// line, an output without one has none.
func TestStringModelsAndLabels(t *testing.T) {
	root := t.TempDir()
	src := samples(t)
	copyModel(t, filepath.Join(src, "simple_string"), root, "simple_string")
	copyModel(t, filepath.Join(src, "simple"), root, "labelled")
	cfg := strings.Replace(readFile(t, filepath.Join(root, "labelled", "config.pbtxt")),
		"name: \"OUTPUT0\"\n    data_type: TYPE_INT32", "name: \"OUTPUT0\"\n    data_type: TYPE_INT32\n    label_filename: \"labels.txt\"", 1)
	os.WriteFile(filepath.Join(root, "labelled", "config.pbtxt"), []byte(cfg), 0o644)
	os.WriteFile(filepath.Join(root, "labelled", "labels.txt"), []byte("zero\r\none\n\nthree\n"), 0o644)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"simple_string", "labelled"}})

	inst, err := f.repo.Get("simple_string", "")
	if err != nil {
		t.Fatal(err)
	}
	if c := inst.Config.Inputs[0]; c.DataType != "TYPE_STRING" {
		t.Fatalf("simple_string config input: %+v", c)
	}
	a, _ := engine.FromStrings([]int64{1, 16}, slices.Repeat([]string{"40"}, 16))
	b, _ := engine.FromStrings([]int64{1, 16}, slices.Repeat([]string{"2"}, 16))
	out, _, err := serving.Infer(context.Background(), f.repo, inst, []engine.Tensor{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := out[0].Strings(); string(got[15]) != "42" {
		t.Fatalf("simple_string 40+2 = %q", got[15])
	}

	inst, err = f.repo.Get("labelled", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := inst.Labels("OUTPUT0"); !slices.Equal(got, []string{"zero", "one", "", "three"}) || inst.Labels("OUTPUT1") != nil {
		t.Fatalf("labels %q and %q", got, inst.Labels("OUTPUT1"))
	}
	if c := inst.Config.Outputs[0]; c.LabelFilename != "labels.txt" {
		t.Fatalf("output config %+v", c)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
