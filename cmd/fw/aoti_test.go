package main

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/testmodels"
)

// tamperedPackage writes a copy of the reference digits_mlp.pt2 whose fw.json
// expects three times the outputs the package computes (the package itself
// left as it was), as if its weights had been changed after export.
func tamperedPackage(t *testing.T) string {
	t.Helper()
	return testmodels.RewriteZip(t, filepath.Join(modelsDir(t), "digits_mlp.pt2"), filepath.Join(t.TempDir(), "tampered.pt2"),
		testmodels.EditPackageFWJSON(t, func(doc map[string]any) {
			tv := doc["test_vector"].(map[string]any)
			out := tv["outputs"].(map[string]any)["logits"].(map[string]any)
			raw, err := base64.StdEncoding.DecodeString(out["b64"].(string))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+4 <= len(raw); i += 4 {
				v := math.Float32frombits(binary.LittleEndian.Uint32(raw[i:]))
				binary.LittleEndian.PutUint32(raw[i:], math.Float32bits(3*v+1))
			}
			out["b64"] = base64.StdEncoding.EncodeToString(raw)
		}))
}

// fw verify on an AOTInductor package: PASS on the reference file, exit 1
// naming the mismatch on a tampered one, exit 1 naming the reason on one
// compiled by another torch release.
func TestVerifyPackage(t *testing.T) {
	good := filepath.Join(modelsDir(t), "digits_mlp.pt2")
	var out bytes.Buffer
	cmd := fwCmd("verify", good, "--json", "--time", "0.05")
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("verify %s: %v\n%s", good, err, out.String())
	}
	var rep verifyReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Passed || rep.Format != "aoti" || rep.Name != "digits_mlp" || rep.Rows == 0 || rep.Calls == 0 {
		t.Fatalf("report: %+v", rep)
	}

	var stdout, stderr bytes.Buffer
	cmd = fwCmd("verify", tamperedPackage(t), "--time", "0")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var ee *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("verify a tampered package: %v, want exit status 1\n%s%s", err, stdout.String(), stderr.String())
	}
	// The tampered outputs are the test vector's; the sample picture's case
	// (its own outputs) may still pass, so only the check line must fail.
	checkLine := ""
	for _, l := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(l, "check") {
			checkLine = l
		}
	}
	if !strings.Contains(stderr.String(), "outputs differ beyond tolerance") || !strings.HasSuffix(checkLine, "FAIL") {
		t.Fatalf("want the mismatch named:\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	}

	old := testmodels.RewriteZip(t, good, filepath.Join(t.TempDir(), "old.pt2"),
		testmodels.EditPackageFWJSON(t, func(doc map[string]any) { doc["torch_version"] = "2.11.0+cu128" }))
	stderr.Reset()
	cmd = fwCmd("verify", old, "--time", "0")
	cmd.Stderr = &stderr
	if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "compiled with torch 2.11.0+cu128") {
		t.Fatalf("verify a package of another torch: %v\n%s", err, stderr.String())
	}
}

// fw serve refuses a tampered package: never ready, exit 1 naming the test vector.
func TestTamperServeRefusesPackage(t *testing.T) {
	serveRefuses(t, tamperedPackage(t))
}
