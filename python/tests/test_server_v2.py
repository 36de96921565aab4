"""The Open Inference Protocol (KServe V2) of ``fw serve``, driven by Triton's own HTTP client.

Starts the real ``fw`` binary (FW_BIN, default <repo>/bin/fw: ``go build -o bin/fw ./cmd/fw``)
on the reference models (FW_MODELS_DIR, default <repo>/build/models: ``make models``) and
checks tritonclient.http against the test vectors embedded in the model files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer

from fw import metadata

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
MODELS = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models")


@pytest.fixture(scope="module")
def fw_serve() -> Iterator[Callable[[str], FwServer]]:
    """Factory: ``fw_serve("digits_mlp.onnx")`` starts (once per module) and returns a ready server.

    At the end every server gets SIGTERM and must exit 0.
    """
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `go build -o bin/fw ./cmd/fw` or set FW_BIN")
    if not (MODELS / "manifest.json").is_file():
        pytest.skip(f"reference models missing in {MODELS}: run `make models` or set FW_MODELS_DIR")
    servers: dict[str, FwServer] = {}

    def start(model_file: str) -> FwServer:
        if model_file not in servers:
            srv = FwServer(FW_BIN, MODELS / model_file)
            servers[model_file] = srv
            srv.wait_ready()
        return servers[model_file]

    yield start
    failures = []
    for name, srv in servers.items():
        code = srv.stop()
        if code != 0:
            failures.append(f"{name}: exit code {code}\n{srv.log()}")
    assert not failures, "fw serve did not exit cleanly on SIGTERM:\n" + "\n".join(failures)


def _test_vector(model_file: str) -> tuple[dict, dict, float, float]:
    tv = metadata.read(MODELS / model_file)["test_vector"]
    ins = {k: metadata.decode_tensor(v) for k, v in tv["inputs"].items()}
    outs = {k: metadata.decode_tensor(v) for k, v in tv["outputs"].items()}
    return ins, outs, tv["atol"], tv["rtol"]


@pytest.fixture(scope="module")
def digits(fw_serve) -> Iterator[tuple[FwServer, httpclient.InferenceServerClient]]:
    srv = fw_serve("digits_mlp.onnx")
    client = httpclient.InferenceServerClient(url=srv.url)
    yield srv, client
    client.close()


def test_health_and_metadata(digits) -> None:
    _, client = digits
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("digits_mlp")
    assert client.is_model_ready("digits_mlp", model_version="1")
    assert not client.is_model_ready("no_such_model")
    server = client.get_server_metadata()
    assert server["name"] == "fw"
    assert "binary_tensor_data" in server["extensions"]
    md = client.get_model_metadata("digits_mlp")
    assert md["name"] == "digits_mlp"
    assert md["versions"] == ["1"]
    assert md["platform"] == "onnxruntime_onnx"
    assert md["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}]
    assert md["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]


@pytest.mark.parametrize("binary_in", [True, False], ids=["bin-in", "json-in"])
@pytest.mark.parametrize("binary_out", [True, False, None], ids=["bin-out", "json-out", "default-out"])
def test_infer_digits(digits, binary_in: bool, binary_out: bool | None) -> None:
    _, client = digits
    ins, outs, atol, rtol = _test_vector("digits_mlp.onnx")
    x = ins["input"]
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary_in)
    requested = (
        None if binary_out is None else [httpclient.InferRequestedOutput("logits", binary_data=binary_out)]
    )
    result = client.infer("digits_mlp", [inp], outputs=requested, request_id="r-1")
    got = result.as_numpy("logits")
    assert got is not None and got.dtype == np.float32
    np.testing.assert_allclose(got, outs["logits"], atol=atol, rtol=rtol)
    resp = result.get_response()
    assert resp["model_name"] == "digits_mlp"
    assert resp["id"] == "r-1"
    # tritonclient asks for binary outputs when it requests none.
    binary = binary_out is not False
    assert ("binary_data_size" in resp["outputs"][0].get("parameters", {})) == binary


@pytest.mark.parametrize("binary_in", [True, False], ids=["bin-in", "json-in"])
def test_infer_textcls_int64(fw_serve, binary_in: bool) -> None:
    srv = fw_serve("textcls.onnx")
    ins, outs, atol, rtol = _test_vector("textcls.onnx")
    x = ins["tokens"]
    assert x.dtype == np.int64
    with httpclient.InferenceServerClient(url=srv.url) as client:
        md = client.get_model_metadata("textcls")
        assert md["inputs"][0]["datatype"] == "INT64"
        inp = httpclient.InferInput("tokens", list(x.shape), "INT64")
        inp.set_data_from_numpy(x, binary_data=binary_in)
        result = client.infer(
            "textcls", [inp], outputs=[httpclient.InferRequestedOutput("logits", binary_data=not binary_in)]
        )
        np.testing.assert_allclose(result.as_numpy("logits"), outs["logits"], atol=atol, rtol=rtol)


@pytest.mark.parametrize("request_alg", [None, "gzip", "deflate"])
@pytest.mark.parametrize("response_alg", [None, "gzip", "deflate"])
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_compression(
    digits, monkeypatch, request_alg: str | None, response_alg: str | None, binary: bool
) -> None:
    """tritonclient's request_compression_algorithm and response_compression_algorithm: the body goes out
    compressed (gzip, or zlib for deflate), the answer comes back compressed as asked (64 rows: over the
    1 KiB below which fw does not bother) and decodes to what the uncompressed call returns."""
    _, client = digits
    ins, _, _, _ = _test_vector("digits_mlp.onnx")
    x = np.resize(ins["input"], (64, 64)).astype(np.float32)

    def infer(**kw) -> np.ndarray:
        inp = httpclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=binary)
        out = [httpclient.InferRequestedOutput("logits", binary_data=binary)]
        return client.infer("digits_mlp", [inp], outputs=out, **kw).as_numpy("logits")

    want = infer()
    sent, received = [], []
    post = client._post

    def spy_post(request_uri, request_body, headers, query_params):
        sent.append(((headers or {}).get("Content-Encoding"), bytes(request_body[:2])))
        response = post(request_uri, request_body, headers, query_params)
        received.append(response.get("Content-Encoding"))
        return response

    monkeypatch.setattr(client, "_post", spy_post)
    got = infer(request_compression_algorithm=request_alg, response_compression_algorithm=response_alg)
    np.testing.assert_array_equal(got, want)
    encoding, magic = sent[0]
    assert encoding == request_alg
    if request_alg == "gzip":
        assert magic == b"\x1f\x8b"
    elif request_alg == "deflate":
        assert magic[0] == 0x78  # zlib
    assert received == [response_alg]


def test_wrong_datatype_is_a_readable_error(digits) -> None:
    _, client = digits
    ins, _, _, _ = _test_vector("digits_mlp.onnx")
    x = ins["input"].astype(np.float64)
    inp = httpclient.InferInput("input", list(x.shape), "FP64")
    inp.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as exc:
        client.infer("digits_mlp", [inp])
    assert exc.value.status() == "400"  # Triton's status (fw's code, invalid_input, is in the body)
    text = str(exc.value)
    assert "FP64" in text and "FP32" in text, text
    assert "input" in exc.value.message()


def test_unknown_model_names_the_served_one(digits) -> None:
    _, client = digits
    with pytest.raises(InferenceServerException) as exc:
        client.get_model_metadata("resnet50")
    assert exc.value.status() == "404"
    assert "digits_mlp" in str(exc.value)
