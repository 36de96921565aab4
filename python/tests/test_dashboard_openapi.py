"""Conformance of the real ``fw dashboard`` to its OpenAPI document (dashboard/api/openapi.json).

Starts the real binary (FW_BIN, default <repo>/bin/fw: ``go build -o bin/fw ./cmd/fw``) with its
experiment and checkpoint directories in a temporary directory and FW_PYTHON set to this interpreter
(training recipes and exports run for real), seeds it through POST /api/ingest, trains a short
digits_mlp job, exports its checkpoint to ONNX, uploads and deploys build/models/digits_cnn.onnx
(FW_MODELS_DIR, default <repo>/build/models: ``make models``) and sends real requests to every
documented path and method -- successes and each reachable error class -- validating every JSON body
against the schema the document declares for that path, method, status and content type (JSON Schema
2020-12, refs resolved against the whole document). A second dashboard with a token checks the 401s.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from openapi_check import (
    FW_BIN,
    MODELS,
    REPO,
    FwProcess,
    OpenAPIDoc,
    Response,
    escape,
    every_operation_answers,
    free_port,
    launch,
    multipart,
    unauthorized_exactly_where_declared,
)

CNN = MODELS / "digits_cnn.onnx"
SAMPLE = MODELS / "samples" / "digit_7_0.png"
DEADLINE = 120.0  # seconds to wait for a job, an export or a deployment (generous: CI machines are slow)

DOC = OpenAPIDoc(
    REPO / "dashboard" / "api" / "openapi.json",
    "urn:fw:dashboard-openapi",
    head_as_get=True,
    validate_text=True,
)
SPEC = DOC.spec


# ----------------------------------------------------------------------------- the server


@dataclass
class Dashboard(FwProcess):
    pids: list = field(default_factory=list)  # deployments' process groups, killed in teardown

    def get(self, target: str, expect: int = 200):
        return self.call("GET", target, expect=expect).json()

    def poll(self, target: str, done, what: str):
        """GETs target (validated) until done(body) holds; fails after DEADLINE."""
        deadline = time.monotonic() + DEADLINE
        while True:
            body = self.get(target)
            if done(body):
                return body
            assert time.monotonic() < deadline, f"{what}: still {body}\n{self.log()[-3000:]}"
            time.sleep(0.2)


def code_of(r: Response) -> str:
    return r.json()["error"]["code"]


def _start(tmp: Path, token: str = "") -> Dashboard:
    env = dict(
        FW_EXPERIMENT_DIR=str(tmp / "experiments"),
        FW_CHECKPOINT_DIR=str(tmp / "checkpoints"),
        FW_PYTHON=sys.executable,
        FW_SYSTEM_INTERVAL="0",
        FW_DASHBOARD_STOP_GRACE="5s",
        FW_DASHBOARD_SHUTDOWN_TIMEOUT="15s",
    )
    if token:
        env["FW_DASHBOARD_TOKEN"] = token
    url, proc, log = launch(["dashboard", "--host", "127.0.0.1", "--port", "0"], env, cwd=tmp)
    return Dashboard(url, proc, log, DOC, token, http_timeout=90)


def _stop(d: Dashboard) -> None:
    try:  # deployments outlive the dashboard by design: end their process groups first
        r = d.request("GET", "/api/deployments", headers={"Authorization": f"Bearer {d.token}"})
        if r.status == 200:
            d.pids += [x["pid"] for x in r.json()["deployments"] if x.get("pid")]
        r = d.request("GET", "/api/shared-server", headers={"Authorization": f"Bearer {d.token}"})
        if r.status == 200 and r.json().get("pid"):
            d.pids.append(r.json()["pid"])  # the shared server, with or without versions
    except OSError:
        pass
    for pid in set(d.pids):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    d.stop(timeout=30)


@pytest.fixture(scope="module")
def dash(tmp_path_factory):
    if not FW_BIN.exists():
        pytest.skip(f"{FW_BIN} is missing: build it with `go build -o bin/fw ./cmd/fw` (or set FW_BIN)")
    tmp = tmp_path_factory.mktemp("dashboard")
    d = _start(tmp)
    d.root = tmp  # type: ignore[attr-defined]  # for tests that put run files in place
    yield d
    _stop(d)


@pytest.fixture(scope="module")
def token_dash(tmp_path_factory):
    if not FW_BIN.exists():
        pytest.skip(f"{FW_BIN} is missing")
    d = _start(tmp_path_factory.mktemp("dashboard-token"), token="s3cret")
    yield d
    _stop(d)


# ----------------------------------------------------------------------------- seed data


def _events(
    run: str, experiment: str, writer: str = "w1", lr: float = 0.1, end: bool = True, nan: bool = False
) -> list[dict]:
    ev = [
        {
            "type": "run_start",
            "experiment": experiment,
            "name": f"run {run}",
            "status": "running",
            "params": {"lr": lr, "batch_size": 32, "optimizer": "adam"},
            "tags": {"team": "oas"},
            "source": {
                "command": "python train.py",
                "args": ["--lr", str(lr)],
                "host": "elsewhere",
                "pid": 1,
            },
        },
        {"type": "param", "params": {"warmup": 10}},
        {"type": "tag", "tags": {"stage": "test"}, "delete_tags": ["draft"]},
        {"type": "progress", "step": 2, "total_steps": 4, "epoch": 0.5, "total_epochs": 1},
        {"type": "log", "stream": "stdout", "lines": ["step 1", "step 2"]},
        {"type": "log", "stream": "stderr", "lines": ["warning: x"]},
        {"type": "system", "values": {"cpu_percent": 50}},
        {
            "type": "checkpoint",
            "path": "ckpt/step-2.pt",
            "step": 2,
            "epoch": 0.5,
            "values": {"val_loss": 0.5},
        },
        {"type": "artifact", "path": "model.onnx", "size": 1234},
        {"type": "status", "status": "running"},
    ]
    for step in range(5):
        ev.append({"type": "metrics", "step": step, "values": {"loss": 1.0 / (step + 1), "acc": step / 5}})
    ev.append({"type": "metric", "step": 4, "key": "val_loss", "value": "NaN" if nan else 0.25})
    if end:
        ev.append({"type": "run_end", "status": "finished", "exit_code": 0})
    for i, e in enumerate(ev):
        e.update(run_id=run, writer=writer, seq=i + 1, time=1732252800.5 + i)
    return ev


@pytest.fixture(scope="module")
def seeded(dash: Dashboard) -> dict:
    """Three runs in experiment "seed" (a and b finished, c running), ingested through the API."""
    r = dash.call(
        "POST",
        "/api/ingest",
        json_body=_events("seed-a", "seed") + _events("seed-b", "seed", lr=0.01),
        expect=200,
    )
    res = r.json()
    assert res["errors"] == [] and res["applied"] > 0, res
    lines = "\n".join(json.dumps(e) for e in _events("seed-c", "seed", end=False)) + "\n"
    r = dash.call(
        "POST",
        "/api/ingest",
        body=lines.encode(),
        headers={"Content-Type": "application/x-ndjson"},
        expect=200,
    )
    assert r.json()["errors"] == []
    exp = dash.get("/api/experiments/seed")
    return {"experiment": exp["id"], "runs": ["seed-a", "seed-b", "seed-c"]}


# ----------------------------------------------------------------------------- the document alone


def test_document_is_openapi_31() -> None:
    DOC.check_document()
    for tmpl, m, _ in DOC.operations():
        DOC.validator_for(f"/paths/{escape(tmpl)}/{m}")  # refs resolve


def test_document_examples_validate() -> None:
    for _, schema_ptr, value, ct in DOC.examples():
        DOC.validate_example(schema_ptr, value, ct)


# ----------------------------------------------------------------------------- open routes


def test_health_metrics_docs(dash: Dashboard) -> None:
    assert dash.get("/health")["status"] == "ok"
    # GET (and HEAD) only, as every route: another method is a 405 in the error shape.
    assert dash.request("HEAD", "/health").status == 200
    dash.call("POST", "/health", body=b"", expect=405)
    r = dash.call("GET", "/metrics", expect=200)
    assert r.content_type == "text/plain" and b"fw_dashboard_info" in r.body
    dash.call("POST", "/metrics", body=b"", expect=405)
    r = dash.call("GET", "/openapi.json", expect=200)
    assert re.fullmatch(r"3\.1\.\d+", r.json()["openapi"])
    if "etag" in r.headers:
        dash.call("GET", "/openapi.json", headers={"If-None-Match": r.headers["etag"]}, expect=304)
    dash.call("DELETE", "/openapi.json", expect=405)
    r = dash.call("GET", "/docs", expect=200)
    assert b"/openapi.json" in r.body
    bundled = b"swagger-ui.css" in r.body
    dash.call("GET", "/docs/swagger-ui.css", expect=200 if bundled else 404)
    dash.call("GET", "/docs/no-such-file.js", expect=404)
    dash.call("POST", "/docs", body=b"", expect=405)


def test_served_document_is_this_one(dash: Dashboard) -> None:
    served = dash.call("GET", "/openapi.json", expect=200).json()
    if served != SPEC:  # the binary embeds openapi.json at build time
        pytest.skip(f"{FW_BIN} serves an older dashboard/api/openapi.json than the checkout's: rebuild it")


# ----------------------------------------------------------------------------- ingest


def test_ingest(dash: Dashboard, seeded: dict) -> None:
    # Re-sent events are duplicates; a bad event is reported by index, the others applied.
    ev = _events("seed-a", "seed")[:2] + [
        {"type": "metrics", "run_id": "seed-d", "writer": "w1", "seq": 1, "step": 0, "values": {"x": 1}},
        {"type": "bogus", "run_id": "seed-a", "writer": "w9", "seq": 1},
    ]
    res = dash.call("POST", "/api/ingest", json_body=ev, expect=200).json()
    assert res["duplicates"] == 2 and [e["index"] for e in res["errors"]] == [2, 3]
    assert {e["code"] for e in res["errors"]} == {"unknown_run", "invalid_event"}
    for body in (b'{"type": "run_start"}', b"[{", b""):
        r = dash.call(
            "POST", "/api/ingest", body=body, headers={"Content-Type": "application/json"}, expect=400
        )
        assert code_of(r) == "invalid_json"
    # Over the batch limit (10,000 events): refused whole.
    big = [
        {
            "type": "metric",
            "run_id": "seed-a",
            "writer": "big",
            "seq": i + 1,
            "step": i,
            "key": "k",
            "value": 1,
        }
        for i in range(10001)
    ]
    r = dash.call("POST", "/api/ingest", json_body=big, expect=413)
    assert code_of(r) == "batch_too_large"
    dash.call("GET", "/api/ingest", expect=405)


# ----------------------------------------------------------------------------- experiments and runs


def test_experiments(dash: Dashboard, seeded: dict) -> None:
    e = dash.call(
        "POST",
        "/api/experiments",
        json_body={"name": "oas-made", "description": "d", "tags": {"k": "v"}},
        expect=201,
    ).json()
    r = dash.call("POST", "/api/experiments", json_body={"name": "oas-made"}, expect=409)
    assert code_of(r) == "conflict"
    dash.call("POST", "/api/experiments", body=b"{", headers={"Content-Type": "application/json"}, expect=400)
    page = dash.get("/api/experiments?limit=1&sort=name")
    assert len(page["experiments"]) == 1 and page.get("next")
    dash.get("/api/experiments?limit=1&sort=name&cursor=" + quote(page["next"]))
    dash.get("/api/experiments?filter=" + quote('name = "seed"') + "&desc=true")
    for q in ("filter=" + quote("name =="), "limit=0", "sort=nope", "cursor=zzz"):
        r = dash.call("GET", "/api/experiments?" + q, expect=400)
    dash.call("PUT", "/api/experiments", body=b"", expect=405)
    detail = dash.get(f"/api/experiments/{seeded['experiment']}")
    assert detail["name"] == "seed"
    dash.get("/api/experiments/seed")
    dash.call("GET", "/api/experiments/no-such-experiment", expect=404)
    patched = dash.call(
        "PATCH",
        f"/api/experiments/{e['id']}",
        json_body={"description": "new", "tags": {"k": None, "x": "y"}},
        expect=200,
    ).json()
    assert patched["description"] == "new"
    dash.call("PATCH", f"/api/experiments/{e['id']}", json_body={"nope": 1}, expect=400)
    dash.call("PATCH", f"/api/experiments/{e['id']}", json_body={"name": "seed"}, expect=409)
    dash.call("PATCH", "/api/experiments/no-such-experiment", json_body={"description": "x"}, expect=404)
    dash.call("PUT", f"/api/experiments/{e['id']}", body=b"", expect=405)
    runs = dash.get(f"/api/experiments/{seeded['experiment']}/runs?sort=params.lr&desc=true&limit=2")
    assert [x["id"] for x in runs["runs"]] and runs.get("next")
    dash.get("/api/experiments/seed/runs?filter=" + quote('status = "finished"') + "&sort=metrics.loss.min")
    dash.call("GET", "/api/experiments/seed/runs?filter=" + quote("status ="), expect=400)
    dash.call("POST", "/api/experiments/seed/runs", body=b"", expect=405)
    d = dash.call("DELETE", f"/api/experiments/{e['id']}", expect=200).json()
    assert d["deleted"] is True
    dash.call("DELETE", f"/api/experiments/{e['id']}", expect=404)


def test_runs(dash: Dashboard, seeded: dict) -> None:
    page = dash.get("/api/runs?sort=name&limit=2")
    assert len(page["runs"]) == 2 and page.get("next")
    dash.get(
        "/api/runs?sort=name&limit=2&filter="
        + quote('params.optimizer = "adam"')
        + "&cursor="
        + quote(page["next"])
    )
    dash.call("GET", "/api/runs?cursor=" + quote(page["next"]), expect=400)  # a cursor of another sort
    dash.call("GET", "/api/runs?filter=" + quote("(("), expect=400)
    dash.call("POST", "/api/runs", body=b"", expect=405)
    run = dash.get("/api/runs/seed-a")
    assert run["status"] == "finished" and run["params"]["lr"] == 0.1
    assert dash.get("/api/runs/seed-c")["status"] == "running"
    dash.call("GET", "/api/runs/no-such-run", expect=404)
    dash.call(
        "PATCH",
        "/api/runs/seed-b",
        json_body={"name": "renamed b", "tags": {"stage": None, "n": "1"}},
        expect=200,
    )
    dash.call("PATCH", "/api/runs/seed-b", json_body={"status": "x"}, expect=400)
    dash.call("PATCH", "/api/runs/no-such-run", json_body={"name": "x"}, expect=404)
    dash.call("PUT", "/api/runs/seed-b", body=b"", expect=405)
    # metrics
    m = dash.get("/api/runs/seed-a/metrics?keys=loss,acc&max_points=3")
    assert {s["key"] for s in m["series"]} == {"loss", "acc"}
    dash.get("/api/runs/seed-a/metrics")
    dash.get("/api/runs/seed-a/metrics?system=true")
    dash.call("GET", "/api/runs/seed-a/metrics?max_points=0", expect=400)
    dash.call("GET", "/api/runs/no-such-run/metrics", expect=404)
    dash.call("POST", "/api/runs/seed-a/metrics", body=b"", expect=405)
    # logs
    lines = dash.get("/api/runs/seed-a/logs?tail=2")["lines"]
    assert len(lines) == 2
    dash.get(f"/api/runs/seed-a/logs?after={lines[0]['id']}&limit=5")
    assert all(x["stream"] == "stderr" for x in dash.get("/api/runs/seed-a/logs?stream=stderr")["lines"])
    dash.call("GET", "/api/runs/seed-a/logs?tail=-1", expect=400)
    dash.call("GET", "/api/runs/no-such-run/logs", expect=404)
    dash.call("DELETE", "/api/runs/seed-a/logs", expect=405)
    # checkpoints and artifacts
    cks = dash.get("/api/runs/seed-a/checkpoints")
    assert [c["path"] for c in cks["checkpoints"]] == ["ckpt/step-2.pt"]
    arts = dash.get("/api/runs/seed-a/artifacts")
    assert [a["path"] for a in arts["artifacts"]] == ["model.onnx"]
    for sub in ("checkpoints", "artifacts"):
        dash.call("GET", f"/api/runs/no-such-run/{sub}", expect=404)
        dash.call("POST", f"/api/runs/seed-a/{sub}", body=b"", expect=405)
    # downloads: the listed files, nothing else
    files = {
        dash.root / "checkpoints" / "seed-a" / "ckpt" / "step-2.pt": b"weights",
        dash.root / "experiments" / "artifacts" / "seed-a" / "model.onnx": b"onnx bytes",
    }
    for f, data in files.items():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    dl = "/api/runs/seed-a/download"
    r = dash.call("GET", f"{dl}?kind=checkpoint&path=ckpt/step-2.pt", expect=200)
    assert r.body == b"weights" and r.headers["content-disposition"].startswith("attachment")
    assert dash.call("GET", f"{dl}?kind=artifact&path=model.onnx", expect=200).body == b"onnx bytes"
    dash.call("GET", f"{dl}?kind=checkpoint&path=ckpt/step-3.pt", expect=404)
    dash.call("GET", f"{dl}?kind=artifact&path=ckpt/step-2.pt", expect=404)
    dash.call("GET", "/api/runs/no-such-run/download?kind=artifact&path=model.onnx", expect=404)
    dash.call("GET", f"{dl}?kind=weights&path=model.onnx", expect=400)
    dash.call("DELETE", f"{dl}?kind=artifact&path=model.onnx", expect=405)
    # uploads (a training process on another machine, FW_UPLOAD_FILES=1): stored where downloads read
    up = "/api/runs/seed-a/files"
    oct_ = {"Content-Type": "application/octet-stream"}
    r = dash.call(
        "PUT", f"{up}?kind=checkpoint&path=ckpt/step-9.pt", body=b"remote weights", headers=oct_, expect=200
    )
    assert r.json() == {"run_id": "seed-a", "kind": "checkpoint", "path": "ckpt/step-9.pt", "size": 14}
    # no bucket here: it lands in the dashboard's own checkpoint directory (served once an event names it)
    assert (dash.root / "checkpoints" / "seed-a" / "ckpt" / "step-9.pt").read_bytes() == b"remote weights"
    dash.call("PUT", f"{up}?kind=artifact&path=../escape.txt", body=b"x", headers=oct_, expect=400)
    dash.call("PUT", f"{up}?kind=weights&path=a.pt", body=b"x", headers=oct_, expect=400)
    dash.call(
        "PUT", "/api/runs/no-such-run/files?kind=artifact&path=a.txt", body=b"x", headers=oct_, expect=404
    )
    # delete a throwaway run
    dash.call("POST", "/api/ingest", json_body=_events("seed-x", "seed"), expect=200)
    d = dash.call("DELETE", "/api/runs/seed-x", expect=200).json()
    assert d["deleted"] is True
    dash.call("DELETE", "/api/runs/seed-x", expect=404)


def test_unknown_experiment_runs_404(dash: Dashboard) -> None:
    dash.call("GET", "/api/experiments/no-such-experiment/runs", expect=404)


def test_compare_activity_system(dash: Dashboard, seeded: dict) -> None:
    c = dash.get("/api/compare?runs=seed-a,seed-b&keys=loss&max_points=10")
    assert c["params"]["lr"]["differs"] is True
    dash.get("/api/compare?runs=seed-a,seed-b,seed-c&align=time")
    dash.call("GET", "/api/compare?runs=seed-a", expect=422)
    dash.call("GET", "/api/compare?runs=seed-a,no-such-run", expect=404)
    dash.call("GET", "/api/compare?runs=seed-a,seed-b&align=sideways", expect=400)
    dash.call("POST", "/api/compare", body=b"", expect=405)
    act = dash.get("/api/activity?limit=5")
    assert 0 < len(act["events"]) <= 5
    dash.get("/api/activity")
    dash.call("GET", "/api/activity?limit=x", expect=400)
    dash.call("POST", "/api/activity", body=b"", expect=405)
    st = dash.get("/api/system/status")
    assert st["cpu"]["cores"] >= 1 and st["process"]["pid"] == dash.proc.pid
    dash.call("POST", "/api/system/status", body=b"", expect=405)
    hist = dash.get("/api/system/history")
    times = [x["time"] for x in hist["samples"]]
    assert hist["interval_seconds"] > 0 and times and times == sorted(times)
    assert len(dash.get("/api/system/history?seconds=1")["samples"]) <= len(times) + 2
    dash.call("GET", "/api/system/history?seconds=0", expect=400)
    dash.call("GET", "/api/system/history?seconds=", expect=400)


# ----------------------------------------------------------------------------- training


@pytest.fixture(scope="module")
def job(dash: Dashboard) -> dict:
    """A real digits_mlp job (1 epoch), validated while running and after it finished."""
    started = dash.call(
        "POST",
        "/api/training/start",
        json_body={"recipe": "digits_mlp", "experiment": "oas", "params": {"epochs": 1}},
        expect=202,
    ).json()
    run = started["id"]
    assert started["status"] in ("running", "queued")
    info = dash.get(f"/api/training/{run}")
    assert info["run_id"] == run and info["recipe"] == "digits_mlp"
    assert any(j["run_id"] == run for j in dash.get("/api/training")["jobs"])
    dash.get(f"/api/runs/{run}")
    return {"run": run, "during": info}


def _finished(dash: Dashboard, run: str) -> dict:
    info = dash.poll(f"/api/training/{run}", lambda j: j["state"] == "exited", f"training job {run}")
    dash.poll(f"/api/runs/{run}", lambda r: r["status"] in ("finished", "failed", "stopped"), f"run {run}")
    return info


def test_training(dash: Dashboard, job: dict, seeded: dict) -> None:
    recipes = dash.get("/api/training/recipes")["recipes"]
    assert "digits_mlp" in {r["name"] for r in recipes}
    dash.call("POST", "/api/training/recipes", body=b"", expect=405)
    start = "/api/training/start"
    r = dash.call(
        "POST",
        start,
        json_body={"recipe": "digits_mlp", "experiment": "oas", "params": {"epochs": 0, "nope": 1}},
        expect=422,
    )
    assert code_of(r) == "invalid_params" and r.json()["error"]["details"]
    dash.call(
        "POST", start, json_body={"recipe": "no_such_recipe", "experiment": "oas", "params": {}}, expect=404
    )
    dash.call("POST", start, json_body={"recipe": "digits_mlp", "experiment": "oas", "bogus": 1}, expect=400)
    dash.call("POST", start, body=b"{", headers={"Content-Type": "application/json"}, expect=400)
    dash.call("GET", start, expect=405)
    # A second job, stopped (queued behind the first on a small machine, else running).
    second = dash.call(
        "POST",
        start,
        json_body={"recipe": "digits_mlp", "experiment": "oas", "params": {"epochs": 3, "step_delay": 0.5}},
        expect=202,
    ).json()["id"]
    stopped = dash.call("POST", f"/api/training/{second}/stop", expect=202).json()
    assert stopped["run_id"] == second
    dash.call("POST", "/api/training/no-such-run/stop", expect=404)
    dash.call("GET", f"/api/training/{second}/stop", expect=405)
    dash.call("GET", "/api/training/no-such-run", expect=404)
    dash.call("POST", f"/api/training/{job['run']}", body=b"", expect=405)
    dash.call("POST", "/api/training", body=b"", expect=405)
    # Resuming a run that is still running (seed-c never ended) is a conflict.
    resume = {"run_id": "seed-c", "checkpoint": "ckpt/step-2.pt"}
    r = dash.call(
        "POST",
        start,
        json_body={"recipe": "digits_mlp", "experiment": "seed", "resume_from": resume},
        expect=409,
    )
    assert code_of(r) == "conflict"
    after = _finished(dash, job["run"])
    assert after["exit_code"] == 0, dash.get(f"/api/runs/{job['run']}/logs")
    assert dash.get(f"/api/runs/{job['run']}")["status"] == "finished"
    _finished(dash, second)
    assert dash.get(f"/api/runs/{second}")["status"] == "stopped"
    jobs = dash.get("/api/training")["jobs"]
    assert {j["run_id"] for j in jobs} >= {job["run"], second}
    dash.get(f"/api/runs/{job['run']}/metrics?keys=train/loss,val/loss")
    dash.get(f"/api/runs/{job['run']}/logs?tail=5")


def _ws_handshake(dash: Dashboard, query: str = "", headers: dict | None = None) -> bytes:
    u = urlsplit(dash.url)
    key = base64.b64encode(os.urandom(16)).decode()
    hdrs = {
        "Host": u.netloc,
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": key,
        "Sec-WebSocket-Version": "13",
        **(headers or {}),
    }
    req = f"GET /api/training/stream{query} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    with socket.create_connection((u.hostname, u.port), timeout=30) as s:
        s.sendall((req + "\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):  # read the error body to its end
            s.settimeout(5)
            try:
                while chunk := s.recv(4096):
                    rest += chunk
            except OSError:
                pass
    return head + b"\r\n\r\n" + rest


def _ws_response(raw: bytes) -> Response:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        out, rest = b"", body
        while rest:
            n, _, rest = rest.partition(b"\r\n")
            size = int(n, 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2 :]
        body = out
    return Response(status, headers, body, "GET", "/api/training/stream")


def test_training_stream(dash: Dashboard) -> None:
    dash.call("GET", "/api/training/stream", expect=400)
    dash.call("POST", "/api/training/stream", body=b"", expect=405)
    r = _ws_response(_ws_handshake(dash))
    assert r.status == 101
    DOC.validate(r)
    r = _ws_response(_ws_handshake(dash, headers={"Origin": "http://evil.example"}))
    assert r.status == 403
    DOC.validate(r)


# ----------------------------------------------------------------------------- export


def test_export(dash: Dashboard, job: dict) -> None:
    _finished(dash, job["run"])
    ck = dash.get(f"/api/runs/{job['run']}/checkpoints")["checkpoints"][-1]["path"]
    req = {"run_id": job["run"], "checkpoint": ck, "format": "onnx", "name": "mlp"}
    started = dash.call("POST", "/api/models/export", json_body=req, expect=202).json()
    ex = dash.poll(
        f"/api/models/exports/{started['id']}",
        lambda j: j["state"] != "running" and j["state"] != "queued",
        "export",
    )
    assert ex["state"] == "finished", ex
    assert ex["model"] == "mlp" and ex["version"] == 1
    exports = dash.get("/api/models/exports")["exports"]
    assert started["id"] in {x["id"] for x in exports}
    r = dash.call("POST", "/api/models/export", json_body=dict(req, format="pickle"), expect=422)
    dash.call("POST", "/api/models/export", json_body=dict(req, checkpoint="nope.pt"), expect=404)
    dash.call("POST", "/api/models/export", json_body=dict(req, run_id="no-such-run"), expect=404)
    dash.call(
        "POST", "/api/models/export", body=b"[", headers={"Content-Type": "application/json"}, expect=400
    )
    dash.call("GET", "/api/models/export", expect=405)
    dash.call("GET", "/api/models/exports/no-such-export", expect=404)
    dash.call("DELETE", f"/api/models/exports/{started['id']}", expect=405)
    dash.call("POST", "/api/models/exports", body=b"", expect=405)
    assert "format" in r.json()["error"]["message"]


# ----------------------------------------------------------------------------- registry and deployments


@pytest.fixture(scope="module")
def cnn(dash: Dashboard) -> dict:
    if not CNN.exists():
        pytest.skip(f"{CNN} is missing: run `make models` (or set FW_MODELS_DIR)")
    body, ct = multipart([("file", "digits_cnn.onnx", CNN.read_bytes())])
    up = dash.call("POST", "/api/models?name=cnn", body=body, headers={"Content-Type": ct}, expect=201).json()
    assert up["name"] == "cnn" and up["version"]["version"] == 1 and up["version"]["format"] == "onnx"
    return up


def test_models(dash: Dashboard, cnn: dict) -> None:
    raw = dash.call(
        "POST",
        "/api/models?name=cnn",
        body=CNN.read_bytes(),
        headers={"Content-Type": "application/octet-stream"},
        expect=201,
    ).json()
    assert raw["version"]["version"] == 2
    body, ct = multipart([("file", "m.onnx", CNN.read_bytes())], {"name": "cnn-form"})
    dash.call("POST", "/api/models", body=body, headers={"Content-Type": ct}, expect=201)
    # Two files in one form would be written one after the other into one model: refused.
    two, ct = multipart(
        [("file", "a.onnx", CNN.read_bytes()), ("file", "b.onnx", CNN.read_bytes())], {"name": "two"}
    )
    r = dash.call("POST", "/api/models", body=two, headers={"Content-Type": ct}, expect=400)
    assert "more than one" in r.json()["error"]["message"]
    # Registering a checkpoint reference with JSON.
    dash.call("POST", "/api/ingest", json_body=_events("ref-run", "oas-ref"), expect=200)
    dash.call(
        "POST",
        "/api/models",
        json_body={"name": "ref", "run_id": "ref-run", "checkpoint": "nope.pt"},
        expect=404,
    )
    dash.call(
        "POST",
        "/api/models?name=junk",
        body=b"not a model at all",
        headers={"Content-Type": "application/octet-stream"},
        expect=422,
    )
    dash.call("POST", "/api/models", body=b"{", headers={"Content-Type": "application/json"}, expect=400)
    dash.call("PUT", "/api/models", body=b"", expect=405)
    models = dash.get("/api/models")["models"]
    assert {"cnn", "cnn-form"} <= {m["name"] for m in models}
    m = dash.get("/api/models/cnn")
    assert [v["version"] for v in m["versions"]] == [1, 2]
    dash.call("GET", "/api/models/no-such-model", expect=404)
    m = dash.call(
        "PATCH", "/api/models/cnn", json_body={"aliases": {"production": 1, "staging": 2}}, expect=200
    ).json()
    assert m["aliases"] == {"production": 1, "staging": 2}
    m = dash.call("PATCH", "/api/models/cnn", json_body={"aliases": {"staging": 0}}, expect=200).json()
    assert m["aliases"] == {"production": 1}
    dash.call("PATCH", "/api/models/cnn", json_body={"aliases": {"production": 99}}, expect=404)
    dash.call("PATCH", "/api/models/cnn", body=b"{", headers={"Content-Type": "application/json"}, expect=400)
    dash.call("PATCH", "/api/models/no-such-model", json_body={"aliases": {}}, expect=404)
    dash.call("POST", "/api/models/cnn", body=b"", expect=405)
    v = dash.get("/api/models/cnn/versions/1")
    assert v["version"] == 1 and v["inputs"][0]["shape"] == [-1, 1, 8, 8]
    dash.call("GET", "/api/models/cnn/versions/7", expect=404)
    dash.call("GET", "/api/models/cnn/versions/x", expect=404)
    dash.call("POST", "/api/models/cnn/versions/1", body=b"", expect=405)
    dash.call("DELETE", "/api/models/cnn/versions/2", expect=200)
    dash.call("DELETE", "/api/models/cnn/versions/2", expect=404)
    dash.call("DELETE", "/api/models/cnn-form", expect=200)
    dash.call("DELETE", "/api/models/cnn-form", expect=404)


def test_shared_server(dash: Dashboard, cnn: dict) -> None:
    """Two deployments of one version each on the shared server: every answer as documented."""
    assert dash.get("/api/shared-server")["state"] == "stopped"
    dash.call("DELETE", "/api/shared-server", expect=404)
    srv = dash.call("POST", "/api/shared-server", json_body={"device": "cpu"}, expect=201).json()
    dash.pids.append(srv["pid"])
    assert srv["state"] == "running" and srv["versions"] == []
    again = dash.call("POST", "/api/shared-server", body=b"", expect=200).json()
    assert again["pid"] == srv["pid"]
    r = dash.call("POST", "/api/shared-server", json_body={"port": srv["port"] + 1}, expect=409)
    assert code_of(r) == "conflict"
    dash.call("POST", "/api/shared-server", json_body={"device": "tpu"}, expect=422)
    dash.call("POST", "/api/shared-server", json_body={"nope": 1}, expect=400)
    dash.call("PUT", "/api/shared-server", body=b"", expect=405)
    dep = dash.call(
        "POST", "/api/models/cnn/deploy", json_body={"version": 1, "target": "shared"}, expect=201
    ).json()
    assert dep["target"] == "shared" and dep["pid"] == srv["pid"] and dep["model_state"] == "READY"
    r = dash.call("POST", "/api/models/cnn/deploy", json_body={"version": 1, "target": "shared"}, expect=409)
    assert dep["id"] in r.json()["error"]["message"]
    dash.call("POST", "/api/models/cnn/deploy", json_body={"target": "nowhere", "port": 1}, expect=422)
    listed = dash.get("/api/shared-server")
    assert [(v["model"], v["version"], v["state"], v.get("deployment")) for v in listed["versions"]] == [
        ("cnn", 1, "READY", dep["id"])
    ]
    deps = {d["id"]: d for d in dash.get("/api/deployments")["deployments"]}
    assert deps[dep["id"]]["healthy"] is True and deps[dep["id"]]["model_state"] == "READY"
    base = f"/api/deployments/{dep['id']}"
    pred = dash.call("POST", base + "/predict", json_body={"data": [[0.0] * 64]}, expect=200).json()
    assert isinstance(pred, dict)
    assert dash.get(base + "/model")["inputs"][0]["shape"] == [-1, 1, 8, 8]
    assert isinstance(dash.get(base + "/health/ready"), dict)
    stopped = dash.call("DELETE", base, expect=200).json()
    assert stopped["state"] == "stopped" and stopped["target"] == "shared"
    listed = dash.get("/api/shared-server")
    assert [(v["model"], v["state"]) for v in listed["versions"]] == [("cnn", "UNAVAILABLE")]
    assert dash.call("DELETE", "/api/shared-server", expect=200).json()["state"] == "stopped"


def test_deployments(dash: Dashboard, cnn: dict) -> None:
    if not SAMPLE.exists():
        pytest.skip(f"{SAMPLE} is missing (make models)")
    port = free_port()
    dep = dash.call(
        "POST", "/api/models/cnn/deploy", json_body={"version": 1, "port": port}, expect=201
    ).json()
    dash.pids.append(dep["pid"])
    assert dep["state"] == "running" and dep["port"] == port
    dep_id = dep["id"]
    r = dash.call("POST", "/api/models/cnn/deploy", json_body={"version": 1, "port": port}, expect=409)
    assert code_of(r) == "conflict"
    dash.call("POST", "/api/models/cnn/deploy", json_body={"version": 1, "port": "x"}, expect=400)
    dash.call("POST", "/api/models/cnn/deploy", json_body={"version": 42, "port": free_port()}, expect=404)
    dash.call("POST", "/api/models/no-such-model/deploy", json_body={"port": free_port()}, expect=404)
    dash.call(
        "POST",
        "/api/models/cnn/deploy",
        json_body={"version": 1, "port": free_port(), "device": "tpu"},
        expect=422,
    )
    dash.call("GET", "/api/models/cnn/deploy", expect=405)
    deps = dash.get("/api/deployments")["deployments"]
    assert dep_id in {d["id"] for d in deps}
    dash.call("POST", "/api/deployments", body=b"", expect=405)
    base = f"/api/deployments/{dep_id}"
    pred = dash.call("POST", base + "/predict", json_body={"data": [[0.0] * 64]}, expect=200).json()
    assert isinstance(pred, dict)
    img = dash.call(
        "POST",
        base + "/predict/image?top_k=1",
        body=SAMPLE.read_bytes(),
        headers={"Content-Type": "image/png"},
        expect=200,
    ).json()
    assert img["predictions"][0]["top_k"][0]["label"] == "7"
    body, ct = multipart([("file", "digit.png", SAMPLE.read_bytes())])
    dash.call("POST", base + "/predict/image", body=body, headers={"Content-Type": ct}, expect=200)
    batch = dash.call(
        "POST",
        base + "/predict/batch",
        json_body={"requests": [{"id": "a", "data": [[0.0] * 64]}]},
        expect=200,
    ).json()
    assert isinstance(batch, dict)
    assert dash.get(base + "/model")["inputs"][0]["shape"] == [-1, 1, 8, 8]
    assert isinstance(dash.get(base + "/health/ready"), dict)
    # The model server's own errors come back as it gave them.
    r = dash.call("POST", base + "/predict", json_body={"data": [[1, 2]]}, expect=422)
    assert isinstance(r.json(), dict)
    r = dash.call(
        "POST", base + "/predict/image", body=b"x", headers={"Content-Type": "text/plain"}, expect=415
    )
    routes = {
        "predict": "POST",
        "predict/image": "POST",
        "predict/batch": "POST",
        "model": "GET",
        "health/ready": "GET",
    }
    for route, good in routes.items():
        body = b"{}" if good == "POST" else None
        hdrs = {"Content-Type": "application/json"}
        dash.call("GET" if good == "POST" else "POST", f"{base}/{route}", body=b"", expect=405)
        dash.call(good, f"/api/deployments/no-such-deployment/{route}", body=body, headers=hdrs, expect=404)
    dash.call("GET", base, expect=405)
    stopped = dash.call("DELETE", base, expect=200).json()
    assert stopped["id"] == dep_id
    dash.call("DELETE", base, expect=404)
    dash.call("DELETE", "/api/deployments/no-such-deployment", expect=404)
    dash.call("GET", "/api/models/cnn/versions/1", expect=200)
    dash.call("DELETE", "/api/models/cnn/versions/1", expect=200)
    dash.call("DELETE", "/api/models/cnn", expect=200)
    dash.call("DELETE", "/api/models/cnn", expect=404)


# ----------------------------------------------------------------------------- 401


def _example_target(tmpl: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", tmpl)


def test_token(token_dash: Dashboard) -> None:
    s = token_dash
    assert s.get("/health")["status"] == "ok"
    r = s.request("GET", "/api/experiments")
    assert r.status == 401
    DOC.validate(r)
    assert code_of(r) == "unauthorized"
    r = s.request("GET", "/api/experiments", headers={"Authorization": "Bearer wrong"})
    assert r.status == 401
    DOC.validate(r)
    s.call("GET", "/api/experiments", expect=200)
    s.call("GET", "/metrics", expect=200)
    # Every documented operation: 401 without the token exactly where the document lists bearerAuth.
    unauthorized_exactly_where_declared(s, _example_target, ("post", "patch"), validate_all=True)
    # The live stream also takes ?token=.
    assert _ws_response(_ws_handshake(s, "?token=s3cret")).status == 101
    r = _ws_response(_ws_handshake(s))
    assert r.status == 401
    DOC.validate(r)


# ----------------------------------------------------------------------------- coverage


def test_every_documented_operation_answers(dash: Dashboard) -> None:
    """Each documented operation, sent with unknown IDs and no body, answers a status the document lists."""
    every_operation_answers(dash, _example_target)


def test_nan_metric_reads(token_dash: Dashboard) -> None:
    """Ingest takes "NaN" metric values and the document's Summary allows "NaN": reads must not fail.

    Uses the token dashboard (run after test_token) so that the other tests' listings are unaffected.
    """
    s = token_dash
    ev = _events("nan-a", "nan", nan=True) + _events("nan-b", "nan", lr=0.5)
    assert s.call("POST", "/api/ingest", json_body=ev, expect=200).json()["errors"] == []
    s.call("GET", "/api/runs/nan-a", expect=200)
    s.call("GET", "/api/runs/nan-a/metrics?keys=val_loss", expect=200)
    s.call("GET", "/api/runs", expect=200)
    s.call("GET", "/api/experiments/nan/runs", expect=200)
    s.call("GET", "/api/compare?runs=nan-a,nan-b", expect=200)


def _pb_varint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def _pb_field(num: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _pb_varint(num << 3 | 2) + _pb_varint(len(payload)) + payload


def _otlp_request(trace_id: bytes, span_id: bytes, name: str, deployment: str) -> bytes:
    """An OTLP ExportTraceServiceRequest of one server span (opentelemetry/proto, written by hand)."""
    kv = _pb_field(1, b"fw.deployment") + _pb_field(2, _pb_field(1, deployment.encode()))
    resource = _pb_field(1, kv)
    span = (
        _pb_field(1, trace_id)
        + _pb_field(2, span_id)
        + _pb_field(5, name.encode())
        + _pb_varint(6 << 3) + _pb_varint(2)  # kind SERVER
        + _pb_varint(7 << 3 | 1) + (1_700_000_000_000_000_000).to_bytes(8, "little")
        + _pb_varint(8 << 3 | 1) + (1_700_000_000_004_000_000).to_bytes(8, "little")
    )  # fmt: skip
    scope_spans = _pb_field(2, span)
    return _pb_field(1, _pb_field(1, resource) + _pb_field(2, scope_spans))


def test_traces_and_payloads(dash: Dashboard) -> None:
    """The trace store (an OTLP receiver and its reads) and the payload store (ingest, reads, drift)."""
    tid, sid = bytes(range(1, 17)), bytes(range(1, 9))
    body = _otlp_request(tid, sid, "POST /predict", "oas-dep")
    dash.call("POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"}, expect=200)
    dash.call(
        "POST", "/v1/traces", body=b"{}", headers={"Content-Type": "application/json"}, expect=200
    )  # OTLP/JSON
    dash.call("POST", "/v1/traces", body=b"{}", headers={"Content-Type": "text/plain"}, expect=415)
    dash.call(
        "POST",
        "/v1/traces",
        body=b"\xff\xff\xff",
        headers={"Content-Type": "application/x-protobuf"},
        expect=400,
    )
    dash.call("GET", "/v1/traces", expect=405)
    reqs = dash.get("/api/traces?deployment=oas-dep&sort=slowest")["requests"]
    assert [r["trace_id"] for r in reqs] == [tid.hex()] and reqs[0]["name"] == "POST /predict"
    spans = dash.get(f"/api/traces/{tid.hex()}")["spans"]
    assert spans[0]["span_id"] == sid.hex() and spans[0]["end_ns"] - spans[0]["start_ns"] == 4_000_000
    dash.call("GET", "/api/traces/" + "0" * 32, expect=404)
    dash.call("GET", "/api/traces/xyz", expect=400)
    dash.call("GET", "/api/traces?sort=fast", expect=400)

    # An MLflow trace (spans sent with MLflow's experiment header), linked to a run: listed on the
    # run, its spans in the same shape. MLflow's routes are not this document's: sent unvalidated.
    r = dash.request(
        "POST",
        "/api/2.0/mlflow/runs/create",
        json.dumps({"experiment_id": "0"}).encode(),
        {"Content-Type": "application/json"},
    )
    assert r.status == 200, r.body
    run = r.json()["run"]["info"]["run_id"]
    mtid = bytes(range(101, 117))
    r = dash.request("POST", "/v1/traces", _otlp_request(mtid, sid, "chain", "-"),
                     {"Content-Type": "application/x-protobuf", "x-mlflow-experiment-id": "0"})  # fmt: skip
    assert r.status == 200, r.body
    r = dash.request("POST", "/api/2.0/mlflow/traces/link-to-run",
                     json.dumps({"trace_ids": [f"tr-{mtid.hex()}"], "run_id": run}).encode(), {"Content-Type": "application/json"})  # fmt: skip
    assert r.status == 200, r.body
    traces = dash.get(f"/api/runs/{run}/traces?limit=5")["traces"]
    assert [t["trace_id"] for t in traces] == [f"tr-{mtid.hex()}"] and traces[0]["name"] == "chain", traces
    assert dash.get(f"/api/traces/tr-{mtid.hex()}")["spans"][0]["name"] == "chain"
    dash.call("GET", "/api/traces/tr-nothing", expect=404)
    dash.call("GET", f"/api/runs/{run}/traces?limit=0", expect=400)
    dash.call("GET", "/api/runs/nope/traces", expect=404)

    def record(i: int, mean: float) -> dict:
        return {
            "id": f"oas-{i}", "time": f"2026-11-27T09:{i // 60:02d}:{i % 60:02d}Z", "model": "m", "version": "1", "latency_ms": 0.5,
            "inputs": [{"name": "x", "datatype": "float32", "shape": [1, 4], "data": [mean + (i % 4) / 4] * 4}],
            "outputs": [{"name": "y", "datatype": "float32", "shape": [1, 3], "data": [0, 1, 0] if mean < 1 else [0, 0, 1]}],
        }  # fmt: skip

    lines = "\n".join(json.dumps(record(i, 0.0 if i < 20 else 5.0)) for i in range(40)).encode()
    r = dash.call(
        "POST",
        "/api/payloads?deployment=oas-dep",
        body=lines,
        headers={"Content-Type": "application/x-ndjson"},
        expect=200,
    )
    assert r.json() == {"accepted": 40, "stored": 40, "refused": []}
    bad = dash.call("POST", "/api/payloads", json_body=[{"id": "bad id", "model": "m"}], expect=200).json()
    assert bad["accepted"] == 0 and bad["refused"][0]["line"] == 1
    dash.call("POST", "/api/payloads", body=b"[{", headers={"Content-Type": "application/json"}, expect=400)
    dash.call("POST", "/api/payloads", body=b"x", headers={"Content-Type": "text/plain"}, expect=415)
    recs = dash.get("/api/payloads?deployment=oas-dep&limit=5")["records"]
    assert len(recs) == 5 and recs[0]["id"] == "oas-39" and recs[0]["record"]["inputs"][0]["name"] == "x"
    drift = dash.get("/api/payloads/drift?deployment=oas-dep&reference_records=20&records=20&buckets=2")
    levels = {f["name"]: f["level"] for f in drift["features"]}
    assert levels["x mean"] == "drift" and levels["y class"] == "drift", levels
    assert drift["reference"]["records"] == 20 and drift["current"]["records"] == 20
    dash.call("GET", "/api/payloads/drift?records=5", expect=400)
    # a training run's data summary as the reference: refused with the reason when there is none
    dash.call("GET", "/api/payloads/drift?deployment=oas-dep&reference_run=no-such-run", expect=404)
    dash.call("GET", "/api/payloads/drift?deployment=oas-dep&reference_run=Not-An-ID", expect=400)
    dash.call("DELETE", "/api/payloads", expect=405)


def test_every_operation_succeeded() -> None:
    """Every documented operation was answered with a validated success by the tests above."""
    missing = [
        f"{m.upper()} {tmpl}"
        for tmpl, m, _ in DOC.operations()
        if not any(t == tmpl and mm == m and st < 300 for t, mm, st in DOC.seen)
    ]
    assert not missing, f"no validated 1xx/2xx answer for {missing}"
