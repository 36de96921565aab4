"""OpenTelemetry traces from ``fw serve`` (issue #25 item 1), received by a real OpenTelemetry Collector.

The collector (build/tools/otelcol, built from the Go module proxy by scripts/fetch-otelcol.sh; FW_OTELCOL
names another) receives OTLP over gRPC and HTTP/protobuf and forwards every span, as OTLP/JSON, to a
receiver this test runs: what the test reads is what a tracing backend behind the collector gets.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer, free_port

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
MODELS = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models")
OTELCOL = Path(os.environ.get("FW_OTELCOL") or REPO / "build" / "tools" / "otelcol")

PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


class Sink:
    """The backend behind the collector: an OTLP/HTTP JSON receiver keeping every span it gets."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        self.resources: list[dict] = []
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with sink.lock:
                    for rs in body.get("resourceSpans", []):
                        attrs = {a["key"]: a["value"] for a in rs.get("resource", {}).get("attributes", [])}
                        for ss in rs.get("scopeSpans", []):
                            for sp in ss.get("spans", []):
                                sp["_resource"] = attrs
                                sink.spans.append(sp)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, pred, timeout: float = 20.0) -> list[dict]:
        """Waits until pred(spans) holds; returns the spans."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if pred(spans):
                return spans
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the collector forwarded {len(spans)} spans, not what was expected: {[s['name'] for s in spans]}"
                )
            time.sleep(0.1)

    def clear(self) -> None:
        with self.lock:
            self.spans.clear()


@pytest.fixture(scope="module")
def collector(tmp_path_factory) -> Iterator[tuple[Sink, int, int]]:
    if not OTELCOL.is_file():
        if os.environ.get("FW_REQUIRE"):
            pytest.fail(f"{OTELCOL} is missing: bash scripts/fetch-otelcol.sh")
        pytest.skip(f"{OTELCOL} is missing: bash scripts/fetch-otelcol.sh")
    sink = Sink()
    grpc_port, http_port = free_port(), free_port()
    cfg = tmp_path_factory.mktemp("otelcol") / "config.yaml"
    cfg.write_text(
        json.dumps(  # JSON is YAML
            {
                "receivers": {
                    "otlp": {
                        "protocols": {
                            "grpc": {"endpoint": f"127.0.0.1:{grpc_port}"},
                            "http": {"endpoint": f"127.0.0.1:{http_port}"},
                        }
                    }
                },
                "exporters": {
                    "otlp_http": {
                        "traces_endpoint": f"http://127.0.0.1:{sink.port}/v1/traces",
                        "encoding": "json",
                        "compression": "none",
                        "sending_queue": {"enabled": False},
                    }
                },
                "service": {
                    "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["otlp_http"]}},
                    "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
                },
            }
        )
    )
    log = tmp_path_factory.mktemp("otelcol-log") / "otelcol.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(OTELCOL), "--config", str(cfg)], stdout=out, stderr=subprocess.STDOUT)
    try:
        import socket

        deadline = time.monotonic() + 30
        for port in (grpc_port, http_port):
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"the collector exited: {log.read_text()[-3000:]}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        pytest.fail(f"the collector did not listen on {port}: {log.read_text()[-3000:]}")
                    time.sleep(0.1)
        yield sink, grpc_port, http_port
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        sink.server.shutdown()


def _need(path: Path) -> None:
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: make build")
    if not path.exists():
        pytest.skip(f"{path} is missing: make models")


def _attrs(span: dict) -> dict:
    out = {}
    for a in span.get("attributes", []):
        v = a["value"]
        out[a["key"]] = next(iter(v.values())) if v else None
    return out


def _by_id(spans: list[dict]) -> dict[str, dict]:
    return {s["spanId"]: s for s in spans}


def test_http_requests_traced_over_otlp_http(collector) -> None:
    """/predict under load, exported over OTLP/HTTP: one server span per request under the caller's
    traceparent, its phases as children, and engine-call spans linked both ways with the requests."""
    sink, _, http_port = collector
    sink.clear()
    model = MODELS / "digits_mlp.onnx"
    _need(model)
    srv = FwServer(
        FW_BIN, model, "--otel-endpoint", f"http://127.0.0.1:{http_port}", "--otel-protocol", "http/protobuf",
        "--max-delay", "5ms", env={"OTEL_BSP_SCHEDULE_DELAY": "100"},
    )  # fmt: skip
    try:
        srv.wait_ready()
        n = 24
        row = [0.0] * 64

        def post(data: list, headers: dict) -> int:
            req = urllib.request.Request(
                f"http://{srv.url}/predict", json.dumps({"data": data}).encode(),
                {"Content-Type": "application/json", **headers},
            )  # fmt: skip
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code

        def one(_: int) -> int:
            return post(
                [row], {"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01", "tracestate": "vendor=x"}
            )

        with ThreadPoolExecutor(8) as ex:
            assert list(ex.map(one, range(n))) == [200] * n
        assert post([[1.0]], {"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"}) == 422
        spans = sink.wait(lambda s: sum(x["name"] == "POST /predict" for x in s) >= n + 1)
    finally:
        assert srv.stop() == 0
    servers = [s for s in spans if s["name"] == "POST /predict"]
    assert len(servers) == n + 1
    ids = _by_id(spans)
    for s in servers:
        assert s["traceId"] == PARENT_TRACE and s["parentSpanId"] == PARENT_SPAN and s["kind"] == 2  # SERVER
        a = _attrs(s)
        assert a["http.request.method"] == "POST" and a["http.route"] == "/predict"
        assert s["_resource"]["service.name"] == {"stringValue": "fw-serve"}
    ok = [s for s in servers if int(_attrs(s)["http.response.status_code"]) == 200]
    assert len(ok) == n
    for s in ok:
        assert s.get("traceState") == "vendor=x"
        assert _attrs(s)["fw.model"] == "digits_mlp"
        kids = {c["name"]: c for c in spans if c.get("parentSpanId") == s["spanId"]}
        assert set(kids) == {"decode", "queue", "infer", "encode"}, kids.keys()
        start, end = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
        for c in kids.values():
            assert c["traceId"] == PARENT_TRACE
            assert start <= int(c["startTimeUnixNano"]) <= int(c["endTimeUnixNano"]) <= end
        infer = kids["infer"]
        assert int(_attrs(infer)["fw.batch.rows"]) >= 1
        (link,) = infer["links"]
        call = ids[link["spanId"]]  # the engine call that ran it
        assert call["name"] == "engine call digits_mlp"
        assert s["spanId"] in {lk["spanId"] for lk in call["links"]}
        assert int(_attrs(call)["fw.batch.requests"]) == int(_attrs(infer)["fw.batch.requests"])
    calls = [s for s in spans if s["name"] == "engine call digits_mlp"]
    # Every traced request is linked from exactly one engine call.
    linked = [lk["spanId"] for c in calls for lk in c["links"]]
    assert sorted(linked) == sorted(s["spanId"] for s in ok)
    # The refused request (422) is not an error of the server's; no engine call.
    (refused,) = [s for s in servers if s not in ok]
    assert refused.get("status", {}).get("code", 0) != 2
    assert not [c for c in spans if c.get("parentSpanId") == refused["spanId"] and c["name"] == "queue"]


def test_grpc_calls_traced_over_otlp_grpc_by_the_environment(collector) -> None:
    """The standard environment alone (endpoint, grpc protocol, service name, resource attributes, sampler)
    configures tracing; gRPC metadata carries the caller's traceparent; a sampler of 0 with parent-based
    sampling traces exactly the requests whose caller sampled them."""
    grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
    sink, grpc_port, _ = collector
    sink.clear()
    samples = MODELS / "triton" / "simple"
    _need(samples / "config.pbtxt")
    repo = Path(os.environ.get("TMPDIR", "/tmp")) / f"fw-otel-repo-{os.getpid()}"
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(samples, repo / "simple")
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{grpc_port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_SERVICE_NAME": "scoring",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    srv = FwServer(FW_BIN, None, "--model-repository", str(repo), grpc=True, env=env)
    try:
        srv.wait_ready()
        g = grpcclient.InferenceServerClient(srv.grpc_url)

        def infer(headers: dict | None) -> None:
            ins = [
                grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            for x in ins:
                x.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
            g.infer("simple", ins, headers=headers)

        for _ in range(10):
            infer(None)  # no parent, ratio 0: not traced
        for _ in range(3):
            infer({"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"})
        infer({"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-00"})  # the caller did not sample it
        name = "inference.GRPCInferenceService/ModelInfer"
        spans = sink.wait(lambda s: sum(x["name"] == name for x in s) >= 3)
        # The traced calls' latency carries their trace as an OpenMetrics exemplar.
        req = urllib.request.Request(
            f"http://{srv.url}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        exemplars = [
            ln
            for ln in text.splitlines()
            if ln.startswith('fw_grpc_request_duration_seconds_bucket{method="ModelInfer"') and "# {" in ln
        ]
        assert exemplars and all(f'trace_id="{PARENT_TRACE}"' in ln for ln in exemplars), exemplars
        time.sleep(1)  # anything more would have arrived by now
        with sink.lock:
            spans = list(sink.spans)
    finally:
        assert srv.stop() == 0
        shutil.rmtree(repo, ignore_errors=True)
    servers = [s for s in spans if s["name"] == name]
    assert len(servers) == 3
    for s in servers:
        assert s["traceId"] == PARENT_TRACE and s["parentSpanId"] == PARENT_SPAN
        a = _attrs(s)
        assert a["rpc.system"] == "grpc" and a["rpc.method"] == "ModelInfer" and a["fw.model"] == "simple"
        assert s["_resource"]["service.name"] == {"stringValue": "scoring"}
        assert s["_resource"]["deployment.environment"] == {"stringValue": "test"}
        kids = {c["name"] for c in spans if c.get("parentSpanId") == s["spanId"]}
        assert kids == {"decode", "queue", "infer", "encode"}


def test_dashboard_requests_traced(collector, tmp_path) -> None:
    """fw dashboard traces its API (fw's own routes and MLflow's) under the caller's traceparent,
    named by route pattern, over OTLP/gRPC set by its flags."""
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: make build")
    sink, grpc_port, _ = collector
    sink.clear()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FW_")}
    env["OTEL_BSP_SCHEDULE_DELAY"] = "100"
    proc = subprocess.Popen(
        [
            str(FW_BIN), "dashboard", "--host", "127.0.0.1", "--port", str(port),
            "--experiment-dir", str(tmp_path / "exp"), "--checkpoint-dir", str(tmp_path / "ckpt"),
            "--otel-endpoint", f"http://127.0.0.1:{grpc_port}", "--otel-protocol", "grpc",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("fw dashboard did not come up")
                time.sleep(0.2)
        tp = {"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"}

        def call(method: str, path: str, body: dict | None = None) -> int:
            data = json.dumps(body).encode() if body is not None else None
            req = urllib.request.Request(
                base + path, data, {**tp, "Content-Type": "application/json"}, method=method
            )  # fmt: skip
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code

        assert call("GET", "/api/experiments") == 200
        assert call("POST", "/api/2.0/mlflow/experiments/create", {"name": "traced"}) == 200
        assert call("GET", "/api/runs/nope") == 404
        spans = sink.wait(lambda s: len([x for x in s if x["traceId"] == PARENT_TRACE]) >= 3)
    finally:
        proc.terminate()
        proc.wait(30)
    mine = {s["name"]: s for s in spans if s["traceId"] == PARENT_TRACE}
    assert {"GET /api/experiments", "POST /api/2.0/mlflow/experiments/create", "GET /api/runs/{id}"} <= set(
        mine
    ), mine.keys()
    for s in mine.values():
        assert s["parentSpanId"] == PARENT_SPAN and s["kind"] == 2
        assert s["_resource"]["service.name"] == {"stringValue": "fw-dashboard"}
    assert int(_attrs(mine["GET /api/runs/{id}"])["http.response.status_code"]) == 404
    assert _attrs(mine["GET /api/runs/{id}"])["url.path"] == "/api/runs/nope"


def test_tritons_opentelemetry_trace_flags(collector) -> None:
    """A tritonserver command line's OpenTelemetry tracing moves over unchanged: --trace-config
    mode=opentelemetry with its url, resource, rate and level send OTLP/HTTP to the collector."""
    sink, _, http_port = collector
    sink.clear()
    model = MODELS / "digits_mlp.onnx"
    _need(model)
    srv = FwServer(
        FW_BIN, model,
        "--trace-config", "mode=opentelemetry",
        "--trace-config", f"opentelemetry,url=http://127.0.0.1:{http_port}/v1/traces",
        "--trace-config", "opentelemetry,resource=test.suite=triton-flags",
        "--trace-config", "opentelemetry,bsp_schedule_delay=100",
        "--trace-config", "rate=1",
        "--trace-config", "level=TIMESTAMPS",
    )  # fmt: skip
    try:
        srv.wait_ready()
        for _ in range(3):
            req = urllib.request.Request(
                f"http://{srv.url}/predict",
                json.dumps({"data": [[0.0] * 64]}).encode(),
                {"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200
        spans = sink.wait(lambda s: sum(x["name"] == "POST /predict" for x in s) >= 3)
    finally:
        assert srv.stop() == 0
    servers = [s for s in spans if s["name"] == "POST /predict"]
    assert all(s["_resource"]["test.suite"] == {"stringValue": "triton-flags"} for s in servers)
