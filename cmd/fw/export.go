package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// pythonPath finds the interpreter that has the fw Python package: FW_PYTHON,
// then FW_VENV/bin/python (the set-up's venv when it lives outside the
// checkout, as in CI), then .venv/bin/python beside the binary's parent or
// the working directory, then python3 on PATH.
func pythonPath() string {
	if p := os.Getenv("FW_PYTHON"); p != "" {
		return p
	}
	if v := os.Getenv("FW_VENV"); v != "" {
		if p := filepath.Join(v, "bin", "python"); fileExists(p) {
			return p
		}
	}
	var roots []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			roots = append(roots, filepath.Dir(filepath.Dir(exe)))
		}
	}
	if wd, err := os.Getwd(); err == nil {
		roots = append(roots, wd)
	}
	for _, r := range roots {
		p := filepath.Join(r, ".venv", "bin", "python")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "python3"
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(stderr, `Usage: fw export CHECKPOINT --format onnx|torchscript|quantized|onnx_int8|aoti --out PATH [--opset N] [--exporter auto|dynamo|legacy] [--method trace|script]
       [--name N] [--version V] [--quantization dynamic|static] [--calibration FILE.npz] [--per-channel] [--device cpu|cuda]

Exports a checkpoint written by fw.checkpoint.save (or run.checkpoint), or a
torch.export program (.pt2 of torch.export.save, e.g. an MLflow PyTorch model's
data/model.pt2, read without running anything from the file; its batch axis must
be dynamic), to one
self-describing model file, checks it against the checkpoint's model, and prints
a one-line JSON report. ONNX goes through torch's current exporter (dynamo, its own
opset unless --opset says otherwise); --exporter auto (default) falls back to the
legacy TorchScript-based one (opset 14) when it fails, printing why. --format onnx_int8 quantizes with onnxruntime's tools:
--quantization dynamic (default) or static, calibrated on FILE.npz or on the rows
the checkpoint carries (fw.checkpoint.save(..., calibration_input=...)).
--format aoti compiles an AOTInductor package (.pt2) with the system C++ compiler
for --device (default cpu; cuda needs a GPU here).
It runs "python -m fw.export" with the interpreter in
FW_PYTHON, else .venv/bin/python, else python3; the arguments are passed as they
are, never through a shell.
`)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	py := pythonPath()
	cmd := exec.CommandContext(ctx, py, append([]string{"-m", "fw.export"}, args...)...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = stdout, stderr, nil
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintf(stderr, "fw export: run %s -m fw.export: %v (set FW_PYTHON to a Python with the fw package, or run `make setup`)\n", py, err)
		return 1
	}
	return 0
}
