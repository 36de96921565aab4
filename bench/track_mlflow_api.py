"""MLflow's own client code against an MLflow-compatible tracking server, for
`make bench-track` (bench/track.sh): the same calls, timed one by one, against
fw's dashboard and against MLflow's own ``mlflow server``.

Three commands:

- ``populate-fw URL``: the search workload into fw, through fw's ingest API
  (``--runs`` runs in experiment ``search10k``, each with a param, a tag and
  metrics ``acc`` and ``loss``).
- ``populate-mlflow DB_URI``: the same workload straight into MLflow's
  SQLAlchemy store (the database ``mlflow server`` then serves), because
  creating 10,000 runs through MLflow's server one request at a time takes
  minutes. Neither population is timed.
- ``bench URL``: the measured part, identical for both servers: ``create_run``,
  ``log_metric`` one metric per call, ``log_batch`` 10 metrics per call, and
  ``search_runs`` over the populated experiment with a metric filter and a
  metric order (``max_results`` 100, MLflow UI's page, and 1000, the client's
  default); then the model registry (create a registered model, a version from
  a run, an alias; read by alias; search models and versions) and MLflow 3's
  logged models (create; ``search_logged_models`` of an experiment). Every call is synchronous and timed on its own; one JSON line
  with calls/s, p50 and p99 per operation.

Runs with the MLflow venv (scripts/setup-mlflow-venv.sh), not the project's.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import urllib.parse
import urllib.request

EXPERIMENT = "search10k"


def _rows(n: int, seed: int = 0):
    rng = random.Random(seed)
    for i in range(n):
        yield i, rng.random(), rng.random(), rng.choice(["0.1", "0.01", "0.001"])


def populate_fw(url: str, runs: int) -> None:
    batch: list[dict] = []

    def flush() -> None:
        if not batch:
            return
        req = urllib.request.Request(
            url + "/api/ingest",
            data=json.dumps(batch).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            res = json.loads(r.read())
        if res["errors"]:
            sys.exit(f"populate-fw: {res['errors'][:3]}")
        batch.clear()

    for i, acc, loss, lr in _rows(runs):
        rid = f"s{i:06d}"
        batch.append(
            {
                "type": "run_start",
                "run_id": rid,
                "seq": 1,
                "experiment": EXPERIMENT,
                "params": {"lr": lr},
                "tags": {"group": f"g{i % 10}"},
            }
        )
        batch.append(
            {
                "type": "metrics",
                "run_id": rid,
                "seq": 2,
                "step": 0,
                "values": {"acc": acc, "loss": loss},
            }
        )
        batch.append({"type": "run_end", "run_id": rid, "seq": 3, "status": "finished"})
        if len(batch) >= 3000:
            flush()
    flush()


def populate_mlflow(db_uri: str, artifacts: str, runs: int) -> None:
    """One template run through MLflow's own SqlAlchemyStore (so the rows are
    exactly what MLflow writes), then its rows copied in SQL for the other runs
    with their own ID, name and values: creating 10,000 runs through the store
    one by one takes about 6 minutes here."""
    import sqlite3
    import uuid

    from mlflow.entities import Metric, Param, RunStatus, RunTag
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    rows = list(_rows(runs))
    st = SqlAlchemyStore(db_uri, artifacts)
    exp = st.create_experiment(EXPERIMENT)
    now = int(time.time() * 1000)
    _, acc0, loss0, lr0 = rows[0]
    r = st.create_run(exp, "bench", now, [RunTag("group", "g0")], "s000000")
    tid = r.info.run_id
    st.log_batch(
        tid,
        metrics=[Metric("acc", acc0, now, 0), Metric("loss", loss0, now, 0)],
        params=[Param("lr", lr0)],
        tags=[],
    )
    st.update_run_info(tid, RunStatus.FINISHED, now, None)
    st.engine.dispose()

    con = sqlite3.connect(db_uri.removeprefix("sqlite:///"))
    con.row_factory = sqlite3.Row
    tables = [
        t
        for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if any(c[1] == "run_uuid" for c in con.execute(f'PRAGMA table_info("{t}")'))
    ]
    template = {
        t: [
            dict(x)
            for x in con.execute(f'SELECT * FROM "{t}" WHERE run_uuid = ?', (tid,))
        ]
        for t in tables
    }
    for i, acc, loss, lr in rows[1:]:
        rid, name = uuid.uuid4().hex, f"s{i:06d}"
        values = {"acc": acc, "loss": loss}
        for t, trows in template.items():
            for row in trows:
                row = dict(row, run_uuid=rid)
                if t == "runs":
                    row["name"] = name
                    row["artifact_uri"] = row["artifact_uri"].replace(tid, rid)
                elif t in ("metrics", "latest_metrics") and row["key"] in values:
                    row["value"] = values[row["key"]]
                elif t == "params" and row["key"] == "lr":
                    row["value"] = lr
                elif t == "tags" and row["key"] == "mlflow.runName":
                    row["value"] = name
                elif t == "tags" and row["key"] == "group":
                    row["value"] = f"g{i % 10}"
                cols = ", ".join(f'"{c}"' for c in row)
                con.execute(
                    f'INSERT INTO "{t}" ({cols}) VALUES ({", ".join("?" * len(row))})',
                    list(row.values()),
                )
    con.commit()
    n = con.execute(
        "SELECT COUNT(*) FROM runs WHERE experiment_id = ?", (int(exp),)
    ).fetchone()[0]
    if n != runs:
        sys.exit(f"populate-mlflow: {n} runs, want {runs}")
    con.close()


def _stats(lat: list[float]) -> dict:
    lat = sorted(lat)
    p99 = lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))]
    return {
        "calls": len(lat),
        "seconds": sum(lat),
        "calls_per_s": len(lat) / sum(lat),
        "p50_ms": statistics.median(lat) * 1e3,
        "p99_ms": p99 * 1e3,
    }


def bench(
    url: str,
    creates: int,
    metric_calls: int,
    batch_calls: int,
    searches: int,
    registry_calls: int,
) -> dict:
    import mlflow
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    mlflow.set_tracking_uri(url)
    c = MlflowClient(url)
    exp = c.create_experiment(f"bench-{time.time_ns()}")
    out: dict = {"url": url, "mlflow": mlflow.__version__}

    def timed(fn, n):
        lat = []
        for i in range(n):
            t0 = time.perf_counter()
            fn(i)
            lat.append(time.perf_counter() - t0)
        return lat

    for _ in range(5):  # warm-up: connections, the first queries
        c.create_run(exp)
    out["create_run"] = _stats(timed(lambda i: c.create_run(exp), creates))

    run = c.create_run(exp).info.run_id
    ts = int(time.time() * 1000)
    out["log_metric"] = _stats(
        timed(
            lambda i: c.log_metric(run, "m", i * 0.001, timestamp=ts, step=i),
            metric_calls,
        )
    )
    keys = [f"k{j}" for j in range(10)]
    out["log_batch_10"] = _stats(
        timed(
            lambda i: c.log_batch(
                run,
                metrics=[Metric(k, i * 0.001, ts, i) for k in keys],
                synchronous=True,
            ),
            batch_calls,
        )
    )
    hist = c.get_metric_history(run, "k9")
    if len(hist) != batch_calls or len(c.get_metric_history(run, "m")) != metric_calls:
        sys.exit(f"bench: {url} stored {len(hist)} of {batch_calls} batch points")

    # Bulk logging: log_batch at MLflow's cap of 1000 metrics per call
    # (100 steps of 10 keys), new steps each call, into a fresh run.
    # points/s is 1000 x calls/s; the client's own share of a call (its
    # Metric objects, protobuf and JSON, no HTTP) is timed apart.
    bulk_run = c.create_run(exp).info.run_id
    bulk_calls = max(20, batch_calls // 5)

    def bulk(i):
        c.log_batch(
            bulk_run,
            metrics=[
                Metric(k, s * 0.001, ts, s)
                for s in range(i * 100, i * 100 + 100)
                for k in keys
            ],
            synchronous=True,
        )

    out["log_batch_1000"] = _stats(timed(bulk, bulk_calls))
    out["log_batch_1000"]["points_per_s"] = out["log_batch_1000"]["calls_per_s"] * 1000
    if len(c.get_metric_history(bulk_run, "k9")) != bulk_calls * 100:
        sys.exit(f"bench: {url} did not store every bulk point")
    from mlflow.protos.service_pb2 import LogBatch
    from mlflow.utils.proto_json_utils import message_to_json

    def client_only(i):
        ms = [
            Metric(k, s * 0.001, ts, s)
            for s in range(i * 100, i * 100 + 100)
            for k in keys
        ]
        message_to_json(LogBatch(run_id=bulk_run, metrics=[m.to_proto() for m in ms]))

    out["log_batch_1000_client"] = _stats(timed(client_only, 20))

    sx = c.get_experiment_by_name(EXPERIMENT)
    if sx is None:
        sys.exit(f"bench: {url} has no experiment {EXPERIMENT}; populate it first")
    flt, order = "metrics.acc > 0.5", ["metrics.acc DESC"]
    for max_results, n in ((100, searches), (1000, max(5, searches // 3))):

        def one(i, m=max_results):
            res = c.search_runs([sx.experiment_id], flt, max_results=m, order_by=order)
            if len(res) != m:
                sys.exit(f"bench: search_runs gave {len(res)} runs, want {m}")
            accs = [r.data.metrics["acc"] for r in res]
            if accs != sorted(accs, reverse=True) or min(accs) <= 0.5:
                sys.exit("bench: search_runs is not filtered and ordered by acc")

        one(0)  # warm-up
        out[f"search_runs_{max_results}"] = _stats(timed(one, n))
    # The same search as raw HTTP (the JSON answer read, not parsed into
    # MLflow's objects): the server's share of the client's figure.
    body = json.dumps(
        {
            "experiment_ids": [sx.experiment_id],
            "filter": flt,
            "order_by": order,
            "max_results": 100,
        }
    ).encode()

    def raw(i):
        req = urllib.request.Request(
            url + "/api/2.0/mlflow/runs/search",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            if len(json.loads(r.read())["runs"]) != 100:
                sys.exit("bench: the raw search did not answer 100 runs")

    raw(0)
    out["search_runs_100_http"] = _stats(timed(raw, searches))
    total = c.search_runs([sx.experiment_id], "", max_results=1, order_by=order)
    out["search_experiment_runs"] = "populated" if total else "empty"
    out.update(bench_registry(c, exp, run, registry_calls, searches))
    return out


def bench_registry(c, exp: str, run: str, n: int, searches: int) -> dict:
    """The model registry and MLflow 3's logged models: each call timed on its own,
    each answer checked."""
    out: dict = {}
    tag = f"bench{time.time_ns()}"

    def timed(fn, k):
        lat = []
        for i in range(k):
            t0 = time.perf_counter()
            fn(i)
            lat.append(time.perf_counter() - t0)
        return lat

    names = [f"{tag}-m{i:04d}" for i in range(n)]
    out["create_registered_model"] = _stats(
        timed(lambda i: c.create_registered_model(names[i]), n)
    )

    def version(i):
        v = c.create_model_version(names[i], f"runs:/{run}/model", run_id=run)
        if v.version != "1":
            sys.exit(f"bench: {names[i]} got version {v.version}, want 1")

    out["create_model_version"] = _stats(timed(version, n))
    out["set_registered_model_alias"] = _stats(
        timed(lambda i: c.set_registered_model_alias(names[i], "champion", "1"), n)
    )

    def by_alias(i):
        if c.get_model_version_by_alias(names[i], "champion").version != "1":
            sys.exit("bench: the alias does not name version 1")

    out["get_model_version_by_alias"] = _stats(timed(by_alias, n))
    want = min(n, 100)

    def search_models(i):
        got = c.search_registered_models(
            filter_string=f"name LIKE '{tag}-%'", max_results=100
        )
        if len(got) != want:
            sys.exit(f"bench: search_registered_models gave {len(got)}, want {want}")

    search_models(0)
    out["search_registered_models"] = _stats(timed(search_models, searches))
    # The same search as raw HTTP (the JSON answer read, not parsed into
    # MLflow's objects): the server's share of the client's figure.
    query = urllib.parse.urlencode(
        {"filter": f"name LIKE '{tag}-%'", "max_results": 100}
    )
    base = c.tracking_uri

    def raw_models(i):
        with urllib.request.urlopen(
            f"{base}/api/2.0/mlflow/registered-models/search?{query}", timeout=60
        ) as r:
            if len(json.loads(r.read())["registered_models"]) != want:
                sys.exit(
                    "bench: the raw registered-model search did not answer every model"
                )

    raw_models(0)
    out["search_registered_models_http"] = _stats(timed(raw_models, searches))

    def search_versions(i):
        got = c.search_model_versions(f"name = '{names[i % n]}'")
        if len(got) != 1:
            sys.exit(f"bench: search_model_versions gave {len(got)}, want 1")

    out["search_model_versions"] = _stats(timed(search_versions, searches))

    lm_exp = c.create_experiment(f"{tag}-logged-models")
    out["create_logged_model"] = _stats(
        timed(lambda i: c.create_logged_model(lm_exp, name=f"lm{i}"), n)
    )

    def search_logged(i):
        got = c.search_logged_models(experiment_ids=[lm_exp], max_results=100)
        if len(got) != want:
            sys.exit(f"bench: search_logged_models gave {len(got)}, want {want}")

    search_logged(0)
    out["search_logged_models"] = _stats(timed(search_logged, searches))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("populate-fw")
    p.add_argument("url")
    p.add_argument("--runs", type=int, default=10000)
    p = sub.add_parser("populate-mlflow")
    p.add_argument("db_uri")
    p.add_argument("--artifacts", required=True)
    p.add_argument("--runs", type=int, default=10000)
    p = sub.add_parser("bench")
    p.add_argument("url")
    p.add_argument("--creates", type=int, default=300)
    p.add_argument("--metric-calls", type=int, default=1000)
    p.add_argument("--batch-calls", type=int, default=500)
    p.add_argument("--searches", type=int, default=30)
    p.add_argument("--registry-calls", type=int, default=100)
    a = ap.parse_args()
    t0 = time.perf_counter()
    if a.cmd == "populate-fw":
        populate_fw(a.url, a.runs)
    elif a.cmd == "populate-mlflow":
        populate_mlflow(a.db_uri, a.artifacts, a.runs)
    else:
        print(
            json.dumps(
                bench(
                    a.url,
                    a.creates,
                    a.metric_calls,
                    a.batch_calls,
                    a.searches,
                    a.registry_calls,
                )
            ),
            flush=True,
        )
    print(f"{a.cmd}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
