from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fw import metadata


def test_reference_bad_fixtures(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "fw.reference", "--out", str(tmp_path), "--only", "bad", "--threads", "1"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    files = {b["file"] for b in manifest["bad"]}
    assert files == {
        "bad/state_dict.pt",
        "bad/pickled_model.pt",
        "bad/legacy_pickle.pt",
        "bad/shape_mismatch.onnx",
        "bad/plain.onnx",
        "bad/plain.ts.pt",
    }
    kinds = {f: metadata.detect_format(tmp_path / f) for f in files}
    assert (
        kinds["bad/state_dict.pt"]
        == kinds["bad/pickled_model.pt"]
        == kinds["bad/legacy_pickle.pt"]
        == "pickle"
    )
    assert kinds["bad/plain.onnx"] == kinds["bad/shape_mismatch.onnx"] == "onnx"
    assert kinds["bad/plain.ts.pt"] == "torchscript"
    assert metadata.read(tmp_path / "bad/plain.onnx", required=False) is None
    doc = metadata.read(tmp_path / "bad/shape_mismatch.onnx")
    assert doc["inputs"][0]["shape"] == [-1, 32]


MODELS = Path(os.environ.get("FW_MODELS_DIR") or Path(__file__).resolve().parents[2] / "build" / "models")


@pytest.mark.parametrize("name", ["digits_mlp", "digits_cnn", "textcls"])
def test_reference_int8_onnx_accuracy(name):
    """The reference int8 ONNX files lose at most one point of accuracy on their held-out test sets,
    measured here again in onnxruntime (whole test set in one call) and equal to what fw.json records."""
    import onnxruntime as ort

    from fw.reference import Builder, text_data

    if not (MODELS / "manifest.json").is_file():
        pytest.skip(f"reference models missing in {MODELS}: run `make models` or set FW_MODELS_DIR")
    if name == "textcls":
        x, y = text_data(1000, seed=1)
    else:
        _, _, x, y, _ = Builder(MODELS, print).digits()
        if name == "digits_cnn":
            x = x.reshape(-1, 1, 8, 8)
    x, y = x.numpy(), y.numpy()
    manifest = {f["file"]: f for f in json.loads((MODELS / "manifest.json").read_text())["files"]}

    def accuracy(path):
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return float((sess.run(None, {sess.get_inputs()[0].name: x})[0].argmax(-1) == y).mean())

    float_acc = accuracy(MODELS / f"{name}.onnx")
    for q in ("dynamic", "static"):
        rel = f"{name}.int8-{q}.onnx"
        doc = metadata.read(MODELS / rel)
        acc = accuracy(MODELS / rel)
        assert doc["format"] == "onnx_int8" and doc["export"]["quantization"] == q
        assert doc["metrics"]["test_accuracy"] == pytest.approx(acc, abs=1e-9)
        assert doc["metrics"]["float_test_accuracy"] == pytest.approx(float_acc, abs=1e-6)
        assert float_acc - acc <= 0.01, f"{rel}: {acc:.4f} vs float {float_acc:.4f}"
        entry = manifest[rel]
        assert entry["format"] == "onnx_int8" and entry["quantization"] == q
        assert entry["test_accuracy"] == pytest.approx(acc, abs=1e-9)
        assert entry["size_bytes"] < manifest[f"{name}.onnx"]["size_bytes"]
        if q == "static":
            assert doc["export"]["calibration"]["rows"] == 256
