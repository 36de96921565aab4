"""An MLflow model with the ONNX flavor, registered through MLflow's API, is a version fw serves as it is.

`mlflow.onnx.log_model(..., registered_model_name=...)` writes the model's tensors into an external data file
beside `model.onnx` (MLflow's default, `save_as_external_data=True`); fw registers the version as one
self-contained ONNX file (the external data inlined), with its inputs and outputs, while MLflow's client still
sees the source it registered. Any other flavor stays a reference.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

mlflow = pytest.importorskip(
    "mlflow", reason="mlflow is not installed: use scripts/setup-mlflow-venv.sh's venv"
)
onnx = pytest.importorskip("onnx", reason="onnx is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


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


def test_a_pytorch_flavor_version_stays_a_reference(dashboard):
    torch = pytest.importorskip("torch")
    from mlflow import MlflowClient

    mlflow.set_tracking_uri(dashboard.url)
    with mlflow.start_run():
        mlflow.pytorch.log_model(
            torch.nn.Linear(4, 2),
            name="model",
            registered_model_name="torch-linear",
            input_example=np.zeros((1, 4), dtype=np.float32),
        )
    assert MlflowClient(dashboard.url).get_model_version("torch-linear", "1").source.startswith("models:/m-")
    r = dashboard.request("GET", "/api/models/torch-linear")
    assert r.status == 200, r
    assert r.json()["versions"][0]["format"] == "mlflow", json.dumps(r.json())
