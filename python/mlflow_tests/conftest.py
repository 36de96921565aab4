"""MLflow's own client against a real ``fw dashboard`` (FW_BIN, default <repo>/bin/fw).

Run with the MLflow venv (``bash scripts/setup-mlflow-venv.sh`` prints its python)::

    cd python/mlflow_tests && FW_BIN=../../bin/fw ~/.cache/fw/mlflow-venv/bin/python -m pytest -x -q

Each test gets its own dashboard (fresh store, artifact and checkpoint dirs under tmp_path) on a free
loopback port, with MLFLOW_TRACKING_URI (and, for fw.track, FW_TRACKING_URI) pointing at it. MLflow's
process-wide state (active runs, active experiment, tracking URI, async logging) is reset after every
test, and the dashboard is always stopped (SIGTERM, then SIGKILL).

FW_REQUIRE=1 (as in python/tests): a test that would skip (no fw binary, no mlflow) fails instead.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw").resolve()
# fw.track is stdlib-only: importable from the source tree without installing fw into this venv.
if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))

# MLflow's env vars that would point a test somewhere else or leak state between tests.
_MLFLOW_ENV = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_EXPERIMENT_ID",
    "MLFLOW_EXPERIMENT_NAME",
    "MLFLOW_RUN_ID",
    "MLFLOW_ENABLE_ASYNC_LOGGING",
    "MLFLOW_REGISTRY_URI",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HTTPReply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"HTTP {self.status}: {self.body[:2000]!r}"


class Dashboard:
    """A real `fw dashboard` process and a small client for fw's own API (/api/...)."""

    def __init__(self, root: Path, token: str | None = None) -> None:
        self.root = root
        self.token = token
        self.dirs = {
            "FW_EXPERIMENT_DIR": str(root / "experiments"),
            "FW_CHECKPOINT_DIR": str(root / "checkpoints"),
            "FW_ARTIFACT_DIR": str(root / "artifacts"),
        }
        self.log_path = root / "dashboard.log"
        self.port = 0
        self.url = ""
        self.proc: subprocess.Popen | None = None

    # -- process -----------------------------------------------------------------------------

    def start(self) -> Dashboard:
        if not FW_BIN.exists():
            pytest.skip(f"{FW_BIN} is missing: build it with `go build -o bin/fw ./cmd/fw` (or set FW_BIN)")
        for _ in range(3):  # the free port may be taken between choosing it and the bind
            self.port = _free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            # None of the caller's FW_* settings (a database URL, another port, a UI dir, recipes):
            # SQLite in tmp_path, loopback, the token only when this dashboard has one.
            env = {k: v for k, v in os.environ.items() if not k.startswith("FW_")}
            if os.environ.get("FW_PYTHON"):  # the Python with torch that export jobs run, on fw's source
                env["FW_PYTHON"] = os.environ["FW_PYTHON"]
                env["PYTHONPATH"] = os.pathsep.join(
                    filter(None, [str(REPO / "python"), env.get("PYTHONPATH")])
                )
            env.update(self.dirs)
            if self.token:
                env["FW_DASHBOARD_TOKEN"] = self.token
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [
                        str(FW_BIN),
                        "dashboard",
                        "--port",
                        str(self.port),
                        "--spool-interval",
                        "200ms",
                        "--shutdown-timeout",
                        "5s",
                    ],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                        if r.status == 200:
                            return self
                except OSError:
                    time.sleep(0.05)
            else:
                self.stop(check=False)
                raise RuntimeError(f"fw dashboard never became ready:\n{self.log_tail()}")
            self.proc = None
            if "address already in use" not in self.log_tail():
                raise RuntimeError(f"fw dashboard exited at start:\n{self.log_tail()}")
        raise RuntimeError(f"fw dashboard found no free port:\n{self.log_tail()}")

    def stop(self, check: bool = True) -> None:
        """Stop the process (SIGTERM, then SIGKILL). With check, a dashboard that had already died
        during the test is an error (its log tail says why)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        died = proc.poll()
        if died is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        if check and died is not None:
            raise AssertionError(f"fw dashboard died during the test (exit {died}):\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    # -- HTTP ----------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None | bool = True,
        headers: dict[str, str] | None = None,
    ) -> HTTPReply:
        """One request; never raises on an HTTP error status. token=True sends the dashboard's
        token (if it has one), None/False sends none, a string sends that."""
        h = dict(headers or {})
        tok = self.token if token is True else (token or None)
        if tok:
            h["Authorization"] = f"Bearer {tok}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return HTTPReply(r.status, dict(r.headers), r.read())
        except urllib.error.HTTPError as e:
            return HTTPReply(e.code, dict(e.headers), e.read())

    def get(self, path: str) -> Any:
        """GET on fw's API; anything but 200 fails the test with the answer."""
        r = self.request("GET", path)
        assert r.status == 200, f"GET {path}: {r!r}"
        return r.json()

    def run(self, run_id: str) -> dict:
        return self.get(f"/api/runs/{run_id}")

    def experiment(self, id_or_name: str) -> dict:
        return self.get(f"/api/experiments/{urllib.parse.quote(id_or_name, safe='')}")

    def experiments(self) -> list[dict]:
        out: list[dict] = []
        cursor = ""
        while True:
            page = self.get(
                "/api/experiments?limit=1000" + (f"&cursor={urllib.parse.quote(cursor)}" if cursor else "")
            )
            out += page["experiments"]
            cursor = page.get("next") or ""
            if not cursor:
                return out

    def runs(self, experiment: str, filter: str = "") -> list[dict]:
        """Every run of an experiment as fw's GET /api/experiments/{id or name}/runs pages them."""
        out: list[dict] = []
        cursor = ""
        base = f"/api/experiments/{urllib.parse.quote(experiment, safe='')}/runs?limit=3"
        if filter:
            base += "&filter=" + urllib.parse.quote(filter)
        while True:
            page = self.get(base + (f"&cursor={urllib.parse.quote(cursor)}" if cursor else ""))
            out += page["runs"]
            cursor = page.get("next") or ""
            if not cursor:
                return out

    def points(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """The raw (step, value) points of a metric key, from fw's GET /api/runs/{id}/metrics."""
        q = urllib.parse.urlencode({"keys": key, "max_points": 100000})
        series = self.get(f"/api/runs/{run_id}/metrics?{q}")["series"]
        got = [s for s in series if s["key"] == key]
        if not got:
            return []
        assert not got[0]["downsampled"], got[0]
        return [(b["step_min"], b["last"]) for b in got[0]["buckets"]]

    def artifacts(self, run_id: str) -> dict[str, int]:
        """fw's GET /api/runs/{id}/artifacts as {path: size}."""
        return {a["path"]: a["size"] for a in self.get(f"/api/runs/{run_id}/artifacts")["artifacts"]}

    def download(self, run_id: str, path: str) -> bytes:
        q = urllib.parse.urlencode({"kind": "artifact", "path": path})
        r = self.request("GET", f"/api/runs/{run_id}/download?{q}")
        assert r.status == 200, f"download {path} of {run_id}: {r!r}"
        return r.body

    def wait_for(
        self, fn: Callable[[], Any], pred: Callable[[Any], bool], timeout: float = 15, what: str = ""
    ) -> Any:
        """Poll fn() until pred holds (the store is written asynchronously in places)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            last = fn()
            if pred(last):
                return last
            if time.monotonic() > deadline:
                raise AssertionError(f"{what or 'condition'} never held within {timeout}s; last: {last!r}")
            time.sleep(0.05)


def _reset_mlflow() -> None:
    """Undo what a test did to MLflow's process-wide fluent state."""
    import mlflow
    from mlflow.tracking import fluent

    try:
        while mlflow.active_run() is not None:
            mlflow.end_run()
    except Exception:  # the server may be what failed; drop the runs locally
        fluent._active_run_stack.get().clear()
    fluent._active_experiment_id = None
    fluent._last_active_run_id.set(None)
    mlflow.set_tracking_uri(None)  # the global one (MLFlowLogger sets it); env is restored by monkeypatch


def _serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token: str | None, env: dict[str, str] | None = None
) -> Iterator[Dashboard]:
    pytest.importorskip(
        "mlflow", reason="mlflow is not installed: use the venv of scripts/setup-mlflow-venv.sh"
    )
    import mlflow

    for k in _MLFLOW_ENV:  # setenv first, so that monkeypatch also removes what MLflow sets later
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    for k in ("NO_PROXY", "no_proxy"):  # loopback never through a proxy (urllib's or requests')
        monkeypatch.setenv(k, ",".join(filter(None, [os.environ.get(k), "127.0.0.1", "localhost"])))
    d = Dashboard(tmp_path, token)
    d.dirs.update(env or {})
    try:
        d.start()
        monkeypatch.setenv("MLFLOW_TRACKING_URI", d.url)
        if token:
            monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", token)
        # A server error must fail the test now, not after MLflow's minutes of retries with backoff.
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
        monkeypatch.setenv("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", "false")
        # fw.track (for the mixed-client test) talks to the same dashboard and dirs.
        for k, v in d.dirs.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("FW_TRACKING_URI", d.url)
        monkeypatch.setenv("FW_DASHBOARD_TOKEN", token or "")
        monkeypatch.setenv("FW_SYSTEM_INTERVAL", "0")
        mlflow.set_tracking_uri(d.url)
        yield d
    finally:
        try:
            _reset_mlflow()
        finally:
            d.stop()


