"""fw.export from a ``torch.export.save`` program (``.pt2``): what an MLflow PyTorch model holds.

``mlflow.pytorch.log_model`` saves a model as ``data/model.pt2`` (torch.export, MLflow 3's default);
the dashboard exports such a registered version through ``python -m fw.export PROGRAM``. These tests
write programs with torch directly (MLflow's own path is in python/mlflow_tests): a program captured
with a dynamic batch exports to ONNX, TorchScript and int8 ONNX and the files match the program; one
captured with a fixed batch of 1 is refused with the fix; and a program that would need anything
unpickled beyond tensors is refused without running the code it carries.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

from fw import checkpoint, export

REPO = Path(__file__).resolve().parents[2]


class Scaled(torch.nn.Module):
    """A Sequential (its parameters are named "0.weight", as most models' are), a buffer and softmax:
    parameters and a constant in the program."""

    def __init__(self) -> None:
        super().__init__()
        self.l = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.l(features) * self.scale, dim=-1)


def _program(path: Path, rows: int, dynamic: bool = True) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = Scaled().eval()
    x = torch.rand(rows, 6)
    shapes = ({0: torch.export.Dim.AUTO},) if dynamic else None
    torch.export.save(torch.export.export(model, (x,), dynamic_shapes=shapes), path)
    return model, x


def test_is_program(tmp_path: Path) -> None:
    _program(tmp_path / "p.pt2", 4)
    assert export.is_program(tmp_path / "p.pt2")
    checkpoint.save(Scaled(), tmp_path / "c.pt", example_input=torch.rand(2, 6))
    assert not export.is_program(tmp_path / "c.pt")
    fake = tmp_path / "aoti.pt2"  # what an AOTInductor package holds beside the same archive markers
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr("m/archive_format", "pt2")
        z.writestr("m/models/model.json", "{}")
        z.writestr("m/data/aotinductor/model/x.so", "")
    assert not export.is_program(fake)
    (tmp_path / "text.pt2").write_text("not a zip")
    assert not export.is_program(tmp_path / "text.pt2")


@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "onnx_int8"])
def test_a_program_exports_and_matches(tmp_path: Path, fmt: str) -> None:
    model, _ = _program(tmp_path / "p.pt2", 4)
    out = tmp_path / ("m.onnx" if "onnx" in fmt else "m.pt")
    report = export.export_checkpoint(tmp_path / "p.pt2", fmt, out, name="scaled")
    assert {c["batch"] for c in report.checks} >= {1, 4, 7}
    rows = torch.rand(5, 6)
    want = model(rows).detach().numpy()
    if fmt == "torchscript":
        got = torch.jit.load(str(out))(rows).detach().numpy()
        assert np.allclose(got, want, atol=1e-5)
    else:
        sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        assert [i.name for i in sess.get_inputs()] == ["features"]  # the program's own input name
        got = sess.run(None, {"features": rows.numpy()})[0]
        assert np.allclose(got, want, atol=1e-4 if fmt == "onnx" else 0.05)


def test_the_command_line_takes_a_program(tmp_path: Path) -> None:
    _program(tmp_path / "p.pt2", 3)
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    r = subprocess.run(
        [sys.executable, "-m", "fw.export", str(tmp_path / "p.pt2"), "--format", "onnx"]
        + ["--out", str(tmp_path / "m.onnx"), "--name", "scaled"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["name"] == "scaled" and report["max_abs_error"] < 1e-4


def test_a_fixed_batch_is_refused_with_the_fix(tmp_path: Path) -> None:
    _program(tmp_path / "p.pt2", 1)  # torch.export fixes size-1 axes, as MLflow's batch-1 examples do
    with pytest.raises(export.ExportError, match="fixed size on axis 0.*input_example of 2 or more rows"):
        export.export_checkpoint(tmp_path / "p.pt2", "onnx", tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


class _Marker:
    """Unpickling this creates a file: proof that code from the archive ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


def _rewrite(src: Path, dst: Path, edit: dict[str, bytes]) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for n in zin.namelist():
            zout.writestr(n, edit.get(n, zin.read(n)))
        for n in edit.keys() - set(zin.namelist()):
            zout.writestr(n, edit[n])


def test_pickled_parts_are_refused_and_never_run(tmp_path: Path) -> None:
    _program(tmp_path / "p.pt2", 4)
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Marker(str(marker)))
    with zipfile.ZipFile(tmp_path / "p.pt2") as z:
        names = z.namelist()
        wcfg_name = next(n for n in names if n.endswith("model_weights_config.json"))
        ccfg_name = next(n for n in names if n.endswith("model_constants_config.json"))
        wcfg = json.loads(z.read(wcfg_name))
    root = wcfg_name.split("/")[0]
    # A weight marked as pickled (torch reads it with weights_only=False).
    first = next(iter(wcfg["config"]))
    wcfg["config"][first]["use_pickle"] = True
    path_name = wcfg["config"][first]["path_name"]
    _rewrite(
        tmp_path / "p.pt2",
        tmp_path / "weight.pt2",
        {wcfg_name: json.dumps(wcfg).encode(), f"{root}/data/weights/{path_name}": payload},
    )
    # A constant stored as an opaque object (torch reads it with pickle.loads).
    ccfg = {
        "config": {
            "obj": {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True, "tensor_meta": None}
        }
    }
    _rewrite(
        tmp_path / "p.pt2",
        tmp_path / "opaque.pt2",
        {ccfg_name: json.dumps(ccfg).encode(), f"{root}/data/constants/opaque_obj_0": payload},
    )
    for bad, why in (("weight.pt2", "Weights only load failed"), ("opaque.pt2", "never unpickles")):
        with pytest.raises(export.ExportError, match=why):
            export.export_checkpoint(tmp_path / bad, "onnx", tmp_path / "m.onnx")
        assert not marker.exists(), f"{bad}: code from the archive ran"
    # The loader puts torch's readers back afterwards.
    assert torch.load.__name__ == "load" and torch.load.__module__ == "torch.serialization"


