"""MLflow's own client and SQLite tracking store, for `make bench-track` (bench/track.sh).

The same workload as bench/track_sdk.py: ``--steps`` steps of ``--keys`` metrics
(value ``step * 0.001``), one process, a fresh run per repeat in one store. Modes:

- ``log_batch``: ``MlflowClient().log_batch(run_id, metrics=[Metric(...), ...])``
  with as many metrics per call as MLflow allows (MAX_METRICS_PER_BATCH, 1000),
  i.e. 1000 / keys whole steps per call, the way MLflow's docs suggest for bulk
  logging.
- ``log_metrics``: ``mlflow.log_metrics({key: value, ...}, step=step)`` once per
  step, the fluent API most training code uses.

Everything is synchronous (MLFLOW_ENABLE_ASYNC_LOGGING is off by default), so
the time from the first call to the last one returning is end to end. The
point count is then checked in the store (SQL count on ``metrics`` and
``get_metric_history`` for one key). Prints one JSON line. Run it with the venv
bench/track.sh builds (mlflow is not in the project's .venv)::

    ~/.cache/fw/bench-mlflow-venv/bin/python bench/track_mlflow.py --mode log_batch
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["log_batch", "log_metrics"], default="log_batch")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--keys", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()

    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    import mlflow
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient
    from mlflow.utils.validation import MAX_METRICS_PER_BATCH

    tmp = tempfile.mkdtemp(prefix="fw-track-bench-mlflow-")
    db = f"{tmp}/mlflow.db"
    mlflow.set_tracking_uri(f"sqlite:///{db}")
    client = MlflowClient()
    exp_id = client.create_experiment("bench", artifact_location=f"file://{tmp}/art")
    keys = [f"metric_{i}" for i in range(a.keys)]
    steps_per_call = max(1, MAX_METRICS_PER_BATCH // a.keys)
    points = a.steps * a.keys
    runs = []
    for _ in range(a.repeat):
        run_id = client.create_run(exp_id).info.run_id
        if a.mode == "log_batch":
            t0 = time.perf_counter()
            batch: list = []
            for step in range(a.steps):
                ts = int(time.time() * 1000)
                batch += [Metric(k, step * 0.001, ts, step) for k in keys]
                if len(batch) + a.keys > MAX_METRICS_PER_BATCH:
                    client.log_batch(run_id, metrics=batch)
                    batch = []
            if batch:
                client.log_batch(run_id, metrics=batch)
            secs = time.perf_counter() - t0
        else:
            with mlflow.start_run(run_id=run_id):
                t0 = time.perf_counter()
                for step in range(a.steps):
                    mlflow.log_metrics({k: step * 0.001 for k in keys}, step=step)
                secs = time.perf_counter() - t0
        client.set_terminated(run_id)
        with sqlite3.connect(db) as con:
            (stored,) = con.execute(
                "SELECT COUNT(*) FROM metrics WHERE run_uuid = ?", (run_id,)
            ).fetchone()
        history = len(client.get_metric_history(run_id, keys[0]))
        if stored != points or history != a.steps:
            sys.exit(
                f"track_mlflow: stored {stored} points ({history} for {keys[0]}), want {points}"
            )
        runs.append(secs)
    secs = statistics.median(runs)
    print(
        json.dumps(
            {
                "client": "mlflow",
                "mode": a.mode,
                "mlflow": mlflow.__version__,
                "steps": a.steps,
                "keys": a.keys,
                "points": points,
                "stored": stored,
                "metrics_per_call": steps_per_call * a.keys
                if a.mode == "log_batch"
                else a.keys,
                "seconds": secs,
                "points_per_s": points / secs,
                "runs_seconds": runs,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
