"""Triton's ragged batching served by ``fw serve --model-repository``, driven by tritonclient.

``allow_ragged_batch`` inputs (requests of different lengths in one batch, the model taking them as one flat
axis), every ``batch_input`` kind (the tensors the server makes from the batch it formed), ``batch_output``
``BATCH_SCATTER_WITH_INPUT_SHAPE`` (each request's part of a flat output, in the shape of its input), the
reported configuration over HTTP and gRPC, requests on one gRPC stream queued in the order they were sent, and
Triton's holding: ``max_queue_delay_microseconds`` without preferred sizes holds a batch until
``max_batch_size`` rows, unless the configuration's ``fw_hold_when_idle`` parameter says ``false``.

The models are built here with onnx, in the shapes Triton's own QA ragged models have (qa/L0_batch_input).
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
from onnx import TensorProto, helper  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from fw.triton_samples import _graph, _save  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")

# Batch input kinds, each filling one model input of the ragged model, and
# what it holds for requests of 2, 4, 1 and 3 elements (one row each).
KINDS = {
    "COUNT": ("BATCH_ELEMENT_COUNT", [2, 4, 1, 3]),
    "ENDS": ("BATCH_ACCUMULATED_ELEMENT_COUNT", [2, 6, 7, 10]),
    "STARTS": ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", [0, 2, 6, 7, 10]),
    "MAXS": ("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", [0, 0, 0, 0]),
    "FLAT": ("BATCH_ITEM_SHAPE_FLATTEN", [2, 4, 1, 3]),
}
SIZES = [2, 4, 1, 3]


def _ragged_model():
    """X [n] (ragged) and one input per batch input kind -> Y = X (scattered), and for each kind K
    OUT_K [requests, len(K)] = every row the whole of K (ones [requests,1] @ K [1,len]), and SHAPES = the
    BATCH_ITEM_SHAPE input [rows, 1] as it is."""
    vi = helper.make_tensor_value_info
    f = TensorProto.FLOAT
    ins = [vi("X", f, ["n"]), vi("SHAPES", f, ["rows", 1])] + [vi(k, f, [k.lower()]) for k in KINDS]
    outs = [vi("Y", f, ["n"]), vi("SHAPES_OUT", f, ["rows", 1])] + [
        vi("OUT_" + k, f, ["r", k.lower()]) for k in KINDS
    ]
    row = helper.make_tensor("row", TensorProto.INT64, [2], [1, -1])
    col = helper.make_tensor("col", TensorProto.INT64, [2], [-1, 1])
    nodes = [
        helper.make_node("Constant", [], ["row"], value=row),
        helper.make_node("Constant", [], ["col"], value=col),
        helper.make_node("Identity", ["X"], ["Y"]),
        helper.make_node("Identity", ["SHAPES"], ["SHAPES_OUT"]),
        helper.make_node("Div", ["COUNT", "COUNT"], ["ones"]),  # [requests] of 1
        helper.make_node("Reshape", ["ones", "col"], ["expand"]),
    ]
    for k in KINDS:
        nodes += [
            helper.make_node("Reshape", [k, "row"], [k + "_row"]),
            helper.make_node("MatMul", ["expand", k + "_row"], ["OUT_" + k]),
        ]
    return _graph("ragged", nodes, ins, outs)


def _ragged_config(name: str, max_batch: int = 4, **extra) -> dict:
    cfg = {
        "name": name,
        "platform": "onnxruntime_onnx",
        "max_batch_size": max_batch,
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1], "allow_ragged_batch": True}],
        "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]}],
        "batch_input": [
            {"kind": kind, "target_name": [k], "data_type": "TYPE_FP32", "source_input": ["X"]}
            for k, (kind, _) in KINDS.items()
        ]
        + [
            {
                "kind": "BATCH_ITEM_SHAPE",
                "target_name": ["SHAPES"],
                "data_type": "TYPE_FP32",
                "source_input": ["X"],
            }
        ],
        "batch_output": [
            {"kind": "BATCH_SCATTER_WITH_INPUT_SHAPE", "target_name": ["Y"], "source_input": ["X"]}
        ],
        "dynamic_batching": {"max_queue_delay_microseconds": 5_000_000},
    }
    cfg.update(extra)
    return cfg


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    if not FW_BIN.is_file():
        pytest.skip(f"{FW_BIN} missing: run `make build`")
    root = tmp_path_factory.mktemp("ragged_repo")
    for name in ("ragged", "ragged_nohold"):
        _save(_ragged_model(), root / name / "1" / "model.onnx")
    (root / "ragged_py" / "1").mkdir(parents=True)
    (root / "ragged_py" / "1" / "model.py").write_text(PY_MODEL)
    srv = FwServer(
        FW_BIN,
        None,
        "--model-repository",
        str(root),
        "--model-control-mode",
        "explicit",
        "--python",
        sys.executable,
        grpc=True,
    )
    try:
        srv.wait_ready()
        client = httpclient.InferenceServerClient(srv.url)
        client.load_model("ragged", config=json.dumps(_ragged_config("ragged")))
        yield srv
    finally:
        srv.stop()


PY_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        self.calls += 1
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            call = np.full((x.shape[0], 1), self.calls, dtype=np.int64)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x), pb_utils.Tensor("CALL", call)]))
        return out
"""


