"""Triton's trace extension (issue #21's L0 runs, issue #25 item 4): GET/POST /v2[/models/{m}]/trace/setting
and the TraceSetting gRPC call drive the sampler, and sampled requests land in Triton's JSON trace files.

Starts the real ``fw`` binary with tritonserver's trace flags on a repository of Triton's sample model
``simple`` and drives it with Triton's own clients (tritonclient.http and .grpc).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
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


@pytest.fixture()
def traced(tmp_path: Path) -> Iterator[tuple[FwServer, Path]]:
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `go build -o bin/fw ./cmd/fw` or set FW_BIN")
    if not (SAMPLES / "simple" / "config.pbtxt").is_file():
        pytest.skip(f"Triton sample repository missing in {SAMPLES}: run `make models`")
    repo = tmp_path / "models"
    shutil.copytree(SAMPLES / "simple", repo / "simple")
    trace = tmp_path / "trace.json"
    srv = FwServer(
        FW_BIN, None, "--model-repository", str(repo),
        "--trace-config", f"triton,file={trace}", "--trace-config", "triton,log-frequency=0",
        "--trace-config", "rate=1", "--trace-config", "level=OFF", grpc=True,
    )  # fmt: skip
    srv.wait_ready()
    yield srv, trace
    srv.stop()


def _infer(c, mod, n: int) -> None:
    for i in range(n):
        ins = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]
        for x in ins:
            x.set_data_from_numpy(np.full((1, 16), i, dtype=np.int32))
        c.infer("simple", ins, request_id=f"req{i}")


def test_trace_settings_and_files(traced: tuple[FwServer, Path]) -> None:
    srv, trace = traced
    h = httpclient.InferenceServerClient(srv.url)
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    assert "trace" in h.get_server_metadata()["extensions"]
    s = h.get_trace_settings()
    assert s["trace_level"] == ["OFF"] and s["trace_rate"] == "1" and s["trace_file"] == str(trace)
    # Both clients' update calls as Triton's own tests make them (no settings).
    h.update_trace_settings()
    g.update_trace_settings()
    assert g.get_trace_settings(as_json=True)["settings"]["trace_rate"]["value"] == ["1"]
    # Off: nothing traced.
    _infer(h, httpclient, 3)
    # A model's own rate, over gRPC; the server's level turned on over HTTP.
    m = g.update_trace_settings(
        model_name="simple", settings={"trace_rate": "2", "log_frequency": "3"}, as_json=True
    )
    assert m["settings"]["trace_rate"]["value"] == ["2"]
    h.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
    assert h.get_trace_settings(model_name="simple")["trace_level"] == ["TIMESTAMPS"]
    _infer(h, httpclient, 6)  # requests 2, 4, 6 traced: three traces, one file
    first = json.loads((trace.parent / "trace.json.0").read_text())
    headers = [o for o in first if "model_name" in o]
    assert [o["request_id"] for o in headers] == ["req1", "req3", "req5"]
    assert all(o["model_name"] == "simple" and o["model_version"] == 1 for o in headers)
    stamps = [o["timestamps"][0]["name"] for o in first if o["id"] == headers[0]["id"] and "timestamps" in o]
    assert stamps == [
        "REQUEST_START",
        "QUEUE_START",
        "COMPUTE_START",
        "COMPUTE_END",
        "INFER_RESPONSE_COMPLETE",
        "REQUEST_END",
    ]
    # The count: two more traces, then none; gRPC requests are traced too.
    h.update_trace_settings(model_name="simple", settings={"trace_count": "2", "log_frequency": None})
    _infer(g, grpcclient, 10)
    assert h.get_trace_settings(model_name="simple")["trace_count"] == "0"
    second = json.loads((trace.parent / "trace.json.1").read_text())
    assert len([o for o in second if "model_name" in o]) == 2
    # Refusals, with Triton's sentences.
    for mod_client, bad, match in (
        (
            h,
            {"trace_file": "/tmp/elsewhere"},
            "trace file location can not be updated through network protocol",
        ),
        (h, {"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF' is specified"),
        (g, {"trace_rate": "fast"}, "Unable to parse 'trace_rate', got: fast"),
        (g, {"trace_count": "-5"}, "Expecting value >= -1"),
    ):
        with pytest.raises(InferenceServerException, match=match):
            mod_client.update_trace_settings(settings=bad)
    with pytest.raises(InferenceServerException, match="unknown model"):
        h.get_trace_settings(model_name="nope")


def test_traces_written_at_shutdown(traced: tuple[FwServer, Path]) -> None:
    srv, trace = traced
    h = httpclient.InferenceServerClient(srv.url)
    h.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "2"})
    _infer(h, httpclient, 5)
    assert not trace.exists()  # log_frequency 0: written when the server stops
    assert srv.stop() == 0
    traces = json.loads(trace.read_text())
    assert [o["request_id"] for o in traces if "model_name" in o] == ["req1", "req3"]


def test_empty_level_list_and_null_body_are_refused(traced: tuple[FwServer, Path]) -> None:
    srv, _ = traced
    import urllib.error
    import urllib.request

    for body, said in ((b'{"trace_level": []}', "empty array"), (b"null", "JSON object")):
        req = urllib.request.Request(
            f"http://{srv.url}/v2/trace/setting", data=body, method="POST",
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        assert e.value.code == 400 and said in json.loads(e.value.read())["error"]


def test_stream_requests_are_numbered_in_stream_order(traced: tuple[FwServer, Path]) -> None:
    """A gRPC stream's requests are decoded concurrently; their trace IDs still follow the stream, as Triton
    numbers a trace when its request arrives (L0_batcher's timestamp checks sort traces by ID)."""
    srv, trace = traced
    h = httpclient.InferenceServerClient(srv.url)
    h.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    answers: queue.Queue = queue.Queue()
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    g.start_stream(callback=lambda result, error: answers.put(error or result))
    try:
        for i in range(16):
            ins = [
                grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            for x in ins:
                x.set_data_from_numpy(np.full((1, 16), i, dtype=np.int32))
            g.async_stream_infer("simple", ins, request_id=f"s{i}")
        for _ in range(16):
            assert not isinstance(answers.get(timeout=30), InferenceServerException)
    finally:
        g.stop_stream()
    assert srv.stop() == 0
    headers = sorted((o for o in json.loads(trace.read_text()) if "model_name" in o), key=lambda o: o["id"])
    assert [o["request_id"] for o in headers] == [f"s{i}" for i in range(16)]
