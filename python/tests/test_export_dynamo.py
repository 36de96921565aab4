"""fw.export.onnx on torch's current ONNX exporter (``torch.onnx.export(dynamo=True)``) and its fallback.

The default, ``exporter="auto"``, exports with the dynamo exporter and falls back to the legacy
TorchScript-based one only when the dynamo exporter fails, saying why (stderr and fw.json). The models:
the issue's adaptive pooling case (``AdaptiveAvgPool2d(4)`` over a 55x55 map, which the legacy exporter
refuses), a model with data-dependent control flow (which torch.export refuses and tracing takes), and
the choices' rules. The written files are served by the real ``fw`` binary (the Go engine replays the
test vector at load). torchvision's models are in python/slow_tests (``make test-export-models``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from fwserve import FwServer

from fw import export
from fw.metadata import read as read_fw_json

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")


class AdaptivePool(torch.nn.Module):
    """Conv, then AdaptiveAvgPool2d(4) over a 55x55 map: 55 is not a multiple of 4."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.pool = torch.nn.AdaptiveAvgPool2d(4)
        self.fc = torch.nn.Linear(8 * 16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.conv(x)).flatten(1))


class DataDependent(torch.nn.Module):
    """A branch on the input's values: torch.export cannot capture it, tracing records one branch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > -1e9:
            return self.fc(x)
        return -self.fc(x)


def _pool() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return AdaptivePool().eval(), torch.rand(2, 3, 57, 57)


def test_adaptive_pooling_exports_with_the_current_exporter(tmp_path: Path) -> None:
    model, x = _pool()
    path = tmp_path / "pool.onnx"
    rep = export.onnx(model, x, path, name="pool")
    assert rep.exporter == "dynamo" and rep.fallback is None and rep.max_abs_error <= 1e-4
    doc = read_fw_json(path)
    assert doc["export"]["exporter"] == export.DYNAMO_EXPORTER and "fallback" not in doc["export"]
    proto = onnx.load(str(path))
    assert doc["export"]["opset_version"] == proto.opset_import[0].version >= 18
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    # The legacy exporter refuses the same model, with torch's reason in fw's message.
    with pytest.raises(export.ExportError, match="adaptive_avg_pool2d"):
        export.onnx(model, x, tmp_path / "legacy.onnx", exporter="legacy")
    assert not (tmp_path / "legacy.onnx").exists()


def test_fallback_to_legacy_says_why(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(0)
    model, x = DataDependent().eval(), torch.rand(3, 4)
    path = tmp_path / "dd.onnx"
    rep = export.onnx(model, x, path)
    assert (
        rep.exporter == "legacy"
        and rep.fallback
        and rep.fallback.startswith("torch.onnx.export (dynamo) failed")
    )
    assert "using the legacy TorchScript-based exporter" in capfd.readouterr().err
    doc = read_fw_json(path)
    assert doc["export"]["exporter"] == export.ONNX_EXPORTER and doc["export"]["fallback"] == rep.fallback
    assert doc["export"]["opset_version"] == export.DEFAULT_OPSET
    # Asked for the dynamo exporter alone, the same model is an error with a hint.
    with pytest.raises(export.ExportError, match=r"dynamo\) failed on DataDependent.*exporter='legacy'"):
        export.onnx(model, x, tmp_path / "dd2.onnx", exporter="dynamo")


def test_exporter_choices(tmp_path: Path, mlp: torch.nn.Module, digits_x: torch.Tensor) -> None:
    with pytest.raises(export.ExportError, match="exporter must be one of auto, dynamo, legacy"):
        export.onnx(mlp, digits_x, tmp_path / "a.onnx", exporter="tracer")
    with pytest.raises(export.ExportError, match="method='script' needs the legacy exporter"):
        export.onnx(mlp, digits_x, tmp_path / "b.onnx", method="script", exporter="dynamo")
    # script with auto: the legacy exporter, and no fallback to report (it was the only choice).
    rep = export.onnx(mlp, digits_x, tmp_path / "c.onnx", method="script")
    assert rep.exporter == "legacy" and rep.fallback is None
    # An explicit opset is what the dynamo exporter writes.
    rep = export.onnx(mlp, digits_x, tmp_path / "d.onnx", opset_version=17, exporter="dynamo")
    assert rep.exporter == "dynamo" and onnx.load(str(tmp_path / "d.onnx")).opset_import[0].version == 17
    assert read_fw_json(tmp_path / "d.onnx")["export"]["opset_version"] == 17


def test_cli_exporter_flag(tmp_path: Path, mlp: torch.nn.Module, digits_x: torch.Tensor) -> None:
    from fw import checkpoint

    ck = tmp_path / "m.ckpt.pt"
    checkpoint.save(mlp, ck, example_input=digits_x)
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fw.export", str(ck), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )

    r = run("--format", "onnx", "--out", str(tmp_path / "l.onnx"), "--exporter", "legacy")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["exporter"] == "legacy"
    r = run("--format", "onnx", "--out", str(tmp_path / "d.onnx"))
    assert r.returncode == 0 and json.loads(r.stdout)["exporter"] == "dynamo", r.stderr
    r = run("--format", "torchscript", "--out", str(tmp_path / "t.pt"), "--exporter", "dynamo")
    assert r.returncode == 2 and "--exporter only applies to --format onnx and onnx_int8" in r.stderr


def test_served_by_fw(tmp_path: Path) -> None:
    """The Go engine loads the dynamo-exported file (replaying its test vector) and answers as the model does."""
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    model, x = _pool()
    path = tmp_path / "pool.onnx"
    export.onnx(model, x, path, name="pool")
    srv = FwServer(FW_BIN, path)
    try:
        srv.wait_ready()
        rows = torch.rand(3, 3, 57, 57, generator=torch.Generator().manual_seed(1))
        body = json.dumps({"data": rows.tolist()}).encode()
        req = urllib.request.Request(
            f"http://{srv.url}/predict", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            got = np.array(json.load(r)["predictions"])
        want = model(rows).detach().numpy()
        assert got.shape == want.shape and np.allclose(got, want, atol=1e-4, rtol=1e-3)
    finally:
        assert srv.stop() == 0, srv.log()


def test_an_opset_the_current_exporter_cannot_write_falls_back(tmp_path: Path) -> None:
    """opset_version=14 is a promise: torch's exporter converts down from 18 and, when onnx's converter
    lacks an adapter (Shape, in a CNN's flatten), keeps 18; fw then uses the legacy exporter, which writes 14."""
    from fw.models import DigitsCNN

    torch.manual_seed(0)
    model, x = DigitsCNN().eval(), torch.rand(3, 1, 8, 8)
    rep = export.onnx(model, x, tmp_path / "cnn.onnx", opset_version=14)
    assert rep.exporter == "legacy" and "could not write opset 14" in (rep.fallback or "")
    assert onnx.load(str(tmp_path / "cnn.onnx")).opset_import[0].version == 14
    with pytest.raises(export.ExportError, match="could not write opset 14"):
        export.onnx(model, x, tmp_path / "cnn2.onnx", opset_version=14, exporter="dynamo")
