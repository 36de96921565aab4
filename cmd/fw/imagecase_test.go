package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/internal/testlog"
)

// The image test case (test_vector.image) checks the whole image path: a
// file whose preprocessing recipe was changed after export (the weights and
// the tensor test vector untouched) must fail fw verify and the warm-up.

// tamperRecipeScript edits fw.json's preprocessing.image of an ONNX model:
// the steps form gets another interpolation for its resize and a shifted
// mean; the simple form another resize mode.
const tamperRecipeScript = `
import json, sys, onnx
src, dst, what = sys.argv[1], sys.argv[2], sys.argv[3]
m = onnx.load(src)
prop = next(p for p in m.metadata_props if p.key == "fw.json")
doc = json.loads(prop.value)
image = doc["preprocessing"]["image"]
if what == "interpolation":
    next(s for s in image["steps"] if s["op"] == "resize")["interpolation"] = "bicubic"
elif what == "mean":
    next(s for s in image["steps"] if s["op"] == "normalize")["mean"][0] += 0.02
elif what == "resize":
    image["resize"] = "bilinear" if image.get("resize") == "nearest" else "nearest"
prop.value = json.dumps(doc)
onnx.save(m, dst)
`

func tamperedRecipe(t *testing.T, model, what string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "tampered-"+what+".onnx")
	out, err := exec.Command(trainingPython(t), "-c", tamperRecipeScript, filepath.Join(modelsDir(t), model), dst, what).CombinedOutput()
	if err != nil {
		t.Fatalf("tampering with %s: %v\n%s", model, err, out)
	}
	return dst
}

func TestImageCaseVerify(t *testing.T) {
	// The reference files pass, the image case included.
	for _, model := range []string{"resnet18.onnx", "digits_cnn.onnx"} {
		var stdout bytes.Buffer
		cmd := fwCmd("verify", filepath.Join(modelsDir(t), model), "--json", "--time", "0")
		cmd.Stdout = &stdout
		if err := cmd.Run(); err != nil {
			t.Fatalf("fw verify %s: %v\n%s", model, err, stdout.String())
		}
		var rep verifyReport
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Image == nil || !rep.Image.Passed || rep.Image.InputMaxAbsError > rep.Image.InputAtol {
			t.Fatalf("%s: image case %+v", model, rep.Image)
		}
	}
	// A changed recipe fails, naming the preprocessing.
	for _, c := range []struct{ model, what string }{
		{"resnet18.onnx", "interpolation"},
		{"resnet18.onnx", "mean"},
		{"digits_cnn.onnx", "resize"},
	} {
		bad := tamperedRecipe(t, c.model, c.what)
		var stdout, stderr bytes.Buffer
		cmd := fwCmd("verify", bad, "--time", "0")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("%s with another %s: %v, want exit status 1\n%s%s", c.model, c.what, err, stdout.String(), stderr.String())
		}
		if !strings.Contains(stdout.String(), "through the image path") || !strings.Contains(stdout.String(), ": FAIL") ||
			!strings.Contains(stderr.String(), "does not reproduce the transform") {
			t.Fatalf("%s with another %s: want the image case to fail on the preprocessing:\nstdout: %s\nstderr: %s", c.model, c.what, stdout.String(), stderr.String())
		}
	}
}

// fw serve refuses a file whose recipe no longer reproduces its transform:
// the warm-up runs the image case.
func TestImageCaseServeRefuses(t *testing.T) {
	bad := tamperedRecipe(t, "digits_cnn.onnx", "resize")
	cmd := fwCmd("serve", "--model", bad, "--port", strconv.Itoa(freePort(t)), "--threads", "1")
	stderr := &testlog.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("fw serve on a file with a changed recipe did not exit:\n%s", stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "image test case does not match") {
		t.Fatalf("exit %v, want status 1 naming the image test case:\n%s", err, stderr.String())
	}
}
