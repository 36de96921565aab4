"""A real Prometheus scrapes a real fw serve and fw dashboard; deploy/'s rules and dashboard run on it.

* ``promtool check rules`` and ``promtool test rules`` on the chart's rule file
  (deploy/helm/fw/files/prometheus-rules.yaml and its unit tests: every alert firing and not);
* Debian's ``prometheus`` (2.42), on 127.0.0.1 with a temporary TSDB, scraping ``fw serve``
  (digits MLP) and ``fw dashboard`` (SQLite in a temporary directory) every second while
  predictions and ingested events flow, with the same rule file loaded; then through its HTTP
  API: both targets up, fw's series there, every rule evaluated without error and every
  recording rule producing series, no alert firing on this healthy pair;
* every PromQL expression of the Grafana dashboard (files/grafana-dashboard.json) and of the
  chart's KEDA triggers executed against it: no error, and a result for each.

All processes are stopped at the end (SIGTERM, then SIGKILL after a timeout).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from fwserve import free_port  # noqa: E402
from openapi_check import FW_BIN, MODELS, launch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "deploy" / "helm" / "fw" / "files"
RULES = FILES / "prometheus-rules.yaml"
DASHBOARD_JSON = FILES / "grafana-dashboard.json"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        pytest.skip(f"{name} is not installed: Debian's prometheus package has it (scripts/system-deps.sh)")
    return path


def _rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


# ----------------------------------------------------------------------------- promtool


def test_promtool_check_rules():
    out = subprocess.run(
        [_tool("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_promtool_unit_tests():
    out = subprocess.run(
        [_tool("promtool"), "test", "rules", "prometheus-rules.test.yaml"],
        cwd=FILES,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_unit_tests_show_every_alert_firing_and_not():
    alerts = {r["alert"] for r in _rules() if "alert" in r}
    assert alerts >= {
        "FwServeQueueSaturated",
        "FwServeErrorRatioHigh",
        "FwServeLatencyP99High",
        "FwServeReplicaNotReady",
        "FwDashboardIngestLagHigh",
    }
    fired, quiet = set(), set()
    for t in yaml.safe_load((FILES / "prometheus-rules.test.yaml").read_text())["tests"]:
        for a in t.get("alert_rule_test", []):
            (fired if a["exp_alerts"] else quiet).add(a["alertname"])
    assert fired == alerts, alerts - fired
    assert quiet == alerts, alerts - quiet


def test_promtool_unit_tests_catch_a_broken_rule(tmp_path):
    """The unit tests fail when a rule is wrong (here: the saturation threshold raised)."""
    broken = RULES.read_text().replace(
        "instance:fw_queue_saturation:ratio > 0.8", "instance:fw_queue_saturation:ratio > 0.9"
    )
    assert broken != RULES.read_text()
    (tmp_path / "prometheus-rules.yaml").write_text(broken)
    shutil.copy(FILES / "prometheus-rules.test.yaml", tmp_path)
    out = subprocess.run(
        [_tool("promtool"), "test", "rules", "prometheus-rules.test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0 and "FwServeQueueSaturated" in out.stdout + out.stderr


# ----------------------------------------------------------------------------- the live stack


class Stack:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.stop_traffic = threading.Event()
        self.errors: list[str] = []
        self.traced: set[str] = set()  # trace IDs sent as the callers of traced predictions
        self.spans_received = 0
        self.sink: ThreadingHTTPServer | None = None

    def get(self, url: str) -> dict:
        with urllib.request.urlopen(url, timeout=30) as r:
            return json.loads(r.read())

    def post(self, url: str, body: object, headers: dict | None = None) -> int:
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def query(self, expr: str) -> list[dict]:
        doc = self.get(f"{self.prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert doc["status"] == "success", (expr, doc)
        return doc["data"]["result"]

    def traffic(self) -> None:
        """Predictions (and a few refused ones) and ingested events, until stopped."""
        row = [0.5] * 64
        step = 0
        while not self.stop_traffic.is_set():
            step += 1
            try:
                headers = {}
                if step % 5 == 0:  # a caller that traces this request: fw's span joins its trace
                    trace_id = f"{0xF00D0000 + step:032x}"
                    self.traced.add(trace_id)
                    headers["traceparent"] = f"00-{trace_id}-00f067aa0ba902b7-01"
                if self.post(f"{self.serve}/predict", {"data": [row] * (1 + step % 4)}, headers) != 200:
                    self.errors.append("a prediction failed")
                if step % 10 == 0:
                    self.post(f"{self.serve}/predict", {"data": [[1.0]]})  # 422: a client error, not a 5xx
                if step % 3 == 0:
                    t = (datetime.now(timezone.utc) - timedelta(milliseconds=150)).isoformat()
                    ev = {
                        "type": "metrics",
                        "run_id": "r1",
                        "seq": 1 + step,
                        "step": step,
                        "values": {"loss": 1 / step},
                        "time": t,
                    }
                    if self.post(f"{self.dashboard}/api/ingest", [ev]) != 200:
                        self.errors.append("an ingest failed")
            except OSError as e:
                self.errors.append(str(e))
            self.stop_traffic.wait(0.1)

    def stop(self) -> None:
        self.stop_traffic.set()
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                    self.errors.append(f"{name} did not stop on SIGTERM")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    prometheus = _tool("prometheus")
    if not FW_BIN.exists():
        pytest.skip(f"{FW_BIN} is missing: build it with `make build` (or set FW_BIN)")
    model = MODELS / "digits_mlp.onnx"
    if not model.exists():
        pytest.skip(f"{model} is missing: make models")
    tmp = tmp_path_factory.mktemp("observability")
    s = Stack(tmp)
    stack_ref = s

    class Sink(BaseHTTPRequestHandler):
        """fw serve's OTLP/HTTP receiver here: it takes the spans (test_otel.py checks them)."""

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            stack_ref.spans_received += 1
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    s.sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=s.sink.serve_forever, daemon=True).start()
    try:
        s.serve, proc, _ = launch(
            [
                "serve",
                "--model",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--threads",
                "1",
                "--max-queue",
                "64",
                # Traced: the requests whose caller traced them (parent-based, ratio 0 otherwise).
                "--otel-endpoint",
                f"http://127.0.0.1:{s.sink.server_address[1]}",
                "--otel-sample-rate",
                "0",
            ],
            {"OTEL_BSP_SCHEDULE_DELAY": "500"},
        )
        s.procs.append(("fw serve", proc))
        env = {
            "FW_EXPERIMENT_DIR": str(tmp / "experiments"),
            "FW_CHECKPOINT_DIR": str(tmp / "checkpoints"),
            "FW_PYTHON": sys.executable,  # training jobs on (fw_dashboard_jobs): the recipes load through it
        }
        s.dashboard, proc, _ = launch(["dashboard", "--host", "127.0.0.1", "--port", "0"], env, cwd=tmp)
        s.procs.append(("fw dashboard", proc))
        assert (
            s.post(
                f"{s.dashboard}/api/ingest",
                [{"type": "run_start", "run_id": "r1", "seq": 1, "experiment": "obs"}],
            )
            == 200
        )
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": "fw-serve", "static_configs": [{"targets": [s.serve.removeprefix("http://")]}]},
                {
                    "job_name": "fw-dashboard",
                    "static_configs": [{"targets": [s.dashboard.removeprefix("http://")]}],
                },
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        s.prom = f"http://127.0.0.1:{port}"
        log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115 (closed with the process, below)
        proc = subprocess.Popen(
            [
                prometheus,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
                "--enable-feature=exemplar-storage",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        s.procs.append(("prometheus", proc))
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{s.prom}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not come up:\n{(tmp / 'prometheus.log').read_text()[-3000:]}")
            time.sleep(0.2)
        threading.Thread(target=s.traffic, daemon=True).start()
        # Until both targets are up and rates over the traffic exist (a few scrapes).
        deadline = time.monotonic() + 90
        while not (
            s.query('up{job=~"fw-serve|fw-dashboard"} == 1').__len__() == 2
            and s.query("job:fw_predict_latency_seconds:p99_5m > 0")
            and s.query("job:fw_dashboard_ingest_lag_seconds:p99_5m > 0")
        ):
            if time.monotonic() > deadline:
                pytest.fail(f"no series after 90 s: targets {s.get(s.prom + '/api/v1/targets')}")
            time.sleep(0.5)
        yield s
    finally:
        s.stop()
        s.sink.shutdown()
        assert not s.errors, s.errors


def test_latency_exemplars_lead_to_traces(stack):
    """Traced requests' trace IDs are exemplars of fw's latency histogram, scraped and kept by a real
    Prometheus (OpenMetrics): a slow bucket in Grafana leads to the caller's trace."""
    deadline = time.monotonic() + 60
    while True:
        end = time.time()
        q = urllib.parse.urlencode(
            {
                "query": 'fw_http_request_duration_seconds_bucket{job="fw-serve",endpoint="predict"}',
                "start": end - 600,
                "end": end,
            }
        )
        doc = stack.get(f"{stack.prom}/api/v1/query_exemplars?{q}")
        assert doc["status"] == "success", doc
        ids = {e["labels"].get("trace_id") for series in doc["data"] for e in series["exemplars"]}
        if ids and stack.spans_received:
            break
        if time.monotonic() > deadline:
            pytest.fail(f"no exemplars after 60 s (spans posted: {stack.spans_received}): {doc}")
        time.sleep(1)
    # Every exemplar is one of the traces a caller started: untraced requests leave none.
    assert ids <= stack.traced, ids - stack.traced
    # Prometheus' exemplars carry the bucket they fell in and the observed latency.
    e = doc["data"][0]["exemplars"][0]
    assert 0 < float(e["value"]) < 30


def _value(sample: dict) -> float:
    return float(sample["value"][1])


def test_prometheus_scrapes_fw_serve_and_dashboard(stack):
    targets = stack.get(f"{stack.prom}/api/v1/targets")["data"]["activeTargets"]
    assert {t["labels"]["job"]: t["health"] for t in targets} == {"fw-serve": "up", "fw-dashboard": "up"}
    names = set(stack.get(f"{stack.prom}/api/v1/label/__name__/values")["data"])
    for name in (
        "fw_http_requests_total",
        "fw_http_request_duration_seconds_bucket",
        "fw_queue_depth",
        "fw_queue_capacity",
        "fw_inference_duration_seconds_bucket",
        "fw_batch_size_rows_bucket",
        "fw_rows_total",
        "fw_ready",
        "fw_model_info",
        "fw_dashboard_http_requests_total",
        "fw_dashboard_ingest_events_total",
        "fw_dashboard_ingest_lag_seconds_bucket",
        "fw_dashboard_info",
        "fw_dashboard_cpu_percent",
    ):
        assert name in names, f"{name} was not scraped"
    (ready,) = stack.query('fw_ready{job="fw-serve"}')
    assert _value(ready) == 1
    (cap,) = stack.query("fw_queue_capacity")
    assert _value(cap) == 64, "fw serve --max-queue 64"
    (info,) = stack.query("fw_model_info")
    assert info["metric"]["name"] == "digits_mlp" and info["metric"]["format"] == "onnx"
    refused = stack.query('fw_http_requests_total{endpoint="predict",code="422"}')
    assert refused and _value(refused[0]) >= 1
    applied = stack.query('fw_dashboard_ingest_events_total{result="applied"}')
    assert applied and _value(applied[0]) >= 2


def test_rules_evaluate_on_fws_real_series(stack):
    groups = stack.get(f"{stack.prom}/api/v1/rules")["data"]["groups"]
    loaded = {r["name"]: r for g in groups for r in g["rules"]}
    want = {r.get("record") or r.get("alert") for r in _rules()}
    assert set(loaded) == want
    bad = {n: r.get("lastError") for n, r in loaded.items() if r["health"] != "ok"}
    assert not bad, bad
    for r in _rules():
        if "record" in r:
            got = stack.query(r["record"])
            assert got, f"recording rule {r['record']} produced nothing"
    (ratio,) = stack.query("job:fw_predict_error_ratio:rate5m")
    assert _value(ratio) == 0, "no 5xx were answered (the 422s are client errors)"
    (ready,) = stack.query("job:fw_ready:sum")
    assert _value(ready) == 1
    lag = stack.query("job:fw_dashboard_ingest_lag_seconds:p99_5m")
    assert 0.1 <= _value(lag[0]) < 30, "events are stamped 150 ms before they are sent"
    firing = [
        a for a in stack.get(f"{stack.prom}/api/v1/alerts")["data"]["alerts"] if a["state"] != "inactive"
    ]
    assert not firing, f"alerts on a healthy fw serve and dashboard: {firing}"


def _grafana_targets() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD_JSON.read_text())
    out = []
    for p in doc["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return out


def _interpolate(expr: str) -> str:
    """What Grafana sends for this Prometheus: all namespaces, this stack's jobs."""
    for var, value in (
        ("$__rate_interval", "15s"),
        ("$namespace", ".*"),
        ("$serve", "fw-serve"),
        ("$dashboard", "fw-dashboard"),
    ):
        expr = expr.replace(var, value)
    assert "$" not in expr, f"an unknown Grafana variable in {expr}"
    return expr


def test_grafana_dashboard_is_well_formed():
    doc = json.loads(DASHBOARD_JSON.read_text())
    assert doc["uid"] and doc["title"] and doc["schemaVersion"] >= 36
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert variables == {"datasource", "namespace", "serve", "dashboard"}
    for p in doc["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
    assert len(_grafana_targets()) >= 20


def test_every_grafana_query_runs_on_fws_series(stack):
    for title, expr in _grafana_targets():
        result = stack.query(_interpolate(expr))
        assert result, f"panel {title!r}: {expr} returned nothing"
        values = [s["value"][1] for s in result]
        assert any(v not in ("NaN", "+Inf", "-Inf") for v in values), f"panel {title!r}: only {values}"
    # The template variables' queries (Grafana's label_values) against the same API.
    doc = json.loads(DASHBOARD_JSON.read_text())
    for v in doc["templating"]["list"]:
        if v["type"] != "query":
            continue
        q = v["query"]["query"]
        metric, label = q.removeprefix("label_values(").removesuffix(")").rsplit(", ", 1)
        metric = _interpolate(metric)
        got = stack.get(
            f"{stack.prom}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": metric})
        )
        assert got["status"] == "success", (q, got)
        if label == "job":
            assert got["data"] in (["fw-serve"], ["fw-dashboard"]), (q, got["data"])


def test_keda_triggers_query_fws_series(stack):
    """The chart's ScaledObject queries, with the selector this Prometheus's labels need, answer
    a number: what KEDA's Prometheus scaler would read."""
    import test_deploy

    docs = test_deploy.render({"serve.autoscaling.keda.selector": 'job="fw-serve"'})
    (so,) = [d for d in docs if d["kind"] == "ScaledObject"]
    for t in so["spec"]["triggers"]:
        result = stack.query(t["metadata"]["query"])
        assert len(result) == 1, (t["name"], result)
        value = _value(result[0])
        assert value == value and value >= 0, (t["name"], value)  # not NaN
        if t["name"] == "latency":
            assert value > 0, "predictions are flowing: the p99 is a real latency"


def test_prometheus_api_reports_a_bad_query(stack):
    """The checks above would see a broken expression: Prometheus answers it with an error."""
    url = f"{stack.prom}/api/v1/query?" + urllib.parse.urlencode({"query": "sum(rate(fw_rows_total[5m]"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url, timeout=30)
    assert e.value.code == 400
    assert not stack.query("fw_no_such_metric")
