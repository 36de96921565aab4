"""An FP16 model whose outputs' shapes the model does not fix, through tritonclient.

Triton's own L0_infer suite found it: an identity model of FP16 tensors ``[N, ?]`` (Triton's ``nop_TYPE_FP16_-1``)
made every request answer 500 "engine call panicked: nil pointer dereference". The ONNX Runtime binding fw uses
(onnxruntime_go 1.27) copies an FP16 output that ONNX Runtime allocated one byte per element and fails, leaving a
typed nil fw then freed. Now the request is answered with the reason and what to do, the server keeps serving, and
an FP16 model whose output shape is fixed apart from the batch axis works.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer

onnx = pytest.importorskip("onnx")
httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
from onnx import TensorProto, helper  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")


def _identity(path: Path, dims: list) -> None:
    x = helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT16, dims)
    y = helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT16, dims)
    graph = helper.make_graph([helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "nop", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    root = tmp_path_factory.mktemp("repo")
    for name, dims in {"fp16_dynamic": ["N", "W"], "fp16_fixed": ["N", 16]}.items():
        (root / name / "1").mkdir(parents=True)
        _identity(root / name / "1" / "model.onnx", dims)
    srv = FwServer(FW_BIN, None, "--model-repository", str(root))
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


def _infer(c, model: str) -> np.ndarray:
    x = np.linspace(-2, 2, 32, dtype=np.float16).reshape(2, 16)
    t = httpclient.InferInput("INPUT0", [2, 16], "FP16")
    t.set_data_from_numpy(x)
    return x, c.infer(model, [t])


def test_fp16_output_of_unfixed_shape_is_refused_with_the_reason(server: FwServer) -> None:
    c = httpclient.InferenceServerClient(server.url)
    for _ in range(3):  # the server keeps serving
        with pytest.raises(InferenceServerException) as e:
            _infer(c, "fp16_dynamic")
        msg = str(e.value)
        assert "panicked" not in msg, msg
        assert 'output "OUTPUT0" is float16 with a shape the model does not fix' in msg, msg
    x, r = _infer(c, "fp16_fixed")
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
