"""Client deadlines over gRPC, as Triton's qa/L0_client_timeout and L0_grpc_state_cleanup check them.

A call past its deadline fails with DEADLINE_EXCEEDED and Triton's message "Deadline Exceeded", which
tritonclient's users and Triton's tests match, whether it is a ModelInfer call, an asynchronous one or a
stream. fw answers it itself just before the deadline: grpc-go resets the stream at the deadline without a
status, and a client reading that reset first saw "Stream removed" (about half the time, before).
"""

from __future__ import annotations

import os
import queue
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer, slow_identity_repo

grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")


ROUNDS = 4  # the race it fixes lost about half the time


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    root = slow_identity_repo(tmp_path_factory.mktemp("timeout_repo"), "TYPE_INT32", [4], 1.6, instances=4)
    srv = FwServer(FW_BIN, None, "--model-repository", str(root), "--python", sys.executable, grpc=True)
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


def _inputs() -> list:
    i = grpcclient.InferInput("INPUT0", [4], "INT32")
    i.set_data_from_numpy(np.arange(4, dtype=np.int32))
    return [i]


def test_infer_deadline(server: FwServer) -> None:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    for _ in range(ROUNDS):
        with pytest.raises(InferenceServerException, match="Deadline Exceeded") as e:
            c.infer("slow", _inputs(), client_timeout=1.0)
        assert e.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    out = c.infer("slow", _inputs(), client_timeout=10).as_numpy("OUTPUT0")  # in time: answered
    np.testing.assert_array_equal(out, np.arange(4, dtype=np.int32))


def test_async_infer_deadline(server: FwServer) -> None:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    for _ in range(ROUNDS):
        got: queue.Queue = queue.Queue()
        c.async_infer(
            "slow", _inputs(), lambda result, error, got=got: got.put((result, error)), client_timeout=1.0
        )
        result, error = got.get(timeout=10)
        assert result is None and "Deadline Exceeded" in str(error), (result, error)


def test_stream_deadline(server: FwServer) -> None:
    """Each stream past its deadline reports it once (one callback), as Triton's: the next stream
    of the same client then gets its answer, not a leftover error (qa/L0_client_timeout)."""
    c = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue = queue.Queue()
    for _ in range(ROUNDS):
        c.start_stream(lambda result, error: got.put((result, error)), stream_timeout=1.0)
        c.async_stream_infer("slow", _inputs())
        result, error = got.get(timeout=10)
        time.sleep(0.2)  # room for a second callback to come
        c.stop_stream()  # joins the stream's response thread: every callback has run
        assert result is None and "Deadline Exceeded" in str(error), (result, error)
        assert got.empty(), f"a second callback for one expired stream: {got.get()}"
    c.start_stream(lambda result, error: got.put((result, error)), stream_timeout=30)
    c.async_stream_infer("slow", _inputs())
    result, error = got.get(timeout=30)
    c.stop_stream()
    assert error is None, error
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(4, dtype=np.int32))


def test_stream_deadline_after_half_close(server: FwServer) -> None:
    """A client that half-closes its stream (stop_stream) while a request runs past the stream's
    deadline still hears of it: the stream ends with DEADLINE_EXCEEDED, not OK with the request
    never answered."""
    c = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue = queue.Queue()
    c.start_stream(lambda result, error: got.put((result, error)), stream_timeout=1.0)
    c.async_stream_infer("slow", _inputs())
    c.stop_stream()  # half-closes, then waits for the stream's end
    result, error = got.get(timeout=5)
    assert result is None and "Deadline Exceeded" in str(error), (result, error)