def _edit_graph(src: Path, dst: Path, edit: Any) -> None:
    """dst: src with its graph JSON (models/model.json) changed by edit(text) -> text."""
    with zipfile.ZipFile(src) as z:
        name = next(n for n in z.namelist() if "/models/" in n and n.endswith(".json"))
        text = z.read(name).decode()
    changed = edit(text)
    assert changed != text, "the edit changed nothing"
    _rewrite(src, dst, {name: changed.encode()})


def test_code_in_the_graph_is_never_run(tmp_path: Path) -> None:
    """torch's reader evals size expressions (sympy), resolves call targets by name and builds guard
    functions from Python source in the file: none of it runs code from the file under fw.export."""
    model, _ = _program(tmp_path / "p.pt2", 4)
    marker = tmp_path / "ran"
    run = f"__import__('os').system('touch {marker}')"
    _edit_graph(  # a size expression that is Python
        tmp_path / "p.pt2",
        tmp_path / "expr.pt2",
        lambda t: re.sub(r'"Symbol\(\'s\d+\', positive=True, integer=True\)"', json.dumps(run), t, count=1),
    )
    _edit_graph(  # a call target outside torch's operators: operator.attrgetter reaches any object
        tmp_path / "p.pt2",
        tmp_path / "target.pt2",
        lambda t: t.replace('"torch.ops.aten.mul.Tensor"', '"_operator.attrgetter"'),
    )
    _edit_graph(
        tmp_path / "p.pt2",
        tmp_path / "torchos.pt2",
        lambda t: t.replace('"torch.ops.aten.mul.Tensor"', '"torch.os.system"'),
    )
    # A value name that is Python: FX writes names into the source it execs (def forward(self, <name>)).
    evil = f"x=__import__('os').system('touch {marker}')"
    _edit_graph(
        tmp_path / "p.pt2", tmp_path / "name.pt2", lambda t: t.replace('"features"', json.dumps(evil))
    )
    _edit_graph(  # a size that sympy would take forever to evaluate
        tmp_path / "p.pt2",
        tmp_path / "tower.pt2",
        lambda t: re.sub(r'"Symbol\(\'s\d+\', positive=True, integer=True\)"', '"9**9**9**9"', t, count=1),
    )
    for bad, why in (
        ("name.pt2", "not a plain identifier"),
        ("tower.pt2", "not plain arithmetic"),
        ("expr.pt2", "not plain arithmetic"),
        ("target.pt2", "calls _operator.attrgetter"),
        ("torchos.pt2", "calls torch.os.system"),
    ):
        with pytest.raises(export.ExportError, match=why):
            export.export_checkpoint(tmp_path / bad, "onnx", tmp_path / "m.onnx")
        assert not marker.exists(), f"{bad}: code from the archive ran"
    # Guards are Python source that ep.module() would exec: fw drops them (its checks stand in) and
    # exports the program.
    _edit_graph(
        tmp_path / "p.pt2",
        tmp_path / "guard.pt2",
        lambda t: t.replace('"guards_code": []', f'"guards_code": [{json.dumps(run)}]'),
    )
    report = export.export_checkpoint(tmp_path / "guard.pt2", "onnx", tmp_path / "g.onnx")
    assert report.max_abs_error < 1e-4 and not marker.exists()
