from __future__ import annotations

import json
import subprocess
import sys

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
