from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fw import checkpoint, metadata
from fw.models import DigitsMLP, TextClassifier

from helpers import NeedsArgs

# The tests' helpers, and the fw package these tests import (not whichever one the venv's
# editable install points at, when several checkouts share a venv).
ENV_PYTHONPATH = os.pathsep.join(
    [str(Path(__file__).parent), str(Path(checkpoint.__file__).resolve().parents[1])]
)


def test_round_trip(tmp_path, mlp, digits_x):
    p = checkpoint.save(mlp, tmp_path / "m.ckpt.pt", example_input=digits_x, name="m", labels=["a"] * 10)
    raw = torch.load(p, weights_only=True)
    assert raw["fw_checkpoint"] == 1 and raw["model_class"] == "fw.models:DigitsMLP"
    assert raw["model_kwargs"] == {"hidden": 16}
    ck = checkpoint.load(p)
    assert isinstance(ck.model, DigitsMLP) and not ck.model.training
    assert ck.meta["name"] == "m"
    torch.testing.assert_close(ck.model(digits_x), mlp(digits_x))
    torch.testing.assert_close(ck.example_input, digits_x)


def test_kwargs_explicit_and_missing(tmp_path):
    model = NeedsArgs(width=3)
    with pytest.raises(checkpoint.CheckpointError, match="model_kwargs"):
        checkpoint.save(model, tmp_path / "x.pt")
    checkpoint.save(model, tmp_path / "x.pt", model_kwargs={"width": 3})
    assert checkpoint.load(tmp_path / "x.pt").model.fc.in_features == 3


def test_refuses_unsafe_meta(tmp_path, mlp):
    with pytest.raises(checkpoint.CheckpointError, match="weights_only"):
        checkpoint.save(mlp, tmp_path / "x.pt", meta_obj=object())


def test_refuses_main_and_local_classes(tmp_path):
    class Local(torch.nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(checkpoint.CheckpointError, match="cannot be imported"):
        checkpoint.save(Local(), tmp_path / "x.pt")


def _fake(tmp_path, model_class):
    p = tmp_path / "fake.ckpt.pt"
    torch.save(
        {"fw_checkpoint": 1, "model_class": model_class, "model_kwargs": {}, "state_dict": {}, "meta": {}}, p
    )
    return p


@pytest.mark.parametrize(
    "model_class, message",
    [
        ("helpers:NotAModule", "not a torch.nn.Module subclass"),
        ("os:system", "not a torch.nn.Module subclass"),
        ("fw.nonexistent_module:Model", "cannot be imported"),
        ("fw.models:Missing", "has no attribute"),
        ("not a class path", "not of the form"),
    ],
)
def test_refuses_bad_model_class(tmp_path, model_class, message):
    with pytest.raises(checkpoint.CheckpointError, match=message) as info:
        checkpoint.load(_fake(tmp_path, model_class))
    assert "Hint:" in str(info.value)


def test_refuses_pickled_module_and_state_dict(tmp_path, mlp):
    torch.save(mlp, tmp_path / "whole.pt")
    with pytest.raises(checkpoint.CheckpointError, match="weights-only"):
        checkpoint.load(tmp_path / "whole.pt")
    torch.save(mlp.state_dict(), tmp_path / "sd.pt")
    with pytest.raises(checkpoint.CheckpointError, match="state_dict"):
        checkpoint.load(tmp_path / "sd.pt")


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "fw.export", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ENV_PYTHONPATH},
    )


@pytest.fixture(scope="module")
def text_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    torch.manual_seed(0)
    model = TextClassifier(vocab=100, dim=8, hidden=8).eval()
    example = torch.randint(0, 100, (4, 32))
    checkpoint.save(
        model, d / "text.ckpt.pt", example_input=example, name="textcls", labels=["negative", "positive"]
    )
    return d / "text.ckpt.pt"


