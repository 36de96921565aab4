"""Outputs whose shape the model does not fix, and tensors with a zero-sized axis, through tritonclient.

Triton's own L0_infer and L0_infer_zero suites found both. An identity model of FP16 tensors ``[N, ?]`` (Triton's
``nop_TYPE_FP16_-1``) made every request answer 500 "engine call panicked": the ONNX Runtime binding fw uses
(onnxruntime_go 1.27) copied an FP16 or BF16 output that ONNX Runtime allocated one byte per element and failed,
leaving a typed nil fw then freed (fw now carries the binding with that fixed: engine/onnxruntime_go/README.fw.md).
And a tensor with a zero-sized axis (``[1, 0]``, or ``[0]`` for a model without a batch axis) was refused ("input is
empty") where Triton runs it. Each case goes over HTTP (JSON and binary) and gRPC; the server keeps serving.
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
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
from onnx import TensorProto, helper  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")

# name -> (ONNX element type, Triton datatype, the model's dims, max_batch_size 0 in a config.pbtxt)
MODELS = {
    "fp16_dynamic": (TensorProto.FLOAT16, "FP16", ["N", "W"], False),
    "fp16_fixed": (TensorProto.FLOAT16, "FP16", ["N", 16], False),
    "fp32_dynamic": (TensorProto.FLOAT, "FP32", ["N", "W"], False),
    "bytes_dynamic": (TensorProto.STRING, "BYTES", ["N", "W"], False),
    "fp32_whole": (TensorProto.FLOAT, "FP32", ["W"], True),
}


def _identity(path: Path, elem: int, dims: list) -> None:
    x = helper.make_tensor_value_info("INPUT0", elem, dims)
    y = helper.make_tensor_value_info("OUTPUT0", elem, dims)
    graph = helper.make_graph([helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "nop", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    root = tmp_path_factory.mktemp("repo")
    for name, (elem, dt, dims, whole) in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        _identity(root / name / "1" / "model.onnx", elem, dims)
        if whole:
            (root / name / "config.pbtxt").write_text(
                f'max_batch_size: 0\ninput [ {{ name: "INPUT0" data_type: TYPE_{dt} dims: [ -1 ] }} ]\n'
                f'output [ {{ name: "OUTPUT0" data_type: TYPE_{dt} dims: [ -1 ] }} ]\n'
            )
    srv = FwServer(FW_BIN, None, "--model-repository", str(root), grpc=True)
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


def _data(dt: str, shape: list[int]) -> np.ndarray:
    n = int(np.prod(shape))
    if dt == "BYTES":
        return np.array([f"w{i}".encode() for i in range(n)], dtype=np.object_).reshape(shape)
    return np.linspace(-2, 2, n).astype(np.float16 if dt == "FP16" else np.float32).reshape(shape)


CASES = [
    ("fp16_dynamic", [2, 16]),
    ("fp16_dynamic", [3, 5]),
    ("fp16_fixed", [2, 16]),
    ("fp16_dynamic", [1, 0]),
    ("fp32_dynamic", [1, 0]),
    ("bytes_dynamic", [2, 0]),
    ("fp32_whole", [0]),
    ("fp32_whole", [7]),
]


# FP16 has no JSON form in the protocol (binary data only).
RUNS = [
    (m, shape, how)
    for m, shape in CASES
    for how in ("http-binary", "http-json", "grpc")
    if not (how == "http-json" and MODELS[m][1] == "FP16")
]


@pytest.mark.parametrize(("model", "shape", "how"), RUNS)
def test_identity(server: FwServer, model: str, shape: list[int], how: str) -> None:
    dt = MODELS[model][1]
    x = _data(dt, shape)
    if how == "grpc":
        c, mod = grpcclient.InferenceServerClient(server.grpc_url), grpcclient
    else:
        c, mod = httpclient.InferenceServerClient(server.url), httpclient
    t = mod.InferInput("INPUT0", shape, dt)
    if how == "http-json":
        t.set_data_from_numpy(x, binary_data=False)
    else:
        t.set_data_from_numpy(x)
    out = c.infer(model, [t]).as_numpy("OUTPUT0")
    assert list(out.shape) == shape
    np.testing.assert_array_equal(out, x)
