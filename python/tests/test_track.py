"""fw.track against the real dashboard: ``fw dashboard`` (FW_BIN, default <repo>/bin/fw).

Build it with ``go build -o bin/fw ./cmd/fw``; the tests skip when it is missing.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import fw
from fw.track import MAX_LOG_LINE

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Dashboard:
    def __init__(self, dirs: dict[str, str], port: int) -> None:
        self.dirs, self.port = dirs, port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Dashboard:
        if not FW_BIN.exists():
            pytest.skip(f"{FW_BIN} is missing: build it with `go build -o bin/fw ./cmd/fw` (or set FW_BIN)")
        env = {**os.environ, **self.dirs, "FW_DASHBOARD_TOKEN": "", "FW_DATABASE_URL": ""}
        self.proc = subprocess.Popen(
            [str(FW_BIN), "dashboard", "--port", str(self.port), "--spool-interval", "200ms"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"fw dashboard exited: {self.proc.stderr.read()}") from None
                time.sleep(0.05)
        raise RuntimeError("fw dashboard never became ready")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.communicate(timeout=30)
        self.proc = None

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read())

    def wait_run(self, run_id: str, pred, timeout: float = 15) -> dict:
        deadline = time.monotonic() + timeout
        last: dict = {}
        while time.monotonic() < deadline:
            try:
                last = self.get(f"/api/runs/{run_id}")
                if pred(last):
                    return last
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"run {run_id} never matched: {last}")


@pytest.fixture
def dirs(tmp_path, monkeypatch) -> dict[str, str]:
    port = _free_port()
    d = {
        "FW_EXPERIMENT_DIR": str(tmp_path / "experiments"),
        "FW_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "FW_TRACKING_URI": f"http://127.0.0.1:{port}",
    }
    for k, v in d.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("FW_DASHBOARD_TOKEN", raising=False)
    return d


@pytest.fixture
def dashboard(dirs):
    port = int(dirs["FW_TRACKING_URI"].rsplit(":", 1)[1])
    d = Dashboard(dirs, port)
    yield d
    d.stop()


def _loss_count(run: dict) -> int:
    return int(run.get("metrics", {}).get("loss", {}).get("count", 0))


def test_import_fw_stays_cheap():
    out = subprocess.run(
        [sys.executable, "-c", "import sys, fw, fw.track; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "python")},
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_run_round_trip(dashboard, dirs):
    import torch

    from fw.checkpoint import load
    from fw.models import DigitsMLP

    dashboard.start()
    torch.manual_seed(0)
    model = DigitsMLP(hidden=8)
    with fw.track.run(experiment="digits", params={"lr": 0.01, "layers": [8, 8]}, tags={"team": "a"}) as run:
        for step in range(1, 21):
            run.log({"loss": 1.0 / step, "acc": step / 20}, step=step)
            run.progress(step, 20, epoch=step / 10, epochs=2)
        run.tag("stage", "final")
        run.param("batch_size", 32)
        path = run.checkpoint(model, step=20, metrics={"val_loss": 0.05}, epoch=2)
        print("hello from training")
    r = dashboard.get(f"/api/runs/{run.id}")
    assert r["status"] == "finished"
    assert r["params"] == {"lr": 0.01, "layers": [8, 8], "batch_size": 32}
    assert r["tags"] == {"team": "a", "stage": "final"}
    assert r["metrics"]["loss"]["count"] == 20 and r["metrics"]["loss"]["last"] == pytest.approx(0.05)
    assert r["metrics"]["acc"]["max"] == 1.0
    assert r["progress"]["step"] == 20 and r["progress"]["total_epochs"] == 2
    assert r["source"]["pid"] == os.getpid() and r["source"]["host"] == socket.gethostname()
    lines = [x["line"] for x in dashboard.get(f"/api/runs/{run.id}/logs?tail=100")["lines"]]
    assert "hello from training" in lines
    series = dashboard.get(f"/api/runs/{run.id}/metrics?keys=loss&max_points=5")["series"]
    assert series[0]["key"] == "loss" and len(series[0]["buckets"]) <= 5
    assert path == Path(dirs["FW_CHECKPOINT_DIR"]) / run.id / "step-20.ckpt.pt" and path.exists()
    ck = load(path)
    assert ck.meta["metrics"] == {"val_loss": 0.05}
    assert isinstance(ck.model, DigitsMLP)
    assert run.spooled == 0 and run.errors == []


def test_exception_marks_failed(dashboard):
    dashboard.start()
    with pytest.raises(ValueError, match="boom"):
        with fw.track.run(experiment="digits") as run:
            run.log({"loss": 1.0}, step=0)
            raise ValueError("boom")
    r = dashboard.get(f"/api/runs/{run.id}")
    assert r["status"] == "failed"
    assert r["error"] == "ValueError: boom"
    assert "Traceback (most recent call last)" in r["traceback"] and "boom" in r["traceback"]


def test_system_metrics_of_the_training_process(dashboard):
    dashboard.start()
    with fw.track.run(experiment="digits", system_interval=0.05, capture_output=False) as run:
        deadline = time.monotonic() + 0.5
        x = 0
        while time.monotonic() < deadline:  # some CPU work to measure
            x += 1
        assert run.flush(10)
    series = dashboard.get(f"/api/runs/{run.id}/metrics?system=true&keys=cpu_percent,rss_mb,threads")
    keys = (
        {s["key"]: s for s in series} if isinstance(series, list) else {s["key"]: s for s in series["series"]}
    )
    assert {"cpu_percent", "rss_mb", "threads"} <= keys.keys(), series


def test_param_conflict_is_surfaced(dashboard, caplog):
    dashboard.start()
    with caplog.at_level(logging.WARNING, logger="fw.track"):
        with fw.track.run(experiment="digits", params={"lr": 0.1}, capture_output=False) as run:
            run.param("lr", 0.2)
            assert run.flush(10)
    assert [e["code"] for e in run.errors] == ["param_conflict"]
    assert any("param_conflict" in rec.getMessage() for rec in caplog.records)
    assert dashboard.get(f"/api/runs/{run.id}")["params"] == {"lr": 0.1}


def test_second_process_resumes_the_same_run(dashboard):
    dashboard.start()
    rid = fw.track.new_id()
    with fw.track.run(experiment="digits", params={"lr": 0.1}, run_id=rid, capture_output=False) as first:
        for step in range(1, 11):
            first.log({"loss": 1.0 / step}, step=step)
    assert dashboard.get(f"/api/runs/{rid}")["status"] == "finished"

    # Without resume the finished run stays finished (ordinary events keep the lifecycle guard).
    with fw.track.run(experiment="digits", run_id=rid, capture_output=False) as late:
        pass
    assert [e["code"] for e in late.errors] == ["invalid_transition"]  # its run_start

    # A second process (a new Run: a new writer, seq from 1 again) continues the same run.
    with fw.track.run(
        experiment="digits", params={"lr": 0.1}, run_id=rid, resume=True, capture_output=False
    ) as second:
        assert second.writer != first.writer
        assert "ended" not in dashboard.wait_run(rid, lambda r: r["status"] == "running")
        for step in range(10, 21):
            second.log({"loss": 1.0 / step}, step=step)
    assert second.errors == [], second.errors
    r = dashboard.get(f"/api/runs/{rid}")
    assert r["status"] == "finished" and r["params"] == {"lr": 0.1}
    # 10 + 11 writes, none dropped as a duplicate; step 10 was written twice and holds one point.
    assert r["metrics"]["loss"]["count"] == 21 and r["metrics"]["loss"]["last_step"] == 20
    buckets = dashboard.get(f"/api/runs/{rid}/metrics?keys=loss")["series"][0]["buckets"]
    assert [b["step_min"] for b in buckets] == list(range(1, 21))


def test_offline_spool_imported_once(dashboard, dirs):
    # No dashboard yet: everything goes to the spool file.
    with fw.track.run(experiment="offline", params={"lr": 0.1}, capture_output=False) as run:
        for step in range(300):
            run.log({"loss": 1.0 / (step + 1)}, step=step)
    assert run.sent == 0 and run.spooled >= 302
    spool = Path(dirs["FW_EXPERIMENT_DIR"]) / "spool" / f"{run.id}-{run.writer}.jsonl"
    assert spool.exists()
    dashboard.start()
    r = dashboard.wait_run(run.id, lambda r: r["status"] == "finished")
    assert _loss_count(r) == 300
    assert not spool.exists()
    # Restart, and even replay the same file: nothing is applied twice.
    spool.write_text("\n".join(json.dumps(e) for e in _events(run.id, run.writer, 300)) + "\n")
    dashboard.stop()
    dashboard.start()
    time.sleep(0.5)
    assert _loss_count(dashboard.get(f"/api/runs/{run.id}")) == 300
    assert not spool.exists()


def _events(run_id: str, writer: str, n: int) -> list[dict]:
    return [
        {
            "type": "metrics",
            "run_id": run_id,
            "writer": writer,
            "seq": i + 2,
            "step": i,
            "values": {"loss": 1.0},
        }
        for i in range(n)
    ]


TRAIN = textwrap.dedent(
    """
    import sys, time
    import torch
    import fw
    from fw.models import DigitsMLP

    model = DigitsMLP(hidden=8)
    state = {"step": 0}
    with fw.track.run(experiment="signals", params={"mode": sys.argv[1]}) as run:
        run.on_stop(lambda: run.checkpoint(model, step=state["step"]))
        for step in range(1_000_000):
            state["step"] = step
            run.log({"loss": 1.0 / (step + 1)}, step=step)
            if step % 100 == 99:
                run.flush(10)
                print(f"flushed {step + 1} {run.id}", flush=True)
            time.sleep(0.0005)
    """
)


def _start_training(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, int, str]:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    proc = subprocess.Popen(
        [sys.executable, str(script), mode],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"training exited early: {proc.stderr.read()}")
        if line.startswith("flushed"):
            _, n, run_id = line.split()
            if int(n) >= 300:
                return proc, int(n), run_id
    raise AssertionError("training never flushed 300 steps")


def test_sigterm_marks_stopped_with_final_checkpoint(dashboard, dirs, tmp_path):
    dashboard.start()
    proc, _, run_id = _start_training(tmp_path, "sigterm")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    r = dashboard.get(f"/api/runs/{run_id}")
    assert r["status"] == "stopped", r
    ckpts = list((Path(dirs["FW_CHECKPOINT_DIR"]) / run_id).glob("step-*.ckpt.pt"))
    assert len(ckpts) == 1
    last_step = int(ckpts[0].name.split("-")[1].split(".")[0])
    assert _loss_count(r) >= last_step  # everything logged before the signal arrived


def test_sigkill_keeps_acknowledged_and_reconciles(dashboard, tmp_path):
    dashboard.start()
    proc, flushed, run_id = _start_training(tmp_path, "sigkill")
    proc.kill()
    proc.communicate(timeout=30)
    r = dashboard.get(f"/api/runs/{run_id}")
    assert r["status"] == "running"
    assert _loss_count(r) >= flushed
    dashboard.stop()
    dashboard.start()
    r = dashboard.get(f"/api/runs/{run_id}")
    assert r["status"] == "failed" and "process vanished" in r["error"], r
    assert _loss_count(r) >= flushed


CAPTURE_CHILD = textwrap.dedent(
    """
    import sys, time
    import fw.track
    with fw.track.run(experiment="capture") as run:
        print("run", run.id, flush=True, file=sys.__stdout__)
        print("before")
        print("x" * (3 << 20))  # a 3 MiB line
        for i in range(1, 201):  # what tqdm writes to stderr: redraws, no newline
            sys.stderr.write(f"\\r{i * 100 // 200:3d}%|{'#' * (i // 20):<10}| {i}/200")
            sys.stderr.flush()
        sys.stderr.write("\\n")
        for i in range(5):
            print("after", i)
    """
)


def test_real_child_keeps_output_after_a_long_line_and_a_progress_bar(dashboard):
    dashboard.start()
    proc = subprocess.run([sys.executable, "-c", CAPTURE_CHILD], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_id = proc.stdout.split("run ", 1)[1].split()[0]
    dashboard.wait_run(run_id, lambda r: r["status"] == "finished")
    logs = dashboard.get(f"/api/runs/{run_id}/logs?tail=100")["lines"]
    out = [x["line"] for x in logs if x["stream"] == "stdout"]
    err = [x["line"] for x in logs if x["stream"] == "stderr"]
    assert out[0] == "before"
    assert out[1].startswith("xxxx") and out[1].endswith(" bytes]") and len(out[1].encode()) <= MAX_LOG_LINE
    assert out[2:] == [f"after {i}" for i in range(5)]
    assert err == ["100%|##########| 200/200"]


def test_no_tee_in_the_dashboards_own_job(monkeypatch):
    """A process the dashboard started for run R (FW_JOB_RUN_ID=R) has its output captured by the
    dashboard (pipes, or Ray's job log): fw.track.run(run_id=R) does not tee it a second time unless
    told to; any other run still tees."""
    rid = fw.track.new_id()
    monkeypatch.setenv("FW_JOB_RUN_ID", rid)
    assert fw.track.Run("e", run_id=rid)._capture is False
    assert fw.track.Run("e", run_id=rid, capture_output=True)._capture is True
    assert fw.track.Run("e", run_id=fw.track.new_id())._capture is True
    assert fw.track.Run("e")._capture is True
    monkeypatch.delenv("FW_JOB_RUN_ID")
    assert fw.track.Run("e", run_id=rid)._capture is True


def _download(dashboard: Dashboard, run_id: str, kind: str, path: str) -> bytes:
    q = urllib.parse.urlencode({"kind": kind, "path": path})
    with urllib.request.urlopen(f"{dashboard.url}/api/runs/{run_id}/download?{q}", timeout=10) as r:
        return r.read()


def test_files_upload_from_another_machine(dashboard, dirs, tmp_path, monkeypatch):
    """FW_UPLOAD_FILES=1: a process whose checkpoint and artifact directories the dashboard does not
    see (another machine) uploads its files; the dashboard serves them, byte for byte, from its own
    storage (here its checkpoint and artifact directories: no bucket), the events name the paths, and
    the files stay where the process wrote them."""
    import torch

    from fw.models import DigitsMLP

    dashboard.start()
    remote = tmp_path / "remote"
    monkeypatch.setenv("FW_CHECKPOINT_DIR", str(remote / "checkpoints"))
    monkeypatch.setenv("FW_ARTIFACT_DIR", str(remote / "artifacts"))
    monkeypatch.setenv("FW_UPLOAD_FILES", "1")
    report = tmp_path / "report.txt"
    report.write_text("accuracy 0.97\n")
    torch.manual_seed(0)
    with fw.track.run(experiment="remote") as run:
        ck = run.checkpoint(DigitsMLP(hidden=8), step=3)
        art = run.artifact(report)
    assert run.uploads is not None and run.uploads.failed == []
    assert sorted(run.uploads.uploaded) == [("artifact", "report.txt"), ("checkpoint", "step-3.ckpt.pt")]
    assert ck.parent == remote / "checkpoints" / run.id and ck.exists() and art.exists()
    # the dashboard's copy, in its own checkpoint directory (another path than the process's)
    assert (Path(dirs["FW_CHECKPOINT_DIR"]) / run.id / "step-3.ckpt.pt").read_bytes() == ck.read_bytes()
    cks = dashboard.get(f"/api/runs/{run.id}/checkpoints")["checkpoints"]
    assert [c["path"] for c in cks] == ["step-3.ckpt.pt"]
    assert _download(dashboard, run.id, "checkpoint", "step-3.ckpt.pt") == ck.read_bytes()
    assert _download(dashboard, run.id, "artifact", "report.txt") == b"accuracy 0.97\n"


def test_files_upload_failure_is_bounded_and_logged(dirs, tmp_path, monkeypatch, caplog):
    """With no dashboard answering, an upload is retried, then given up: ending the run waits at most
    upload_timeout, the failure is logged, and the file stays on local disk."""
    monkeypatch.setenv("FW_ARTIFACT_DIR", str(tmp_path / "artifacts"))
    monkeypatch.setenv("FW_TRACKING_URI", f"http://127.0.0.1:{_free_port()}")  # nothing listens
    monkeypatch.setenv("FW_UPLOAD_FILES", "1")
    f = tmp_path / "out.bin"
    f.write_bytes(b"x" * 100)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="fw.track"):
        with fw.track.run(
            experiment="offline", upload_timeout=2, flush_timeout=1, capture_output=False
        ) as run:
            dst = run.artifact(f)
        took = time.monotonic() - t0
        deadline = time.monotonic() + 10
        while not run.uploads.failed and time.monotonic() < deadline:
            time.sleep(0.05)
    assert took < 15, took
    assert dst.read_bytes() == b"x" * 100
    assert run.uploads.uploaded == [] and [x[:2] for x in run.uploads.failed] == [("artifact", "out.bin")]
    assert "did not finish within" in caplog.text or "uploading artifact out.bin" in caplog.text


def test_files_upload_refusal_is_not_retried(dashboard, dirs, tmp_path, monkeypatch):
    """A refusal that trying again cannot change (404: the run is unknown) is given up at once, with
    the dashboard's message."""
    from fw.track import _Uploader

    dashboard.start()
    f = tmp_path / "a.txt"
    f.write_text("a")
    up = _Uploader(dashboard.url, None, "nosuchrun", backoff=30)
    up.offer("artifact", "a.txt", f)
    t0 = time.monotonic()
    assert up.close(20)
    assert time.monotonic() - t0 < 10
    assert len(up.failed) == 1 and "HTTP 404" in up.failed[0][2] and "nosuchrun" in up.failed[0][2]


def test_log_reference_is_the_drift_reference(dashboard):
    """run.log_reference logs a seeded sample of the training rows as fw-reference.jsonl; the
    dashboard's drift compares a deployment's logged requests with it: requests like the training
    rows are stable, shifted ones drift; a dict of inputs and bad data are handled."""
    import numpy as np

    dashboard.start()
    rng = np.random.default_rng(0)
    train = rng.normal(0.0, 1.0, size=(5000, 64)).astype(np.float32)
    with fw.track.run(experiment="digits") as run:
        path = run.log_reference(train, max_rows=500)
        again = run.log_reference({"input": train}, max_rows=500)  # the same sample: seeded
    assert path == again and path.name == "fw-reference.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == 500
    rec = json.loads(lines[0])
    assert (
        rec["inputs"][0]["name"] == "input"
        and rec["inputs"][0]["shape"] == [1, 64]
        and len(rec["inputs"][0]["data"]) == 64
    )
    assert [a["path"] for a in dashboard.get(f"/api/runs/{run.id}/artifacts")["artifacts"]] == [
        "fw-reference.jsonl"
    ]

    def served(mean: float, n: int) -> None:
        now = time.time()
        recs = []
        for i in range(n):
            row = rng.normal(mean, 1.0, size=64)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{i:06d}Z"
            recs.append(
                {
                    "id": os.urandom(16).hex(),
                    "time": stamp,
                    "model": "digits",
                    "version": "1",
                    "latency_ms": 1.0,
                    "inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64], "data": row.tolist()}],
                    "outputs": [],
                }
            )
        req = urllib.request.Request(
            f"{dashboard.url}/api/payloads?deployment=dep",
            data=json.dumps(recs).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200

    def level() -> str:
        rep = dashboard.get(f"/api/payloads/drift?deployment=dep&reference_run={run.id}&records=200")
        assert rep["reference_run"] == run.id and rep["reference"]["records"] == 500
        return next(f["level"] for f in rep["features"] if f["name"] == "input mean")

    served(0.0, 200)
    assert level() == "stable"
    served(1.0, 200)
    assert level() == "drift"
    with fw.track.run(experiment="digits") as bad:
        with pytest.raises(ValueError, match="same number of rows"):
            bad.log_reference({"a": train[:3], "b": train[:4]})
        with pytest.raises(ValueError, match="max_rows"):
            bad.log_reference(train, max_rows=0)

        class Frame:  # as pandas gives them: rows through to_numpy(), column names when iterated
            def to_numpy(self):
                return train[:10]

            def __iter__(self):
                return iter(["c0", "c1"])

        # rows as a list of arrays, and as a torch tensor: the same numbers
        import torch

        def data_of(p: Path) -> list:
            return [json.loads(x)["inputs"][0]["data"] for x in p.read_text().splitlines()]

        as_list = data_of(bad.log_reference([train[0], train[1]], max_rows=2))
        assert as_list == data_of(bad.log_reference(torch.from_numpy(train[:2]), max_rows=2))
        assert as_list == [[float(v) for v in r] for r in train[:2]]
        rows = [
            json.loads(x)["inputs"][0]["data"]
            for x in bad.log_reference(Frame(), max_rows=10).read_text().splitlines()
        ]
        assert rows == [[float(v) for v in r] for r in train[:10]]
