"""Moving in: an MLflow server's experiment copied into fw with mlflow-export-import, unchanged (issue #23 item 6).

A real ``mlflow server`` (MLflow 3.17.2, SQLite, its own artifact store) gets 100 runs with params, tags,
metric histories and artifacts through MLflow's client; ``export-experiment`` writes them to a directory
and ``import-experiment`` (mlflow-export-import 1.2.0 from PyPI, as users run it) sends them to fw's
dashboard. Every run, param, user tag, metric history and artifact must arrive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

mlflow = pytest.importorskip(
    "mlflow", reason="mlflow is not installed: use scripts/setup-mlflow-venv.sh's venv"
)
pytest.importorskip(
    "mlflow_export_import", reason="mlflow-export-import is not installed: use the MLflow venv"
)

from conftest import _free_port  # noqa: E402
from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import Metric, Param  # noqa: E402

BIN = Path(sys.executable).parent
KEYS = ("loss", "acc", "lr")


def _mlflow_server(tmp_path: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp_path}/mlflow.db",
            "--artifacts-destination",
            str(tmp_path / "mlflow-artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=open(tmp_path / "mlflow-server.log", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return proc, url
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail("mlflow server did not start:\n" + (tmp_path / "mlflow-server.log").read_text()[-2000:])


def _tool(name: str, uri: str, *args: str) -> None:
    r = subprocess.run(
        [str(BIN / name), *args],
        env={**os.environ, "MLFLOW_TRACKING_URI": uri},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"{name}: {r.stdout[-2000:]}\n{r.stderr[-4000:]}"


def test_export_import_an_experiment_of_100_runs(dashboard, tmp_path):
    proc, src_uri = _mlflow_server(tmp_path)
    try:
        src = MlflowClient(src_uri)
        exp = src.create_experiment("sweep")
        note = tmp_path / "note.txt"
        note.write_text("hello artifact\n")
        for i in range(100):
            rid = src.create_run(exp, run_name=f"trial-{i}", tags={"team": "vision", "i": str(i)}).info.run_id
            metrics = [Metric(k, i * 0.01 + s, 1_700_000_000_000 + s, s) for k in KEYS for s in range(5)]
            src.log_batch(rid, metrics=metrics, params=[Param("lr", str(0.001 * i)), Param("bs", "32")])
            if i % 10 == 0:
                src.log_artifact(rid, str(note))
            src.set_terminated(rid)
        out = tmp_path / "export"
        _tool("export-experiment", src_uri, "--experiment", "sweep", "--output-dir", str(out))
        _tool("import-experiment", dashboard.url, "--experiment-name", "sweep", "--input-dir", str(out))

        dst = MlflowClient(dashboard.url)
        dst_exp = dst.get_experiment_by_name("sweep")
        before = {r.info.run_name: r for r in src.search_runs([exp], max_results=1000)}
        after = {r.info.run_name: r for r in dst.search_runs([dst_exp.experiment_id], max_results=1000)}
        assert sorted(after) == sorted(before) and len(after) == 100
        artifacts = 0
        for name, r in before.items():
            q = after[name]
            assert q.data.params == r.data.params, name
            user = {k: v for k, v in r.data.tags.items() if not k.startswith("mlflow.")}
            assert {k: v for k, v in q.data.tags.items() if not k.startswith("mlflow.")} == user, name
            assert q.info.status == "FINISHED", name
            for key in KEYS:
                h1 = sorted((m.step, m.value) for m in src.get_metric_history(r.info.run_id, key))
                h2 = sorted((m.step, m.value) for m in dst.get_metric_history(q.info.run_id, key))
                assert h2 == h1 and len(h1) == 5, (name, key)
            files = [f.path for f in dst.list_artifacts(q.info.run_id)]
            assert files == [f.path for f in src.list_artifacts(r.info.run_id)], name
            if files:
                artifacts += 1
                got = Path(
                    dst.download_artifacts(q.info.run_id, "note.txt", str(tmp_path / name))
                ).read_text()
                assert got == "hello artifact\n"
        assert artifacts == 10
        # fw's own API sees the same runs.
        assert dashboard.experiment(dst_exp.experiment_id)["runs"] == 100
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