def _stream(server: FwServer, model: str, sizes: list[int], outputs: list[str]) -> list:
    """Sends one request per size (shape [1, size], every value the size) on one gRPC stream; returns the
    answers in order."""
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    try:
        for n in sizes:
            x = grpcclient.InferInput("X", [1, n], "FP32")
            x.set_data_from_numpy(np.full([1, n], n, np.float32))
            client.async_stream_infer(
                model, [x], outputs=[grpcclient.InferRequestedOutput(o) for o in outputs]
            )
        got = [answers.get(timeout=30) for _ in sizes]
    finally:
        client.stop_stream()
    for g in got:
        if isinstance(g, InferenceServerException):
            raise g
    return got


def _executions(server: FwServer, model: str) -> int:
    stats = httpclient.InferenceServerClient(server.url).get_inference_statistics(model)
    return int(stats["model_stats"][0]["execution_count"])


def test_stream_requests_make_one_batch_with_every_batch_input(server: FwServer) -> None:
    before = _executions(server, "ragged")
    outs = ["Y", "SHAPES_OUT"] + ["OUT_" + k for k in KINDS]
    got = _stream(server, "ragged", SIZES, outs)
    assert _executions(server, "ragged") == before + 1, "4 rows = max_batch_size: one execution"
    for i, (n, res) in enumerate(zip(SIZES, got, strict=True)):
        y = res.as_numpy("Y")
        assert y.shape == (1, n) and (y == n).all(), f"request {i}: its own X back, scattered in its shape"
        assert res.as_numpy("SHAPES_OUT").tolist() == [[float(n)]], "BATCH_ITEM_SHAPE: this row's shape"
        for k, (_, want) in KINDS.items():
            out = res.as_numpy("OUT_" + k)
            assert out.shape == (1, len(want)), f"{k}: shape {out.shape}"
            if k != "MAXS":  # its datum is its shape: [largest count]
                assert out[0].tolist() == [float(v) for v in want], f"{k}: requests queued in stream order"


