"""Every Triton datatype the ONNX engine takes, over the wire, with tritonclient.

An ONNX Identity model per datatype (written here with onnx's helpers) is served from one repository by the real
``fw serve``; each is sent a tensor of that datatype's extremes over HTTP (JSON and binary), over gRPC as raw bytes
(tritonclient's default) and over gRPC in the typed ``*_contents`` fields tritonclient never uses (built with
tritonclient's own protobuf classes), and must come back bit for bit. The engine-level tests cover the loading;
this covers the decoders and encoders of both transports.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")

# Triton datatype -> (ONNX element type, numpy dtype, the typed gRPC field, values to send).
DTYPES = {
    "BOOL": (TensorProto.BOOL, np.bool_, "bool_contents", [True, False, True, False]),
    "UINT8": (TensorProto.UINT8, np.uint8, "uint_contents", [0, 1, 254, 255]),
    "UINT16": (TensorProto.UINT16, np.uint16, "uint_contents", [0, 1, 65534, 65535]),
    "UINT32": (TensorProto.UINT32, np.uint32, "uint_contents", [0, 1, 2**32 - 2, 2**32 - 1]),
    "UINT64": (TensorProto.UINT64, np.uint64, "uint64_contents", [0, 1, 2**64 - 2, 2**64 - 1]),
    "INT8": (TensorProto.INT8, np.int8, "int_contents", [-128, -1, 0, 127]),
    "INT16": (TensorProto.INT16, np.int16, "int_contents", [-32768, -1, 0, 32767]),
    "INT32": (TensorProto.INT32, np.int32, "int_contents", [-(2**31), -1, 0, 2**31 - 1]),
    "INT64": (TensorProto.INT64, np.int64, "int64_contents", [-(2**63), -1, 0, 2**63 - 1]),
    "FP16": (TensorProto.FLOAT16, np.float16, None, [-65504.0, -0.5, 0.0, 65504.0]),
    "FP32": (TensorProto.FLOAT, np.float32, "fp32_contents", [-3.4028235e38, -1.5, 1e-45, 3.4028235e38]),
    "FP64": (TensorProto.DOUBLE, np.float64, "fp64_contents", [-1.7976931348623157e308, -1.5, 5e-324, 1e308]),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    if not FW_BIN.is_file():
        pytest.skip(f"{FW_BIN} missing: run `make build`")
    root = tmp_path_factory.mktemp("dtypes")
    for name, (elem, _, _, _) in DTYPES.items():
        vi = helper.make_tensor_value_info
        g = helper.make_graph(
            [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
            name.lower(),
            [vi("INPUT0", elem, ["batch", 4])],
            [vi("OUTPUT0", elem, ["batch", 4])],
        )
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        (root / name.lower() / "1").mkdir(parents=True)
        onnx.save(model, str(root / name.lower() / "1" / "model.onnx"))
    srv = FwServer(FW_BIN, None, "--model-repository", str(root), grpc=True)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def _data(name: str) -> np.ndarray:
    _, np_dtype, _, values = DTYPES[name]
    return np.array([values, values[::-1]], dtype=np_dtype)


@pytest.mark.parametrize("name", sorted(DTYPES))
@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_http(server: FwServer, name: str, binary: bool) -> None:
    x = _data(name)
    inp = httpclient.InferInput("INPUT0", list(x.shape), name)
    inp.set_data_from_numpy(x, binary_data=binary)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    res = httpclient.InferenceServerClient(server.url).infer(name.lower(), [inp], outputs=[out])
    got = res.as_numpy("OUTPUT0")
    assert got.dtype == x.dtype and got.shape == x.shape
    assert got.tobytes() == x.tobytes()


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_grpc_raw(server: FwServer, name: str) -> None:
    x = _data(name)
    inp = grpcclient.InferInput("INPUT0", list(x.shape), name)
    inp.set_data_from_numpy(x)
    res = grpcclient.InferenceServerClient(server.grpc_url).infer(name.lower(), [inp])
    got = res.as_numpy("OUTPUT0")
    assert got.dtype == x.dtype and got.tobytes() == x.tobytes()


@pytest.mark.parametrize("name", sorted(n for n, v in DTYPES.items() if v[2] is not None))
def test_grpc_typed_contents(server: FwServer, name: str) -> None:
    """The typed fields (``uint_contents``, ``uint64_contents``, ``bool_contents``, ``fp64_contents``...): Triton's
    protocol allows them though tritonclient sends raw bytes; the answer comes back as raw bytes."""
    import grpc

    x = _data(name)
    field = DTYPES[name][2]
    req = service_pb2.ModelInferRequest(model_name=name.lower())
    t = req.inputs.add(name="INPUT0", datatype=name, shape=list(x.shape))
    getattr(t.contents, field).extend(x.flatten().tolist())
    with grpc.insecure_channel(server.grpc_url) as ch:
        resp = service_pb2_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=30)
    assert [o.name for o in resp.outputs] == ["OUTPUT0"] and list(resp.outputs[0].shape) == list(x.shape)
    got = np.frombuffer(resp.raw_output_contents[0], dtype=x.dtype).reshape(x.shape)
    assert got.tobytes() == x.tobytes()


def test_grpc_typed_contents_wrong_field(server: FwServer) -> None:
    """A typed field that is not the datatype's is refused, naming it."""
    import grpc

    req = service_pb2.ModelInferRequest(model_name="uint16")
    t = req.inputs.add(name="INPUT0", datatype="UINT16", shape=[1, 4])
    t.contents.int_contents.extend([1, 2, 3, 4])
    with grpc.insecure_channel(server.grpc_url) as ch, pytest.raises(grpc.RpcError) as e:
        service_pb2_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
