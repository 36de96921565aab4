"""BYTES (string) tensors and Triton's classification extension, driven by tritonclient 2.73.

As Triton's simple_{http,grpc}_string_infer_client, simple_*_shm_string_client and image_client
examples: the sample repository's ``simple_string`` (integers as strings, their sum and
difference back as strings) and ``simple_identity`` (BYTES in, the same bytes out) over HTTP
(JSON and binary data), gRPC and system shared memory; ``class_count`` on a requested output
answers Triton's ``value:index[:label]`` strings, with a repository's ``label_filename`` or a
model file's own labels, and on ``densenet_onnx`` as image_client.py asks for it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
shm = pytest.importorskip(
    "tritonclient.utils.shared_memory", reason="tritonclient's shared memory module is missing"
)
from tritonclient.utils import InferenceServerException, serialize_byte_tensor  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
MODELS = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models")
SAMPLES = MODELS / "triton"
LABELS = [f"label_{i}" for i in range(10)]  # fewer than simple's 16 elements: the rest have none


def _need(path: Path) -> None:
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    if not path.exists():
        pytest.skip(f"{path} missing: run `make models`")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    _need(SAMPLES / "simple_string" / "config.pbtxt")
    repo = tmp_path_factory.mktemp("bytes") / "models"
    repo.mkdir()
    for name in ("simple_string", "simple_identity", "densenet_onnx"):
        shutil.copytree(SAMPLES / name, repo / name)
    # Triton's simple with a label file on OUTPUT0, as densenet_onnx has on its output.
    shutil.copytree(SAMPLES / "simple", repo / "simple_labels")
    cfg = (repo / "simple_labels" / "config.pbtxt").read_text()
    cfg = cfg.replace('name: "simple"', 'name: "simple_labels"', 1).replace(
        'name: "OUTPUT0"\n    data_type: TYPE_INT32',
        'name: "OUTPUT0"\n    data_type: TYPE_INT32\n    label_filename: "labels.txt"',
        1,
    )
    assert "label_filename" in cfg
    (repo / "simple_labels" / "config.pbtxt").write_text(cfg)
    (repo / "simple_labels" / "labels.txt").write_text("".join(f"{label}\n" for label in LABELS))
    srv = FwServer(FW_BIN, None, "--model-repository", str(repo), "--allow-client-shm=true", grpc=True)
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    _need(MODELS / "digits_mlp.onnx")
    srv = FwServer(FW_BIN, MODELS / "digits_mlp.onnx", grpc=True)
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


def _client(server: FwServer, proto: str):
    if proto == "grpc":
        return grpcclient, grpcclient.InferenceServerClient(server.grpc_url)
    return httpclient, httpclient.InferenceServerClient(server.url)


def _set(mod, inp, array: np.ndarray, binary: bool) -> None:
    if mod is httpclient:
        inp.set_data_from_numpy(array, binary_data=binary)
    else:
        inp.set_data_from_numpy(array)


def _out(mod, name: str, binary: bool, **kw):
    if mod is httpclient:
        return httpclient.InferRequestedOutput(name, binary_data=binary, **kw)
    return grpcclient.InferRequestedOutput(name, **kw)


def _datatype(r, name: str) -> str:
    o = r.get_output(name)
    return o["datatype"] if isinstance(o, dict) else o.datatype


def _bytes(a: np.ndarray) -> list[bytes]:
    """Elements as bytes whatever tritonclient returned (str for HTTP JSON, bytes otherwise)."""
    return [x.encode() if isinstance(x, str) else bytes(x) for x in a.flatten()]


@pytest.mark.parametrize("proto,binary", [("http", False), ("http", True), ("grpc", True)])
def test_simple_string(server: FwServer, proto: str, binary: bool) -> None:
    mod, c = _client(server, proto)
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), -7, dtype=np.int32)
    as_bytes = lambda x: np.array([str(v).encode() for v in x.flatten()], dtype=np.object_).reshape(x.shape)  # noqa: E731
    ins = [mod.InferInput("INPUT0", [2, 16], "BYTES"), mod.InferInput("INPUT1", [2, 16], "BYTES")]
    _set(mod, ins[0], as_bytes(a), binary)
    _set(mod, ins[1], as_bytes(b), binary)
    outs = [_out(mod, "OUTPUT0", binary), _out(mod, "OUTPUT1", binary)]
    r = c.infer("simple_string", ins, outputs=outs)
    assert _datatype(r, "OUTPUT0") == "BYTES"
    got0 = np.array([int(x) for x in _bytes(r.as_numpy("OUTPUT0"))]).reshape(2, 16)
    got1 = np.array([int(x) for x in _bytes(r.as_numpy("OUTPUT1"))]).reshape(2, 16)
    np.testing.assert_array_equal(got0, a + b)
    np.testing.assert_array_equal(got1, a - b)
    meta = (
        c.get_model_metadata("simple_string")
        if proto == "http"
        else c.get_model_metadata("simple_string", as_json=True)
    )
    assert {t["datatype"] for t in meta["inputs"] + meta["outputs"]} == {"BYTES"}
    cfg = (
        c.get_model_config("simple_string")
        if proto == "http"
        else c.get_model_config("simple_string", as_json=True)["config"]
    )
    assert cfg["input"][0]["data_type"] == "TYPE_STRING"


@pytest.mark.parametrize("proto,binary", [("http", False), ("http", True), ("grpc", True)])
def test_simple_identity(server: FwServer, proto: str, binary: bool) -> None:
    mod, c = _client(server, proto)
    elems = ["", "plain", "é 😀", "x" * 70000, "tab\there", '"quoted\\"']
    raw = [e.encode() for e in elems]
    if binary:
        raw += [b"\xff\xfe not UTF-8", b"\x80"]
    x = np.array(raw, dtype=np.object_).reshape(2, len(raw) // 2)
    inp = mod.InferInput("INPUT0", list(x.shape), "BYTES")
    _set(mod, inp, x, binary)
    r = c.infer("simple_identity", [inp], outputs=[_out(mod, "OUTPUT0", binary)])
    assert list(r.as_numpy("OUTPUT0").shape) == list(x.shape)
    assert _bytes(r.as_numpy("OUTPUT0")) == raw


@pytest.mark.parametrize("proto,binary", [("http", False), ("http", True), ("grpc", True)])
def test_nul_bytes_round_trip(server: FwServer, proto: str, binary: bool) -> None:
    """As Triton's simple_{http,grpc}_string_infer_client: elements holding NUL bytes ("he\\x00llo",
    4-byte blobs 0x00010203, a lone NUL) and empty ones come back from simple_identity unchanged,
    in JSON as in binary data. fw refused them before (ONNX Runtime's C strings would cut them)."""
    mod, c = _client(server, proto)
    raw = [b"he\x00llo", b"\x00\x01\x02\x03", b"", b"\x00", b"end\x00", b"\x00" * 1000]
    x = np.array(raw, dtype=np.object_).reshape(2, 3)
    inp = mod.InferInput("INPUT0", [2, 3], "BYTES")
    _set(mod, inp, x, binary)
    r = c.infer("simple_identity", [inp], outputs=[_out(mod, "OUTPUT0", binary)])
    assert list(r.as_numpy("OUTPUT0").shape) == [2, 3]
    assert _bytes(r.as_numpy("OUTPUT0")) == raw
    # The example's np.bytes_ array of 16 blobs (fixed-width elements).
    blobs = np.array([b"\x00\x01\x02\x03"] * 16, dtype=np.bytes_).reshape(1, 16)
    inp = mod.InferInput("INPUT0", [1, 16], "BYTES")
    _set(mod, inp, blobs, binary)
    r = c.infer("simple_identity", [inp], outputs=[_out(mod, "OUTPUT0", binary)])
    assert _bytes(r.as_numpy("OUTPUT0")) == [b"\x00\x01\x02\x03"] * 16


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_bytes_refusals(server: FwServer, proto: str) -> None:
    mod, c = _client(server, proto)
    inp = mod.InferInput("INPUT0", [1, 1], "INT32")
    inp.set_data_from_numpy(np.zeros((1, 1), np.int32))
    with pytest.raises(InferenceServerException, match="this model takes BYTES"):
        c.infer("simple_identity", [inp])
    assert c.is_server_live()


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_bytes_shared_memory(server: FwServer, proto: str) -> None:
    mod, c = _client(server, proto)
    x = np.array([b"shm", b"", b"\xffbytes", "é".encode()], dtype=np.object_).reshape(2, 2)
    serialized = serialize_byte_tensor(x)
    size = len(serialized.item())
    tag = f"b{proto}_{os.getpid()}"
    inp_region = shm.create_shared_memory_region(f"in_{tag}", f"/fw_in_{tag}", size)
    out_region = shm.create_shared_memory_region(f"out_{tag}", f"/fw_out_{tag}", 4096)
    try:
        shm.set_shared_memory_region(inp_region, [serialized])
        c.register_system_shared_memory(f"in_{tag}", f"/fw_in_{tag}", size)
        c.register_system_shared_memory(f"out_{tag}", f"/fw_out_{tag}", 4096)
        inp = mod.InferInput("INPUT0", [2, 2], "BYTES")
        inp.set_shared_memory(f"in_{tag}", size)
        out = mod.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory(f"out_{tag}", 4096)
        r = c.infer("simple_identity", [inp], outputs=[out])
        o = r.get_output("OUTPUT0")
        params = (
            o["parameters"]
            if proto == "http"
            else {k: v.int64_param for k, v in o.parameters.items() if k.endswith("size")}
        )
        assert params["shared_memory_byte_size"] == size
        got = shm.get_contents_as_numpy(out_region, np.object_, [2, 2])
        assert _bytes(got) == _bytes(x)
        # A window too small for the output is refused with the reason.
        small = mod.InferRequestedOutput("OUTPUT0")
        small.set_shared_memory(f"out_{tag}", size - 1)
        with pytest.raises(InferenceServerException, match="shared_memory_byte_size"):
            c.infer("simple_identity", [inp], outputs=[small])
    finally:
        c.unregister_system_shared_memory(f"in_{tag}")
        c.unregister_system_shared_memory(f"out_{tag}")
        shm.destroy_shared_memory_region(inp_region)
        shm.destroy_shared_memory_region(out_region)


@pytest.mark.parametrize("proto,binary", [("http", False), ("http", True), ("grpc", True)])
def test_classification_with_label_file(server: FwServer, proto: str, binary: bool) -> None:
    mod, c = _client(server, proto)
    a = (np.arange(16, dtype=np.int32) * 5 % 16).reshape(1, 16)  # a permutation of 0..15
    b = np.ones((1, 16), dtype=np.int32)
    ins = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]
    _set(mod, ins[0], a, binary)
    _set(mod, ins[1], b, binary)
    outs = [_out(mod, "OUTPUT0", binary, class_count=4), _out(mod, "OUTPUT1", binary)]
    r = c.infer("simple_labels", ins, outputs=outs)
    assert _datatype(r, "OUTPUT0") == "BYTES"
    classes = _bytes(r.as_numpy("OUTPUT0"))
    assert r.as_numpy("OUTPUT0").shape == (1, 4)
    want = []
    for idx in np.argsort(-(a + b)[0], kind="stable")[:4]:
        s = f"{(a + b)[0][idx]}:{idx}"
        want.append((s + f":{LABELS[idx]}" if idx < len(LABELS) else s).encode())
    assert classes == want
    # image_client.py's parsing: value, index, label.
    value, index, *label = classes[0].decode().split(":")
    assert int(value) == 16 and (a + b)[0][int(index)] == 16
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)  # the raw output beside it


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_classification_with_model_labels(digits: FwServer, proto: str) -> None:
    mod, c = _client(digits, proto)
    x = np.random.default_rng(0).random((3, 64), dtype=np.float32)
    inp = mod.InferInput("input", [3, 64], "FP32")
    inp.set_data_from_numpy(x)
    raw = c.infer("digits_mlp", [inp]).as_numpy("logits")
    r = c.infer("digits_mlp", [inp], outputs=[mod.InferRequestedOutput("logits", class_count=20)])
    got = r.as_numpy("logits")
    assert got.shape == (3, 10)  # clamped to the 10 classes, as Triton does
    for row in range(3):
        value, index, label = _bytes(got[row])[0].decode().split(":")
        assert int(index) == int(np.argmax(raw[row])) and label == index  # digits_mlp's labels are "0".."9"
        assert value == f"{raw[row].max():.6f}"


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_classification_refused_for_bytes(server: FwServer, proto: str) -> None:
    mod, c = _client(server, proto)
    inp = mod.InferInput("INPUT0", [1, 1], "BYTES")
    _set(mod, inp, np.array([[b"a"]], dtype=np.object_), True)
    with pytest.raises(InferenceServerException, match="class result not available"):
        c.infer("simple_identity", [inp], outputs=[mod.InferRequestedOutput("OUTPUT0", class_count=1)])


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_image_client_classification(server: FwServer, proto: str) -> None:
    """Triton's image_client.py on densenet_onnx: no batch axis, a reshaped output, its label file."""
    mod, c = _client(server, proto)
    x = np.random.default_rng(1).random((3, 224, 224), dtype=np.float32)
    inp = mod.InferInput("data_0", [3, 224, 224], "FP32")
    inp.set_data_from_numpy(x)
    raw = c.infer("densenet_onnx", [inp]).as_numpy("fc6_1")
    r = c.infer("densenet_onnx", [inp], outputs=[mod.InferRequestedOutput("fc6_1", class_count=3)])
    got = r.as_numpy("fc6_1")
    assert got.shape == (3,)
    for k, idx in enumerate(np.argsort(-raw.ravel(), kind="stable")[:3]):
        value, index, label = _bytes(got)[k].decode().split(":")
        assert (int(index), label, value) == (idx, f"CLASS_{idx:04d}", f"{raw.ravel()[idx]:.6f}")