def test_concurrent_http_requests_join(server: FwServer) -> None:
    before = _executions(server, "ragged")
    results: dict[int, np.ndarray] = {}

    def one(n: int) -> None:
        x = httpclient.InferInput("X", [1, n], "FP32")
        x.set_data_from_numpy(np.arange(n, dtype=np.float32).reshape(1, n) + 100 * n)
        res = httpclient.InferenceServerClient(server.url, network_timeout=30).infer("ragged", [x])
        results[n] = res.as_numpy("Y")

    threads = [threading.Thread(target=one, args=(n,)) for n in SIZES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _executions(server, "ragged") == before + 1
    for n in SIZES:
        assert results[n].tolist() == [[100.0 * n + j for j in range(n)]]


def test_configuration_and_metadata(server: FwServer) -> None:
    http = httpclient.InferenceServerClient(server.url)
    cfg = http.get_model_config("ragged")
    assert cfg["input"][0]["allow_ragged_batch"] is True
    kinds = {b["target_name"][0]: b["kind"] for b in cfg["batch_input"]}
    assert kinds["ENDS"] == "BATCH_ACCUMULATED_ELEMENT_COUNT" and kinds["SHAPES"] == "BATCH_ITEM_SHAPE"
    assert cfg["batch_output"] == [
        {"kind": "BATCH_SCATTER_WITH_INPUT_SHAPE", "target_name": ["Y"], "source_input": ["X"]}
    ]
    g = grpcclient.InferenceServerClient(server.grpc_url).get_model_config("ragged").config
    assert (
        g.input[0].allow_ragged_batch and len(g.batch_input) == 6 and g.batch_output[0].target_name == ["Y"]
    )
    meta = http.get_model_metadata("ragged")
    assert [i["name"] for i in meta["inputs"]] == ["X"], "batch inputs are the server's, not the client's"
    assert meta["inputs"][0]["shape"] == [-1, -1]


def test_hold_when_idle_can_be_turned_off(server: FwServer) -> None:
    http = httpclient.InferenceServerClient(server.url)
    cfg = _ragged_config("ragged_nohold", parameters={"fw_hold_when_idle": {"string_value": "false"}})
    http.load_model("ragged_nohold", config=json.dumps(cfg))
    try:
        x = httpclient.InferInput("X", [1, 2], "FP32")
        x.set_data_from_numpy(np.ones([1, 2], np.float32))
        started = time.monotonic()
        res = httpclient.InferenceServerClient(server.url, network_timeout=30).infer("ragged_nohold", [x])
        # Held, it would wait out the 5 s delay for 3 more rows.
        assert time.monotonic() - started < 4, "an idle engine runs a lone request at once"
        assert res.as_numpy("Y").tolist() == [[1.0, 1.0]]
    finally:
        http.unload_model("ragged_nohold")


@pytest.mark.parametrize(
    ("change", "sentence"),
    [
        ({"max_batch_size": 0}, "need max_batch_size > 0"),
        ({"batch_input": []}, 'the model\'s input "SHAPES" is missing from the configuration'),
        (
            {"batch_output": [{"target_name": ["Z"], "source_input": ["X"]}]},
            'target_name "Z" is not an output',
        ),
        (
            {
                "input": [
                    {
                        "name": "X",
                        "data_type": "TYPE_FP32",
                        "dims": [-1],
                        "allow_ragged_batch": True,
                        "reshape": {"shape": [-1]},
                    }
                ]
            },
            "reshape is not supported with ragged batching",
        ),
    ],
)
def test_refusals_say_why(server: FwServer, change: dict, sentence: str) -> None:
    http = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as e:
        http.load_model("ragged_nohold", config=json.dumps(_ragged_config("ragged_nohold", **change)))
    assert "failed to load" in str(e.value) and sentence in str(e.value)


def test_python_model_gets_requests_of_any_length_in_one_execute(server: FwServer) -> None:
    """allow_ragged_batch on a Python model: requests of different lengths share one execute, each with its own
    tensors (Triton's L0_batcher ragged case, whose model is a Python stand-in here)."""
    http = httpclient.InferenceServerClient(server.url)
    cfg = {
        "name": "ragged_py",
        "backend": "python",
        "max_batch_size": 4,
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1], "allow_ragged_batch": True}],
        "output": [
            {"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]},
            {"name": "CALL", "data_type": "TYPE_INT64", "dims": [1]},
        ],
        "dynamic_batching": {"max_queue_delay_microseconds": 5_000_000},
    }
    http.load_model("ragged_py", config=json.dumps(cfg))
    try:
        assert http.get_model_config("ragged_py")["input"][0]["allow_ragged_batch"] is True
        got = _stream(server, "ragged_py", SIZES, ["Y", "CALL"])
        calls = {int(r.as_numpy("CALL")[0][0]) for r in got}
        assert calls == {1}, "the four requests (4 rows = max_batch_size) share the first execute"
        for n, r in zip(SIZES, got, strict=True):
            assert r.as_numpy("Y").tolist() == [[float(n)] * n]
    finally:
        http.unload_model("ragged_py")