@pytest.fixture
def dashboard(tmp_path, monkeypatch) -> Iterator[Dashboard]:
    """A dashboard without a token; MLflow's client points at it."""
    yield from _serve(tmp_path, monkeypatch, None)


@pytest.fixture
def local_root_dashboard(tmp_path, monkeypatch) -> Iterator[Dashboard]:
    """A dashboard with a local default artifact root (--default-artifact-root file://<tmp>/mlruns),
    as `mlflow server --default-artifact-root` without artifact serving: the client writes run files."""
    yield from _serve(
        tmp_path, monkeypatch, None, {"FW_DASHBOARD_DEFAULT_ARTIFACT_ROOT": (tmp_path / "mlruns").as_uri()}
    )


@pytest.fixture
def destination_dashboard(tmp_path, monkeypatch) -> Iterator[Dashboard]:
    """A dashboard whose artifact proxy stores into <tmp>/mlartifacts in MLflow's layout
    (--artifacts-destination, given as a plain path), as `mlflow server --artifacts-destination`."""
    yield from _serve(
        tmp_path, monkeypatch, None, {"FW_DASHBOARD_ARTIFACTS_DESTINATION": str(tmp_path / "mlartifacts")}
    )


@pytest.fixture
def moto_s3(tmp_path) -> Iterator[str]:
    """moto's S3 server (FW_MOTO_SERVER: scripts/setup-moto-venv.sh's, as `make test-mlflow` sets it)
    on a free loopback port; its URL. Stopped (its process group) after the test."""
    server = os.environ.get("FW_MOTO_SERVER")
    if not server:
        msg = "moto's S3 server is needed: FW_MOTO_SERVER=$(bash scripts/setup-moto-venv.sh)"
        pytest.fail(msg) if REQUIRE else pytest.skip(msg)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "moto.log", "ab") as log:
        proc = subprocess.Popen(
            [server, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/", timeout=1):
                    break
            except urllib.error.HTTPError:
                break  # it answers
            except OSError as err:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"moto_server did not start: {(tmp_path / 'moto.log').read_text()[-2000:]}"
                    ) from err
                time.sleep(0.1)
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def s3_root_dashboard(tmp_path, monkeypatch, moto_s3) -> Iterator[Dashboard]:
    """A dashboard whose default artifact root is a bucket (--default-artifact-root s3://fw-mlruns/team),
    MLflow's client writing runs' files into it itself (its S3 artifact repository, boto3)."""
    import boto3

    creds = {
        "AWS_ACCESS_KEY_ID": "fw",
        "AWS_SECRET_ACCESS_KEY": "fw-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for k, v in {**creds, "MLFLOW_S3_ENDPOINT_URL": moto_s3}.items():
        monkeypatch.setenv(k, v)
    boto3.client("s3", endpoint_url=moto_s3).create_bucket(Bucket="fw-mlruns")
    yield from _serve(
        tmp_path,
        monkeypatch,
        None,
        {
            "FW_DASHBOARD_DEFAULT_ARTIFACT_ROOT": "s3://fw-mlruns/team",
            "FW_S3_ENDPOINT": moto_s3,
            "FW_S3_PATH_STYLE": "1",
        },
    )


@pytest.fixture
def token_dashboard(tmp_path, monkeypatch) -> Iterator[Dashboard]:
    """A dashboard with a token (FW_DASHBOARD_TOKEN); MLFLOW_TRACKING_TOKEN is set to it."""
    yield from _serve(tmp_path, monkeypatch, "tok-" + secrets.token_urlsafe(16))


@pytest.fixture
def client(dashboard):
    from mlflow import MlflowClient

    return MlflowClient(dashboard.url)


# FW_REQUIRE=1 (what `make test` sets): a test that would skip because something it needs is missing
# (the fw binary, mlflow) fails instead, so a wrong FW_BIN cannot pass the suite by skipping it.
REQUIRE = os.environ.get("FW_REQUIRE") == "1"


def _require(report) -> None:
    if REQUIRE and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"FW_REQUIRE=1 and this would have skipped: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    _require(report)
    if report.failed:  # the server's side of a failure: its log (warnings, errors, recovered panics)
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, Dashboard):
                report.sections.append(("fw dashboard log (tail)", value.log_tail()))


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _require(outcome.get_result())
