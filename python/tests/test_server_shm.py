"""Triton's system shared memory extension of ``fw serve``, driven by tritonclient's own shm module.

As Triton's simple_{http,grpc}_shm_client examples: POSIX shared memory regions made with
``tritonclient.utils.shared_memory`` are registered, the inputs are read from them and the outputs
written into them; the status calls list them; bad offsets and sizes, unknown and doubly
registered regions are refused with the reason, and the server stays up. CUDA shared memory
answers and refuses to register on a server without a GPU. Without ``--allow-client-shm=true``
(tritonserver's option, off by default as in Triton since 2.73) registering and unregistering are
refused with Triton's sentence, as Triton's qa/L0_shared_memory checks.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer, slow_identity_repo

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
shm = pytest.importorskip(
    "tritonclient.utils.shared_memory", reason="tritonclient's shared memory module is missing"
)
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
SAMPLES = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models") / "triton"


def _simple_server(tmp_path_factory: pytest.TempPathFactory, *flags: str) -> Iterator[FwServer]:
    """fw serve on a repository of Triton's ``simple`` sample, with ``flags``."""
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    if not (SAMPLES / "simple" / "config.pbtxt").is_file():
        pytest.skip(f"Triton sample repository missing in {SAMPLES}: run `make models`")
    repo = tmp_path_factory.mktemp("shm") / "models"
    repo.mkdir()
    shutil.copytree(SAMPLES / "simple", repo / "simple")
    srv = FwServer(FW_BIN, None, "--model-repository", str(repo), *flags, grpc=True)
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    yield from _simple_server(tmp_path_factory, "--allow-client-shm=true")


