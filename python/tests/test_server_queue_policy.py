"""Triton's dynamic batcher queue settings served by ``fw serve --model-repository``, driven by tritonclient.

``dynamic_batching`` with ``priority_levels``, ``default_priority_level``, ``default_queue_policy`` and
``priority_queue_policy`` (max_queue_size, default_timeout_microseconds, allow_timeout_override, timeout_action
REJECT / DELAY), and ``preferred_batch_size`` cutting a batch at a preferred size: the request parameters
``priority`` and ``timeout`` that tritonclient sends (HTTP and gRPC), Triton's sentences ("Request timeout
expired", "Exceeds maximum queue size"), the failure metric's REJECTED reason, and Triton's load refusals.

The model is a Python model whose single instance runs one request at a time: a request whose first value is
negative holds it for that many seconds, so the requests sent meanwhile queue. Each answer carries the
instance's execute count, the order the queue let requests through.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer, free_port

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
METRICS_PORT = free_port()

SLOW = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        self.calls += 1
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if x.flat[0] < 0:
                time.sleep(-float(x.flat[0]))
            order = np.full((x.shape[0], 1), self.calls, dtype=np.int64)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("ORDER", order)]))
        return out
"""

BASE = {
    "backend": "python",
    "max_batch_size": 1,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
    "output": [
        {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]},
        {"name": "ORDER", "data_type": "TYPE_INT64", "dims": [1]},
    ],
    "instance_group": [{"kind": "KIND_CPU", "count": 1}],
}