@pytest.mark.parametrize(
    "fmt, out, extra",
    [
        ("onnx", "t.onnx", ["--opset", "14"]),
        ("torchscript", "t.ts.pt", ["--method", "script"]),
        ("quantized", "t.quant.pt", ["--name", "textcls_q", "--version", "2"]),
        ("aoti", "t.pt2", ["--device", "cpu"]),
    ],
)
def test_cli_formats(tmp_path, text_ckpt, fmt, out, extra):
    r = _cli(text_ckpt, "--format", fmt, "--out", tmp_path / out, *extra, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert report["format"] == fmt and report["size_bytes"] > 0
    doc = metadata.read(tmp_path / out)
    assert doc["labels"] == ["negative", "positive"]
    assert doc["name"] == ("textcls_q" if fmt == "quantized" else "textcls")
    assert doc["inputs"][0]["dtype"] == "int64"


def test_cli_errors(tmp_path, text_ckpt, mlp):
    r = _cli(text_ckpt, "--format", "tflite", "--out", tmp_path / "x", cwd=tmp_path)
    assert r.returncode == 2 and "usage:" in r.stderr and r.stdout == ""
    r = _cli(text_ckpt, "--format", "torchscript", "--opset", "14", "--out", tmp_path / "x", cwd=tmp_path)
    assert r.returncode == 2
    r = _cli(text_ckpt, "--format", "aoti", "--method", "script", "--out", tmp_path / "x.pt2", cwd=tmp_path)
    assert r.returncode == 2 and "--method does not apply to --format aoti" in r.stderr
    r = _cli(text_ckpt, "--format", "onnx", "--device", "cuda", "--out", tmp_path / "x.onnx", cwd=tmp_path)
    assert r.returncode == 2 and "--device only applies to --format aoti" in r.stderr
    r = _cli(tmp_path / "missing.ckpt.pt", "--format", "onnx", "--out", tmp_path / "x.onnx", cwd=tmp_path)
    assert r.returncode == 1 and "does not exist" in r.stderr and "Hint:" in r.stderr and r.stdout == ""
    checkpoint.save(mlp, tmp_path / "noex.ckpt.pt")
    r = _cli(tmp_path / "noex.ckpt.pt", "--format", "onnx", "--out", tmp_path / "x.onnx", cwd=tmp_path)
    assert r.returncode == 1 and "no example input" in r.stderr


def test_calibration_input_round_trip(tmp_path, mlp, digits_x):
    rows = torch.rand(40, 64)
    p = checkpoint.save(mlp, tmp_path / "c.ckpt.pt", example_input=digits_x, calibration_input=rows)
    torch.testing.assert_close(checkpoint.load(p).calibration_input, rows)
    assert checkpoint.load(checkpoint.save(mlp, tmp_path / "n.ckpt.pt", digits_x)).calibration_input is None
    with pytest.raises(checkpoint.CheckpointError, match="calibration_input"):
        checkpoint.save(mlp, tmp_path / "x.pt", digits_x, calibration_input=object())


@pytest.fixture(scope="module")
def calibrated_ckpt(tmp_path_factory):
    """A DigitsMLP checkpoint carrying 64 calibration rows, like the recipes write."""
    d = tmp_path_factory.mktemp("int8")
    torch.manual_seed(0)
    model = DigitsMLP(hidden=16).eval()
    gen = torch.Generator().manual_seed(1)
    checkpoint.save(
        model,
        d / "mlp.ckpt.pt",
        example_input=torch.rand(4, 64, generator=gen),
        calibration_input=torch.rand(64, 64, generator=gen),
        name="mlp",
    )
    return d / "mlp.ckpt.pt"


def test_cli_onnx_int8(tmp_path, text_ckpt, calibrated_ckpt):
    """--format onnx_int8: dynamic (LSTM model), static on the checkpoint's rows and on an .npz."""
    r = _cli(text_ckpt, "--format", "onnx_int8", "--out", tmp_path / "t.int8.onnx", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["format"] == "onnx_int8" and report["quantization"] == "dynamic"
    doc = metadata.read(tmp_path / "t.int8.onnx")
    assert (
        doc["export"]["quantization"] == "dynamic" and "DynamicQuantizeLSTM" in doc["export"]["quantized_ops"]
    )

    r = _cli(
        calibrated_ckpt,
        "--format",
        "onnx_int8",
        "--quantization",
        "static",
        "--out",
        tmp_path / "m.onnx",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = metadata.read(tmp_path / "m.onnx")
    assert doc["export"]["calibration"] == {"method": "minmax", "rows": 64, "batch": 16}
    assert doc["export"]["per_channel"] is False and doc["name"] == "mlp"

    import numpy as np

    np.savez(tmp_path / "calib.npz", np.random.default_rng(0).random((24, 64), dtype=np.float32))
    r = _cli(
        calibrated_ckpt,
        *("--format", "onnx_int8", "--quantization", "static", "--per-channel"),
        *("--calibration", tmp_path / "calib.npz", "--opset", "17", "--out", tmp_path / "n.onnx"),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = metadata.read(tmp_path / "n.onnx")
    assert doc["export"]["calibration"]["rows"] == 24 and doc["export"]["per_channel"] is True
    assert doc["export"]["opset_version"] == 17


def test_cli_onnx_int8_errors(tmp_path, text_ckpt):
    # The checkpoint has no calibration rows: static quantization says how to give some.
    r = _cli(
        text_ckpt,
        "--format",
        "onnx_int8",
        "--quantization",
        "static",
        "--out",
        tmp_path / "x.onnx",
        cwd=tmp_path,
    )
    assert r.returncode == 1 and "no calibration rows" in r.stderr and "--calibration FILE.npz" in r.stderr
    assert not (tmp_path / "x.onnx").exists() and r.stdout == ""
    r = _cli(
        text_ckpt, "--format", "onnx", "--quantization", "static", "--out", tmp_path / "x.onnx", cwd=tmp_path
    )
    assert r.returncode == 2 and "only apply to --format onnx_int8" in r.stderr
    r = _cli(
        text_ckpt,
        "--format",
        "onnx_int8",
        "--quantization",
        "qat",
        "--out",
        tmp_path / "x.onnx",
        cwd=tmp_path,
    )
    assert r.returncode == 2 and "invalid choice" in r.stderr
    (tmp_path / "pickle.npz").write_bytes(b"\x80\x04not an npz")
    r = _cli(
        text_ckpt,
        *("--format", "onnx_int8", "--quantization", "static", "--calibration", tmp_path / "pickle.npz"),
        *("--out", tmp_path / "x.onnx"),
        cwd=tmp_path,
    )
    assert r.returncode == 1 and "not a numpy .npz archive" in r.stderr, r.stderr
    r = _cli(
        text_ckpt,
        "--format",
        "onnx_int8",
        "--calibration",
        tmp_path / "c.npz",
        "--out",
        tmp_path / "x.onnx",
        cwd=tmp_path,
    )
    assert r.returncode == 2 and "only used by --quantization static" in r.stderr