def _client(server: FwServer, proto: str):
    return (
        httpclient.InferenceServerClient(server.url)
        if proto == "http"
        else grpcclient.InferenceServerClient(server.grpc_url)
    )


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_simple_shm_client(server: FwServer, proto: str) -> None:
    mod = httpclient if proto == "http" else grpcclient
    c = _client(server, proto)
    c.unregister_system_shared_memory()  # as Triton's example starts
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32) * 3
    nbytes = a.nbytes
    tag = f"{proto}_{os.getpid()}"
    out = shm.create_shared_memory_region(f"out_{tag}", f"/fw_out_{tag}", nbytes * 2)
    inp = shm.create_shared_memory_region(f"in_{tag}", f"/fw_in_{tag}", nbytes * 2)
    try:
        shm.set_shared_memory_region(inp, [a])
        shm.set_shared_memory_region(inp, [b], offset=nbytes)
        c.register_system_shared_memory(f"out_{tag}", f"/fw_out_{tag}", nbytes * 2)
        c.register_system_shared_memory(f"in_{tag}", f"/fw_in_{tag}", nbytes * 2)
        status = c.get_system_shared_memory_status()
        names = {r["name"] for r in status} if proto == "http" else set(status.regions)
        assert {f"in_{tag}", f"out_{tag}"} <= names

        ins = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]
        ins[0].set_shared_memory(f"in_{tag}", nbytes)
        ins[1].set_shared_memory(f"in_{tag}", nbytes, offset=nbytes)
        outs = [mod.InferRequestedOutput("OUTPUT0"), mod.InferRequestedOutput("OUTPUT1")]
        outs[0].set_shared_memory(f"out_{tag}", nbytes)
        outs[1].set_shared_memory(f"out_{tag}", nbytes, offset=nbytes)
        res = c.infer("simple", ins, outputs=outs)
        o0 = res.get_output("OUTPUT0")
        assert o0 is not None
        got0 = shm.get_contents_as_numpy(out, np.int32, [1, 16])
        got1 = shm.get_contents_as_numpy(out, np.int32, [1, 16], offset=nbytes)
        np.testing.assert_array_equal(got0, a + b)
        np.testing.assert_array_equal(got1, a - b)

        # Mixed: one input in shared memory, one in the request.
        ins2 = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]
        ins2[0].set_shared_memory(f"in_{tag}", nbytes)
        ins2[1].set_data_from_numpy(b * 2)
        res = c.infer("simple", ins2)
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b * 2)

        # Hostile windows: refused, the server stays up.
        bad = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]
        bad[0].set_shared_memory(f"in_{tag}", nbytes, offset=nbytes * 2)  # past the region's end
        bad[1].set_data_from_numpy(b)
        with pytest.raises(InferenceServerException, match="Invalid offset for shared memory region"):
            c.infer("simple", bad)
        bad[0].set_shared_memory(f"in_{tag}", nbytes - 4)  # size not the shape's
        with pytest.raises(InferenceServerException, match="needs 64 bytes"):
            c.infer("simple", bad)
        bad[0].set_shared_memory("never_registered", nbytes)
        with pytest.raises(InferenceServerException, match="never_registered"):
            c.infer("simple", bad)
        small = [mod.InferRequestedOutput("OUTPUT0")]
        small[0].set_shared_memory(f"out_{tag}", nbytes - 1)
        with pytest.raises(InferenceServerException, match="more than shared_memory_byte_size"):
            c.infer("simple", ins, outputs=small)
        with pytest.raises(InferenceServerException, match="already in manager"):
            c.register_system_shared_memory(f"in_{tag}", f"/fw_in_{tag}", nbytes)
        with pytest.raises(InferenceServerException, match="beyond"):
            c.register_system_shared_memory(f"big_{tag}", f"/fw_in_{tag}", nbytes * 3)
        with pytest.raises(InferenceServerException, match="POSIX shared memory name"):
            c.register_system_shared_memory(f"etc_{tag}", "/../../etc/passwd", 16)
        with pytest.raises(
            InferenceServerException, match="Unable to open shared memory region: '/fw_missing_"
        ):
            c.register_system_shared_memory(f"missing_{tag}", f"/fw_missing_{tag}", 16)
        assert c.is_server_live()
    finally:
        c.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(out)
        shm.destroy_shared_memory_region(inp)
    status = c.get_system_shared_memory_status()
    assert (len(status) if proto == "http" else len(status.regions)) == 0


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_cuda_shared_memory_answers_without_gpu(server: FwServer, proto: str) -> None:
    c = _client(server, proto)
    status = c.get_cuda_shared_memory_status()
    assert (len(status) if proto == "http" else len(status.regions)) == 0
    c.unregister_cuda_shared_memory()
    with pytest.raises(InferenceServerException, match="CUDA shared memory is not available"):
        c.register_cuda_shared_memory("gpu_region", b"\0" * 64, 0, 64)


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    yield from _simple_server(tmp_path_factory)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_client_shm_disabled_by_default(default_server: FwServer, proto: str) -> None:
    c = _client(default_server, proto)
    tag = f"off_{proto}_{os.getpid()}"
    region = shm.create_shared_memory_region(tag, f"/fw_{tag}", 8)
    try:
        before = c.get_system_shared_memory_status()
        assert (len(before) if proto == "http" else len(before.regions)) == 0
        for call in (
            lambda: c.register_system_shared_memory(tag, f"/fw_{tag}", 8),
            lambda: c.unregister_system_shared_memory(tag),
            lambda: c.unregister_system_shared_memory(),
            lambda: c.register_cuda_shared_memory("gpu_region", b"\0" * 64, 0, 64),
            lambda: c.unregister_cuda_shared_memory(),
        ):
            with pytest.raises(InferenceServerException, match="Client shared memory is disabled") as e:
                call()
            assert "--allow-client-shm=true" in str(e.value)
        assert c.get_system_shared_memory_status() == before
    finally:
        shm.destroy_shared_memory_region(region)


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    root = slow_identity_repo(tmp_path_factory.mktemp("shm-slow"), "TYPE_FP32", [16], 1.5)
    srv = FwServer(
        FW_BIN,
        None,
        "--model-repository",
        str(root),
        "--allow-client-shm=true",
        "--python",
        sys.executable,
        grpc=True,
    )
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_unregister_during_inference(slow_server: FwServer, proto: str) -> None:
    """As Triton's TestSharedMemoryUnregister: regions unregistered while a request uses them stay
    registered (listed, written into) until it has answered, then are gone."""
    c = _client(slow_server, proto)
    mod = httpclient if proto == "http" else grpcclient
    tag = f"slow_{proto}_{os.getpid()}"
    x = np.arange(16, dtype=np.float32)
    inp = shm.create_shared_memory_region(f"in_{tag}", f"/fw_in_{tag}", 64)
    out = shm.create_shared_memory_region(f"out_{tag}", f"/fw_out_{tag}", 64)
    try:
        shm.set_shared_memory_region(inp, [x])
        c.register_system_shared_memory(f"in_{tag}", f"/fw_in_{tag}", 64)
        c.register_system_shared_memory(f"out_{tag}", f"/fw_out_{tag}", 64)
        i = mod.InferInput("INPUT0", [16], "FP32")
        i.set_shared_memory(f"in_{tag}", 64)
        o = mod.InferRequestedOutput("OUTPUT0")
        o.set_shared_memory(f"out_{tag}", 64)
        # The request runs in a thread of its own, with its own client (tritonclient's HTTP
        # async_infer only sends when the caller yields to gevent).
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(lambda: _client(slow_server, proto).infer("slow", [i], outputs=[o]))
            time.sleep(0.7)  # the request is in the model (1.5 s)
            c.unregister_system_shared_memory()
            status = c.get_system_shared_memory_status()
            assert (len(status) if proto == "http" else len(status.regions)) == 2, status
            pending.result(timeout=30)
        got = shm.get_contents_as_numpy(out, np.float32, [16])
        np.testing.assert_array_equal(got, x)
        status = c.get_system_shared_memory_status()
        assert (len(status) if proto == "http" else len(status.regions)) == 0, status
    finally:
        c.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(out)
        shm.destroy_shared_memory_region(inp)
