"""Triton's status codes and sentences where Triton's clients and tests match them (issue #21).

Starts the real ``fw`` binary on a model repository made of Triton's sample models
(FW_MODELS_DIR/triton, ``make models``) and drives it with Triton's own clients (tritonclient.http
and .grpc) and raw HTTP: under /v2 a refused request is answered with Triton's status, and the
message starts with Triton's sentence (fw's explanation follows); fw's own routes keep fw's codes.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
SAMPLES = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models") / "triton"
MAX_BODY = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    """simple (INT32 [16] x2), simple_identity (BYTES, dims [1]: raw binary requests) and
    string_identity (simple_identity's file with max_batch_size 0, as Triton's string_identity)."""
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `go build -o bin/fw ./cmd/fw` or set FW_BIN")
    if not (SAMPLES / "simple_identity" / "config.pbtxt").is_file():
        pytest.skip(f"Triton sample repository missing in {SAMPLES}: run `make models`")
    repo = tmp_path_factory.mktemp("repo") / "models"
    shutil.copytree(SAMPLES / "simple", repo / "simple")
    shutil.copytree(SAMPLES / "simple_identity", repo / "simple_identity")
    cfg = repo / "simple_identity" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("dims: [ -1 ]", "dims: [ 1 ]", 1))
    (repo / "string_identity" / "1").mkdir(parents=True)
    shutil.copy(
        SAMPLES / "simple_identity" / "1" / "model.onnx", repo / "string_identity" / "1" / "model.onnx"
    )
    (repo / "string_identity" / "config.pbtxt").write_text(
        'name: "string_identity"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        'input [{ name: "INPUT0" data_type: TYPE_STRING dims: [ -1, -1 ] }]\n'
        'output [{ name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1, -1 ] }]\n'
    )
    srv = FwServer(
        FW_BIN, None, "--model-repository", str(repo), "--model-control-mode", "explicit",
        "--load-model", "*", "--http-max-input-size", str(MAX_BODY), "--max-rows", "4",
        "--allow-client-shm=true", grpc=True,
    )  # fmt: skip
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


def _post(srv: FwServer, path: str, body: bytes, **headers: str) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://{srv.url}{path}", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _simple_inputs(mod, dtype: str = "INT32") -> list:
    ins = [mod.InferInput("INPUT0", [1, 16], dtype), mod.InferInput("INPUT1", [1, 16], dtype)]
    for i in ins:
        i.set_data_from_numpy(np.ones((1, 16), dtype=np.int32 if dtype == "INT32" else np.float32))
    return ins


def test_invalid_input_is_400_under_v2(server: FwServer) -> None:
    c = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as e:
        c.infer("simple", _simple_inputs(httpclient, "FP32"))
    assert e.value.status() == "400" and "INPUT0" in e.value.message()
    # fw's own route keeps 422.
    code, body = _post(
        server, "/predict?model=simple", b'{"data": [[1]]}', **{"Content-Type": "application/json"}
    )
    assert code == 422 and body["error"]["code"] == "invalid_input"


def test_body_limits_answer_tritons_sentences(server: FwServer) -> None:
    data = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 1], "data": ["A" * MAX_BODY]}]}
    ).encode()
    code, body = _post(
        server, "/v2/models/simple_identity/infer", data, **{"Content-Type": "application/json"}
    )
    assert code == 400 and body["code"] == "payload_too_large"
    assert body["error"].startswith(
        f"request JSON size of {len(data)} bytes exceeds the maximum allowed input size of {MAX_BODY} bytes. "
        "Use --http-max-input-size to increase the limit."
    ), body
    code, body = _post(
        server,
        "/v2/models/simple_identity/infer",
        b"\0" * (MAX_BODY + 1),
        **{"Inference-Header-Content-Length": "0"},
    )
    assert code == 400 and body["error"].startswith(
        "Raw input has a byte_size (1048577 bytes) that exceeds the maximum allowed value"
    )
    padded = b'{"inputs": []' + b" " * (2 * MAX_BODY) + b"}"
    code, body = _post(
        server, "/v2/models/simple/infer", gzip.compress(padded), **{"Content-Encoding": "gzip"}
    )
    assert code == 400 and body["error"].startswith(
        f"Decompressed data size exceeds the maximum allowed value of {MAX_BODY} bytes."
    )
    # Triton's generate route, which fw does not serve: the size is refused first.
    code, body = _post(server, "/v2/models/simple/generate", data, **{"Content-Type": "application/json"})
    assert code == 400 and body["error"].startswith("request JSON size of ")


def test_chunked_body_of_too_many_chunks(server: FwServer) -> None:
    host, port = server.url.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: localhost\r\nInference-Header-Content-Length: 0\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + b"1\r\nA\r\n" * 70000 + b"0\r\n\r\n"
        )
        answer = b""
        while chunk := s.recv(1 << 16):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert (
        b"Chunked request body exceeds maximum of 65536 non-empty chunks. Send fewer or larger HTTP chunks."
        in answer
    )


def test_raw_binary_bytes_input(server: FwServer) -> None:
    req = urllib.request.Request(
        f"http://{server.url}/v2/models/simple_identity/infer",
        data=b"427",
        headers={"Inference-Header-Content-Length": "0"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        n = int(r.headers["Inference-Header-Content-Length"])
        body = r.read()
    assert body[n + 4 :] == b"427" and int.from_bytes(body[n : n + 4], "little") == 3
    code, err = _post(
        server, "/v2/models/string_identity/infer", b"427", **{"Inference-Header-Content-Length": "0"}
    )
    assert code == 400 and err["error"].startswith(
        "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]"
    )


def test_shape_and_nesting_sentences(server: FwServer) -> None:
    def infer(shape, data) -> tuple[int, dict]:
        doc = {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": shape, "data": data}]}
        return _post(
            server,
            "/v2/models/simple_identity/infer",
            json.dumps(doc).encode(),
            **{"Content-Type": "application/json"},
        )

    code, body = infer([16, 2**60 + 2], ["a"])
    assert code == 400 and "causes total element count to exceed maximum size of" in body["error"]
    code, body = infer([2, -5], ["a"])
    assert code == 500 and body["code"] == "bad_request"
    assert body["error"].startswith(
        "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"
    )
    nested = "hello"
    for _ in range(50):
        nested = [nested]
    assert infer([1, 1], nested)[0] == 200
    for _ in range(70):
        nested = [nested]
    code, body = infer([1, 1], nested)
    assert code == 400 and body["error"].startswith("JSON nesting depth exceeds maximum allowed limit (100)")
    deep = b'{"ready":' + b"[" * 250000 + b"true" + b"]" * 250000 + b"}"
    code, body = _post(server, "/v2/repository/index", deep)
    assert code == 400 and body["error"].startswith("Invalid value for 'ready': expected a boolean")


def test_unbatched_model_takes_many_elements(server: FwServer) -> None:
    """max_batch_size 0: --max-rows (4 here) does not count its first axis (Triton's
    string_identity test sends 10,485,760 elements)."""
    n = 100_000
    c = grpcclient.InferenceServerClient(server.grpc_url)
    x = np.array([b"A"] * n, dtype=np.object_).reshape(n, 1)
    inp = grpcclient.InferInput("INPUT0", [n, 1], "BYTES")
    inp.set_data_from_numpy(x)
    out = c.infer("string_identity", [inp]).as_numpy("OUTPUT0")
    assert out.shape == (n, 1) and (out == b"A").all()


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_shared_memory_and_load_statuses(server: FwServer, proto: str) -> None:
    mod = httpclient if proto == "http" else grpcclient
    c = mod.InferenceServerClient(server.url if proto == "http" else server.grpc_url)
    internal, invalid = (
        ("500", "400") if proto == "http" else ("StatusCode.INTERNAL", "StatusCode.INVALID_ARGUMENT")
    )
    with pytest.raises(
        InferenceServerException, match=r"Unable to open shared memory region: '/fw_test_shm_missing'"
    ) as e:
        c.register_system_shared_memory("test_shm", "/fw_test_shm_missing", 0)
    assert e.value.status() == internal
    with pytest.raises(
        InferenceServerException, match="failed to register shared memory region.*invalid args"
    ) as e:
        c.register_cuda_shared_memory("cuda_c", b"", 0, 0)
    assert e.value.status() == invalid
    with pytest.raises(InferenceServerException, match="failed to poll from model repository") as e:
        c.load_model("simple", config="{}", files={"file:" + "A" * 256: b"a"})
    assert e.value.status() == internal
    assert c.is_server_live() and c.is_model_ready("simple")


def test_invalid_config_override_is_logged(server: FwServer) -> None:
    c = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException, match="failed to load"):
        c.load_model("simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}')
    assert "Invalid config override" in server.log()
    assert c.is_model_ready("simple")


def _refusals(mod) -> dict[str, tuple[list, list | None]]:
    """Requests to model simple (INPUT0, INPUT1: INT32 [-1, 16]) that break a rule of the protocol
    that does not depend on the transport, built with ``mod`` (tritonclient.http or .grpc)."""

    def inp(name: str, dtype: str = "INT32", shape: tuple[int, ...] = (1, 16)):
        i = mod.InferInput(name, list(shape), dtype)
        i.set_data_from_numpy(np.ones(shape, dtype=np.int32 if dtype == "INT32" else np.float32))
        return i

    ok = [inp("INPUT0"), inp("INPUT1")]
    return {
        "unknown input": ([*ok, inp("INPUT9")], None),
        "input twice": ([inp("INPUT0"), inp("INPUT0"), inp("INPUT1")], None),
        "input missing": ([inp("INPUT0")], None),
        "wrong datatype": ([inp("INPUT0", "FP32"), inp("INPUT1")], None),
        "too many axes": ([inp("INPUT0", shape=(1,) * 33), inp("INPUT1")], None),
        "unknown output": (ok, [mod.InferRequestedOutput("OUTPUT9")]),
        "output twice": (ok, [mod.InferRequestedOutput("OUTPUT0"), mod.InferRequestedOutput("OUTPUT0")]),
    }


def test_same_refusal_over_both_protocols(server: FwServer) -> None:
    """One request, one answer: the rules both transports share (serving/admit.go) give HTTP and
    gRPC the same message, each a client error."""
    answers: dict[str, dict[str, str]] = {}
    for proto, mod, url in (("http", httpclient, server.url), ("grpc", grpcclient, server.grpc_url)):
        c = mod.InferenceServerClient(url)
        for case, (inputs, outputs) in _refusals(mod).items():
            with pytest.raises(InferenceServerException) as e:
                c.infer("simple", inputs, outputs=outputs)
            assert e.value.status() in ("400", "StatusCode.INVALID_ARGUMENT"), (proto, case, e.value)
            answers.setdefault(case, {})[proto] = e.value.message()
    for case, by in answers.items():
        assert by["http"] == by["grpc"], (case, by)
    assert 'unknown input "INPUT9"' in answers["unknown input"]["http"]
    assert answers["input twice"]["grpc"].startswith("input 'INPUT0' already exists in request")
    assert "shape has 33 axes; at most 32" in answers["too many axes"]["grpc"]
