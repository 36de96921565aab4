"""Models without a batch axis through Triton's own clients (tritonclient.http and .grpc).

Starts the real ``fw`` binary on Triton's sample models that once broke it (python/fw/triton_samples.py,
built into build/models/triton by ``make models``): ``nobatch`` (x FP32 [4] -> y = x @ W, [2]) failed
every request with 500 / INTERNAL, and ``fixed_batch1`` (x [1,16] -> y = 2x) had concurrent requests
joined into [k,16], refused by ONNX Runtime and retried alone, so ``fw_batch_errors_total`` rose on a
healthy model. Also: sequence parameters are refused alike over both protocols.
"""

from __future__ import annotations

import os
import re
import shutil
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer

grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
MODELS = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models")

W = np.array([[1, 0], [0, 1], [1, 1], [2, -1]], dtype=np.float32)

# name -> (input shape, output shape, the model's function)
CASES: dict[str, tuple[list[int], list[int], Callable[[np.ndarray], np.ndarray]]] = {
    "nobatch": ([4], [2], lambda x: x @ W),
    "fixed_batch1": ([1, 16], [1, 16], lambda x: 2 * x),
}


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], FwServer]]:
    """Factory: ``serve("nobatch")`` serves the sample model under its own name, with gRPC (once per module)."""
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `go build -o bin/fw ./cmd/fw` or set FW_BIN")
    servers: dict[str, FwServer] = {}
    tmp = tmp_path_factory.mktemp("triton")

    def start(name: str) -> FwServer:
        if name not in servers:
            src = MODELS / "triton" / name / "1" / "model.onnx"
            if not src.is_file():
                pytest.skip(f"{src} missing: run `make models`")
            path = tmp / f"{name}.onnx"  # fw serve names the model after its file
            shutil.copyfile(src, path)
            srv = FwServer(FW_BIN, path, grpc=True)
            servers[name] = srv
            srv.wait_ready()
        return servers[name]

    yield start
    failures = [f"{k}: exit {code}\n{s.log()}" for k, s in servers.items() if (code := s.stop()) != 0]
    assert not failures, "fw serve did not exit cleanly on SIGTERM:\n" + "\n".join(failures)


def _input(mod, shape: list[int], x: np.ndarray):
    i = mod.InferInput("x", shape, "FP32")
    i.set_data_from_numpy(x)
    return i


def _batch_errors(srv: FwServer) -> float:
    with urllib.request.urlopen(f"http://{srv.url}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(r"^fw_batch_errors_total\{model=\"[^\"]+\",version=\"1\"\} (\S+)$", text, re.M)
    assert m, "fw_batch_errors_total missing from /metrics"
    return float(m.group(1))


@pytest.mark.parametrize("name", sorted(CASES))
def test_metadata_and_config(serve, name: str) -> None:
    """Full shapes in the metadata; max_batch_size 0, full dims and no dynamic batching in the config."""
    in_shape, out_shape, _ = CASES[name]
    srv = serve(name)
    with grpcclient.InferenceServerClient(srv.grpc_url) as c, httpclient.InferenceServerClient(srv.url) as h:
        md = c.get_model_metadata(name, as_json=True)
        assert md["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [str(d) for d in in_shape]}]
        assert md["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [str(d) for d in out_shape]}]
        assert h.get_model_metadata(name)["inputs"][0]["shape"] == in_shape
        cfg = c.get_model_config(name).config
        assert (
            cfg.max_batch_size == 0
            and list(cfg.input[0].dims) == in_shape
            and list(cfg.output[0].dims) == out_shape
        )
        assert not cfg.HasField("dynamic_batching")
        hc = h.get_model_config(name)
        assert (
            hc["max_batch_size"] == 0 and hc["input"][0]["dims"] == in_shape and "dynamic_batching" not in hc
        )


@pytest.mark.parametrize("name", sorted(CASES))
def test_concurrent_clients_get_right_answers_and_no_batch_errors(serve, name: str) -> None:
    """16 HTTP and 16 gRPC clients at once: every answer is the model's, and no engine call fails."""
    in_shape, out_shape, f = CASES[name]
    srv = serve(name)
    before = _batch_errors(srv)
    clients, each = 16, 20

    def run(k: int) -> None:
        rng = np.random.default_rng(k)
        use_grpc = k % 2 == 1
        mod = grpcclient if use_grpc else httpclient
        with mod.InferenceServerClient(srv.grpc_url if use_grpc else srv.url) as c:
            for _ in range(each):
                x = rng.integers(-8, 8, size=in_shape).astype(np.float32)  # exact in float32
                y = c.infer(name, [_input(mod, in_shape, x)]).as_numpy("y")
                assert y.shape == tuple(out_shape)
                np.testing.assert_array_equal(y, f(x))

    with ThreadPoolExecutor(2 * clients) as pool:
        for fut in [pool.submit(run, k) for k in range(2 * clients)]:
            fut.result()
    assert _batch_errors(srv) == before == 0


def test_sequence_parameters_refused_alike(serve) -> None:
    """sequence_id / sequence_start / sequence_end: the same refusal over HTTP (400) and gRPC, every time."""
    srv = serve("nobatch")
    x = np.ones(4, dtype=np.float32)
    want = (
        'request parameters "sequence_end", "sequence_id", "sequence_start" are for stateful sequences, and '
        'model "nobatch" has no sequence batching (fw answers each request on its own); send the request without them'
    )  # tritonclient sends all three whenever sequence_id is set
    with grpcclient.InferenceServerClient(srv.grpc_url) as c, httpclient.InferenceServerClient(srv.url) as h:
        for mod, client in [(httpclient, h), (grpcclient, c)] * 5:
            with pytest.raises(InferenceServerException) as e:
                client.infer("nobatch", [_input(mod, [4], x)], sequence_id=7, sequence_start=True)
            assert want in e.value.message()
        # Without them the same request is answered.
        np.testing.assert_array_equal(c.infer("nobatch", [_input(grpcclient, [4], x)]).as_numpy("y"), x @ W)
