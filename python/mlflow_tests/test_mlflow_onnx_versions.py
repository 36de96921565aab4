"""An MLflow model with the ONNX flavor, registered through MLflow's API, is a version fw serves as it is.

`mlflow.onnx.log_model(..., registered_model_name=...)` writes the model's tensors into an external data file
beside `model.onnx` (MLflow's default, `save_as_external_data=True`); fw registers the version as one
self-contained ONNX file (the external data inlined), with its inputs and outputs, while MLflow's client still
sees the source it registered. A PyTorch model saved as a torch.export program (mlflow.pytorch.log_model's
default) is a version fw exports from the Models page into a file it serves. Any other flavor stays a reference.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
from pathlib import Path

import numpy as np
import pytest

mlflow = pytest.importorskip(
    "mlflow", reason="mlflow is not installed: use scripts/setup-mlflow-venv.sh's venv"
)
onnx = pytest.importorskip("onnx", reason="onnx is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _linear(w: np.ndarray, b: np.ndarray) -> onnx.ModelProto:
    """y = x @ w + b, x [N, 64] -> y [N, 10]; w (2,560 bytes) goes to external data, b stays inline."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_onnx_flavor_version_is_a_servable_file(dashboard, tmp_path):
    from mlflow import MlflowClient

    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 10)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    mlflow.set_tracking_uri(dashboard.url)
    with mlflow.start_run():
        info = mlflow.onnx.log_model(_linear(w, b), name="model", registered_model_name="onnx-linear")
    client = MlflowClient(dashboard.url)
    mv = client.get_model_version("onnx-linear", "1")
    assert mv.source == f"models:/{info.model_id}", mv.source  # MLflow's client sees what it registered
    # MLflow wrote the weights beside model.onnx, as its default does.
    local = Path(mlflow.artifacts.download_artifacts(mv.source, tracking_uri=dashboard.url))
    assert len([p for p in local.iterdir() if p.suffix == ".data"]) == 1, list(local.iterdir())

    # fw's registry holds it as an ONNX file with its signature: deployable as it is.
    r = dashboard.request("GET", "/api/models/onnx-linear")
    assert r.status == 200, r
    v = r.json()["versions"][0]
    assert v["format"] == "onnx", v
    assert [(s["name"], s["shape"]) for s in v["inputs"]] == [("x", [-1, 64])], v
    assert [(s["name"], s["shape"]) for s in v["outputs"]] == [("y", [-1, 10])], v
    assert v["source"]["uri"] == mv.source, v

    # The file stands alone (no external data beside it) and computes the model.
    f = Path(dashboard.dirs["FW_EXPERIMENT_DIR"]) / v["file"]
    alone = tmp_path / "alone" / "model.onnx"
    alone.parent.mkdir()
    shutil.copy(f, alone)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    (y,) = ort.InferenceSession(str(alone), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(y, x @ w + b, rtol=1e-5, atol=1e-5)

    # MLflow's own loading of the version still works, through the source it registered.
    loaded = mlflow.onnx.load_model("models:/onnx-linear/1")
    assert [t.name for t in loaded.graph.initializer] == ["w", "b"]


def _mlp():
    torch = pytest.importorskip("torch")

    class MLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(8, 16)
            self.b = torch.nn.Linear(16, 3)

        def forward(self, x):
            return torch.softmax(self.b(torch.relu(self.a(x))), dim=-1)

    torch.manual_seed(0)
    return torch, MLP().eval()


def _export(dashboard, body: dict, timeout: float = 240) -> dict:
    """POST /api/models/export, then the job once it ended."""
    r = dashboard.request("POST", "/api/models/export", body)
    assert r.status == 202, r
    job_id = r.json()["id"]
    return dashboard.wait_for(
        lambda: dashboard.request("GET", f"/api/models/exports/{job_id}").json(),
        lambda j: j["state"] in ("finished", "failed"),
        timeout=timeout,
        what="the export job's end",
    )


def test_a_pytorch_program_version_is_exported_and_deployed(dashboard):
    """mlflow.pytorch.log_model's default (a torch.export program, data/model.pt2) registered through MLflow's
    API is a torch_export version: the Models page's export makes an ONNX version of it, which deploys and
    answers as the PyTorch model does; MLflow's client sees the new version too."""
    if not os.environ.get("FW_PYTHON"):
        pytest.fail(
            "FW_PYTHON (the Python with torch that export jobs run) is needed: make test-mlflow sets it"
        )
    torch, model = _mlp()
    from mlflow import MlflowClient

    rng = np.random.default_rng(0)
    with mlflow.start_run():
        mlflow.pytorch.log_model(
            model,
            name="model",
            registered_model_name="torch-mlp",
            input_example=rng.random((4, 8), np.float32),
        )
    r = dashboard.request("GET", "/api/models/torch-mlp")
    assert r.status == 200, r
    (v1,) = r.json()["versions"]
    assert v1["format"] == "torch_export" and v1["source"]["uri"].startswith("models:/m-"), v1
    # Not deployable before it is exported; the refusal says how.
    r = dashboard.request("POST", "/api/models/torch-mlp/deploy", {"version": 1, "port": _port()})
    assert r.status == 422 and "export it first" in r.json()["error"]["message"], r

    job = _export(dashboard, {"model": "torch-mlp", "version": 1, "format": "onnx"})
    assert job["state"] == "finished", job
    assert job["model"] == "torch-mlp" and job["version"] == 2 and job["report"]["max_abs_error"] < 1e-4, job
    v2 = dashboard.request("GET", "/api/models/torch-mlp").json()["versions"][1]
    assert v2["format"] == "onnx" and v2["source"]["model"] == "torch-mlp" and v2["source"]["version"] == 1, (
        v2
    )
    assert [s["shape"] for s in v2["inputs"]] == [[-1, 8]], v2
    assert MlflowClient(dashboard.url).get_model_version("torch-mlp", "2").version == "2"

    r = dashboard.request("POST", "/api/models/torch-mlp/deploy", {"version": 2, "port": _port()})
    assert r.status == 201, r
    dep = r.json()
    try:
        x = rng.random((5, 8), np.float32)

        def predict():
            return dashboard.request("POST", f"/api/deployments/{dep['id']}/predict", {"data": x.tolist()})

        got = dashboard.wait_for(
            predict, lambda r: r.status == 200, timeout=60, what="the deployment's answer"
        )
        want = model(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(np.array(got.json()["predictions"]), want, atol=1e-4)
    finally:
        r = dashboard.request("DELETE", f"/api/deployments/{dep['id']}")
        if r.status != 200 and dep.get("pid"):
            os.killpg(dep["pid"], signal.SIGKILL)
        assert r.status == 200, r


def test_pytorch_versions_fw_cannot_export_say_why(dashboard):
    """A pickled PyTorch model (serialization_format="pickle") stays a reference that export refuses (fw
    never unpickles); a program captured from a 1-row input_example (its batch axis fixed at 1) is a
    torch_export version whose export fails with the fix."""
    torch, model = _mlp()
    with mlflow.start_run():
        mlflow.pytorch.log_model(
            model,
            name="pickled",
            registered_model_name="torch-pickled",
            serialization_format="pickle",
            input_example=np.zeros((2, 8), np.float32),
        )
        mlflow.pytorch.log_model(
            model,
            name="one-row",
            registered_model_name="torch-one-row",
            input_example=np.zeros((1, 8), np.float32),
        )
    v = dashboard.request("GET", "/api/models/torch-pickled").json()["versions"][0]
    assert v["format"] == "mlflow", v
    r = dashboard.request(
        "POST", "/api/models/export", {"model": "torch-pickled", "version": 1, "format": "onnx"}
    )
    assert r.status == 422 and "never unpickled" in r.json()["error"]["message"], r
    v = dashboard.request("GET", "/api/models/torch-one-row").json()["versions"][0]
    assert v["format"] == "torch_export", v
    job = _export(dashboard, {"model": "torch-one-row", "version": 1, "format": "onnx"})
    assert job["state"] == "failed" and "input_example of 2 or more rows" in job["error"], job
