"""``fw serve`` on AOTInductor packages (.pt2): the real binary over HTTP, its answers checked against
the test vectors embedded in the packages and against onnxruntime on the same models' ONNX files.

FW_BIN (default <repo>/bin/fw) and FW_MODELS_DIR (default <repo>/build/models, from `make models`).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from fwserve import FwServer

from fw import metadata

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
MODELS = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models")


@pytest.fixture(scope="module")
def serve() -> Iterator[Callable[..., FwServer]]:
    """Factory: ``serve("digits_cnn.pt2", *flags)`` starts a ready server (one per file); all must exit 0."""
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `go build -o bin/fw ./cmd/fw` or set FW_BIN")
    if not (MODELS / "digits_cnn.pt2").is_file():
        pytest.skip(f"reference packages missing in {MODELS}: run `make models` or set FW_MODELS_DIR")
    servers: dict[str, FwServer] = {}

    def start(model_file: str, *extra: str) -> FwServer:
        if model_file not in servers:
            srv = FwServer(FW_BIN, MODELS / model_file, "--threads", "1", *extra)
            servers[model_file] = srv
            srv.wait_ready()
        return servers[model_file]

    yield start
    codes = {n: s.stop() for n, s in servers.items()}
    failures = [f"{n}: exit {c}\n{servers[n].log()}" for n, c in codes.items() if c != 0]
    assert not failures, "fw serve did not exit cleanly on SIGTERM:\n" + "\n".join(failures)


def call(
    srv: FwServer, method: str, path: str, body: Any = None, ctype: str = "application/json"
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None and ctype == "application/json" else body
    req = urllib.request.Request(f"http://{srv.url}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def onnx_run(name: str, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(MODELS / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def test_model_and_test_vector(serve) -> None:
    srv = serve("digits_cnn.pt2")
    code, model = call(srv, "GET", "/model")
    assert code == 200 and model["format"] == "aoti" and model["name"] == "digits_cnn"
    assert model["inputs"][0]["shape"] == [-1, 1, 8, 8] and len(model["labels"]) == 10
    tv = metadata.read(MODELS / "digits_cnn.pt2")["test_vector"]
    x = metadata.decode_tensor(tv["inputs"]["input"])
    want = metadata.decode_tensor(tv["outputs"]["logits"])
    code, out = call(srv, "POST", "/predict", {"data": x.tolist()})
    assert code == 200, out
    got = np.asarray(out["predictions"], np.float32)
    assert np.allclose(got, want, atol=tv["atol"], rtol=tv["rtol"])
    assert out["labels"] == [str(i) for i in want.argmax(-1)]


def test_concurrent_requests_of_every_size_match_onnxruntime(serve) -> None:
    """Many clients at once: the batcher joins their rows into engine calls of varying batch sizes."""
    srv = serve("digits_cnn.pt2")
    rng = np.random.default_rng(0)
    batches = [rng.random((1 + i % 5, 1, 8, 8), dtype=np.float32) for i in range(60)]

    def one(x: np.ndarray) -> np.ndarray:
        code, out = call(srv, "POST", "/predict", {"data": x.tolist()})
        assert code == 200, out
        return np.asarray(out["predictions"], np.float32)

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(one, batches))
    for x, got in zip(batches, results, strict=True):
        assert np.allclose(got, onnx_run("digits_cnn", x), atol=1e-4, rtol=1e-3)


def test_image_endpoint(serve) -> None:
    srv = serve("digits_cnn.pt2")
    manifest = json.loads((MODELS / "manifest.json").read_text())
    for sample in [s for s in manifest["samples"] if "digits_cnn" in s.get("predictions", {})][:3]:
        data = (MODELS / sample["file"]).read_bytes()
        code, out = call(srv, "POST", "/predict/image", data, "image/png")
        assert code == 200, out
        assert out["predictions"][0]["top_k"][0]["label"] == sample["predictions"]["digits_cnn"]


def test_int64_inputs_and_bad_requests(serve) -> None:
    srv = serve("textcls.pt2")
    x = np.random.default_rng(1).integers(0, 1000, (3, 32), dtype=np.int64)
    code, out = call(srv, "POST", "/predict", {"data": x.tolist()})
    assert code == 200, out
    assert np.allclose(
        np.asarray(out["predictions"], np.float32), onnx_run("textcls", x), atol=1e-4, rtol=1e-3
    )
    # A wrong width is refused before the engine, in the documented error shape; the server lives on.
    code, out = call(srv, "POST", "/predict", {"data": [[1, 2, 3]]})
    assert 400 <= code < 500 and set(out["error"]) >= {"code", "message"}, out
    assert "[N, 32]" in out["error"]["message"] or "32" in out["error"]["message"]
    code, out = call(srv, "POST", "/predict", {"data": x[:1].tolist()})
    assert code == 200 and len(out["predictions"]) == 1