HOLD = 1.5  # seconds the first request holds the instance


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    if not FW_BIN.is_file():
        pytest.skip(f"{FW_BIN} missing: run `make build`")
    root = tmp_path_factory.mktemp("queue_repo")
    (root / "slow" / "1").mkdir(parents=True)
    (root / "slow" / "1" / "model.py").write_text(SLOW)
    (root / "slow" / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 1\n')
    srv = FwServer(
        FW_BIN,
        None,
        "--metrics-port",
        str(METRICS_PORT),
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
        yield srv
    finally:
        srv.stop()


def _load(server: FwServer, dynamic_batching: dict, max_batch_size: int = 1) -> None:
    cfg = dict(BASE, max_batch_size=max_batch_size, dynamic_batching=dynamic_batching)
    httpclient.InferenceServerClient(server.url).load_model("slow", config=json.dumps(cfg))


def _infer(server: FwServer, protocol: str, value: float, rows: int = 1, **kw) -> tuple[int, float]:
    """One request of ``rows`` rows; returns the instance's execute count for it and when it was answered."""
    x = np.full((rows, 1), value, dtype=np.float32)
    if protocol == "http":
        client = httpclient.InferenceServerClient(server.url, network_timeout=30)
        inp = httpclient.InferInput("INPUT0", [rows, 1], "FP32")
    else:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        inp = grpcclient.InferInput("INPUT0", [rows, 1], "FP32")
    inp.set_data_from_numpy(x)
    res = client.infer("slow", [inp], **kw)
    return int(res.as_numpy("ORDER")[0][0]), time.monotonic()


def _held(server: FwServer, protocol: str, pool: ThreadPoolExecutor) -> Future:
    """Start a request holding the instance for HOLD seconds; returns once it runs."""
    f = pool.submit(_infer, server, protocol, -HOLD)
    time.sleep(0.3)  # it reaches the instance; what follows queues behind it
    return f


def _failures(reason: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(
        rf'nv_inference_request_failure\{{model="slow",reason="{reason}",version="1"\}} (\d+)', text
    )
    return int(m.group(1)) if m else 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_priority_levels(server: FwServer, protocol: str) -> None:
    """Level 1 runs before the default level 2 queued before it; a level the model lacks takes the default."""
    _load(server, {"priority_levels": 2, "default_priority_level": 2, "max_queue_delay_microseconds": 0})
    with ThreadPoolExecutor(8) as pool:
        held = _held(server, protocol, pool)
        low = pool.submit(_infer, server, protocol, 1.0)  # no priority: the default level 2
        time.sleep(0.1)
        unknown = pool.submit(_infer, server, protocol, 2.0, priority=7)  # no level 7: level 2
        time.sleep(0.1)
        high = pool.submit(_infer, server, protocol, 3.0, priority=1)
        first = held.result()[0]
        order = {name: f.result()[0] for name, f in (("low", low), ("unknown", unknown), ("high", high))}
    assert order == {"high": first + 1, "low": first + 2, "unknown": first + 3}, order
    # The configuration reports them, over both protocols.
    http_db = httpclient.InferenceServerClient(server.url).get_model_config("slow")["dynamic_batching"]
    assert (http_db["priority_levels"], http_db["default_priority_level"]) == (2, 2), http_db
    grpc_db = (
        grpcclient.InferenceServerClient(server.grpc_url).get_model_config("slow").config.dynamic_batching
    )
    assert (grpc_db.priority_levels, grpc_db.default_priority_level) == (2, 2), grpc_db


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_queue_timeout_rejects(server: FwServer, protocol: str) -> None:
    """REJECT: a request still queued at its timeout is answered UNAVAILABLE "Request timeout expired" then, before
    the request holding the instance finishes; the failure counts as REJECTED."""
    _load(server, {"default_queue_policy": {"default_timeout_microseconds": 200000}})
    before = _failures("REJECTED")
    with ThreadPoolExecutor(4) as pool:
        held = _held(server, protocol, pool)
        with pytest.raises(InferenceServerException) as e:
            _infer(server, protocol, 1.0)
        refused_at = time.monotonic()
        _, held_done = held.result()
    assert "Request timeout expired" in e.value.message(), e.value
    if protocol == "grpc":
        assert e.value.status() == "StatusCode.UNAVAILABLE"
    else:
        assert e.value.status() == "503"
    assert refused_at < held_done, "the timeout was answered only when the instance freed"
    assert _failures("REJECTED") == before + 1


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_timeout_override(server: FwServer, protocol: str) -> None:
    """allow_timeout_override: a request's own ``timeout`` (microseconds) shortens the policy's, never lengthens it."""
    _load(
        server,
        {"default_queue_policy": {"default_timeout_microseconds": 30000000, "allow_timeout_override": True}},
    )
    with ThreadPoolExecutor(4) as pool:
        held = _held(server, protocol, pool)
        with pytest.raises(InferenceServerException, match="Request timeout expired"):
            _infer(server, protocol, 1.0, timeout=100000)
        # Longer than the policy's 30 s: the policy's holds, so it waits for the instance and runs.
        longer = pool.submit(_infer, server, protocol, 2.0, timeout=60000000)
        first = held.result()[0]
        assert longer.result()[0] == first + 1


def test_timeout_delay(server: FwServer) -> None:
    """DELAY: a request past its timeout is not failed; it runs after the requests that are not past theirs."""
    policy = {
        "timeout_action": "DELAY",
        "default_timeout_microseconds": 30000000,
        "allow_timeout_override": True,
    }
    _load(server, {"default_queue_policy": policy})
    with ThreadPoolExecutor(4) as pool:
        held = _held(server, "grpc", pool)
        late = pool.submit(_infer, server, "grpc", 1.0, timeout=100000)
        time.sleep(0.4)  # past its own 100 ms: delayed
        later = pool.submit(_infer, server, "http", 2.0)
        first = held.result()[0]
        assert later.result()[0] == first + 1
        assert late.result()[0] == first + 2


def test_max_queue_size_per_level(server: FwServer) -> None:
    """Each level's max_queue_size, with Triton's "Exceeds maximum queue size"; another level still queues."""
    _load(
        server,
        {
            "priority_levels": 2,
            "default_priority_level": 2,
            "default_queue_policy": {"max_queue_size": 1},
            "priority_queue_policy": {"1": {"max_queue_size": 2}},
        },
    )
    with ThreadPoolExecutor(8) as pool:
        held = _held(server, "grpc", pool)
        queued = [pool.submit(_infer, server, "grpc", 1.0)]
        time.sleep(0.1)
        with pytest.raises(InferenceServerException, match="Exceeds maximum queue size") as e:
            _infer(server, "http", 2.0)
        assert e.value.status() == "503"
        queued += [pool.submit(_infer, server, "grpc", 3.0, priority=1) for _ in range(2)]
        time.sleep(0.2)
        with pytest.raises(InferenceServerException, match="Exceeds maximum queue size") as e:
            _infer(server, "grpc", 4.0, priority=1)
        assert e.value.status() == "StatusCode.UNAVAILABLE"
        held.result()
        assert sorted(f.result()[0] for f in queued)[-1] == held.result()[0] + 3


def test_preferred_batch_size_cuts(server: FwServer) -> None:
    """preferred_batch_size [4, 8]: requests adding up to 4 rows run at once, though max_queue_delay is 10 s."""
    _load(
        server,
        {"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 10000000},
        max_batch_size=32,
    )
    start = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(_infer, server, "grpc", 1.0, rows=2)
        b = pool.submit(_infer, server, "http", 2.0, rows=2)
        assert a.result()[0] == b.result()[0]  # one execute
    assert time.monotonic() - start < 5, "a preferred batch waited for max_queue_delay"


@pytest.mark.parametrize(
    ("dynamic_batching", "sentence"),
    [
        ({"priority_levels": 3}, r"default priority level must be in range \[1, 3\] for slow"),
        (
            {"priority_levels": 3, "default_priority_level": 5},
            r"default priority level must be in range \[1, 3\]",
        ),
        (
            {"priority_levels": 3, "default_priority_level": 2, "priority_queue_policy": {"4": {}}},
            r"priority queue policy must have priority level in range \[1, 3\] for slow",
        ),
        ({"priority_queue_policy": {"1": {}}}, "priority_queue_policy needs priority_levels"),
    ],
)
def test_refused_configurations(server: FwServer, dynamic_batching: dict, sentence: str) -> None:
    """Triton's L0_model_config refusals, in its sentences, after "failed to load"."""
    with pytest.raises(InferenceServerException, match="failed to load") as e:
        _load(server, dynamic_batching)
    assert re.search(sentence, e.value.message()), e.value.message()


def test_extreme_values_load(server: FwServer) -> None:
    """Triton's L0_config_json max_priority_level: the largest levels and timeouts load and serve."""
    _load(
        server,
        {
            "priority_levels": 18446744073709551615,
            "default_priority_level": 4294967295,
            "priority_queue_policy": {
                "4294967296": {
                    "timeout_action": "REJECT",
                    "default_timeout_microseconds": 18446744073709551615,
                    "allow_timeout_override": True,
                    "max_queue_size": 10,
                }
            },
        },
    )
    assert _infer(server, "grpc", 1.0, priority=4294967296)[0] >= 1
    policy = (
        grpcclient.InferenceServerClient(server.grpc_url).get_model_config("slow").config.dynamic_batching
    )
    assert policy.priority_queue_policy[4294967296].default_timeout_microseconds == 18446744073709551615
    assert _infer(server, "http", 1.0)[0] >= 1
