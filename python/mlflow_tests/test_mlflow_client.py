"""MLflow's own client (mlflow, pinned in requirements.txt) against fw's MLflow tracking API.

Every test drives a real `fw dashboard` through MLflow's client (fluent API and MlflowClient) and
then checks what landed through fw's own API (GET /api/...), so both views of the same store agree.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import re
from pathlib import Path

import pytest

mlflow = pytest.importorskip(
    "mlflow", reason="mlflow is not installed: use scripts/setup-mlflow-venv.sh's venv"
)

import yaml  # noqa: E402  (an MLflow dependency)
from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import Metric, Param, RunTag, ViewType  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402

T0 = 1_700_000_000_000  # explicit MLflow timestamps (ms): 2023-11-14T22:13:20Z


def _ms(iso: str) -> int:
    """An fw RFC 3339 time as Unix milliseconds (exact integer arithmetic, floored)."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", iso)
    assert m, iso
    head, frac, tz = m.groups()
    when = dt.datetime.fromisoformat(head + (tz if tz != "Z" else "+00:00"))
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (when - epoch) // dt.timedelta(milliseconds=1) + int((frac or "0")[:3].ljust(3, "0"))


# -- experiments ---------------------------------------------------------------------------------


def test_set_experiment_creates_then_reuses(dashboard, client):
    exp = mlflow.set_experiment("vision")
    assert exp.name == "vision" and exp.lifecycle_stage == "active"
    fw_exp = dashboard.experiment("vision")
    assert fw_exp["id"] == exp.experiment_id and fw_exp["archived"] is False

    again = mlflow.set_experiment("vision")  # existing: the same experiment, no second one
    assert again.experiment_id == exp.experiment_id
    assert [e["name"] for e in dashboard.experiments()].count("vision") == 1
    assert mlflow.set_experiment(experiment_id=exp.experiment_id).name == "vision"

    with mlflow.start_run() as run:  # runs go to the active experiment
        pass
    assert run.info.experiment_id == exp.experiment_id
    assert dashboard.run(run.info.run_id)["experiment"] == "vision"
    assert dashboard.experiment("vision")["runs"] == 1

    eid = client.create_experiment("audio", tags={"team": "speech"})
    assert client.get_experiment(eid).tags["team"] == "speech"
    assert dashboard.experiment("audio")["tags"]["team"] == "speech"
    assert client.get_experiment_by_name("audio").experiment_id == eid
    assert client.get_experiment_by_name("no-such-experiment") is None
    with pytest.raises(MlflowException) as e:
        client.create_experiment("audio")
    assert e.value.error_code == "RESOURCE_ALREADY_EXISTS"


def test_default_experiment_is_zero(dashboard, client):
    default = client.get_experiment("0")
    assert (default.experiment_id, default.name, default.lifecycle_stage) == ("0", "Default", "active")
    assert client.get_experiment_by_name("Default").experiment_id == "0"

    with mlflow.start_run() as run:  # no experiment set: MLflow's client uses "0"
        mlflow.log_param("where", "default")
    assert run.info.experiment_id == "0"
    fw_run = dashboard.run(run.info.run_id)
    assert fw_run["experiment"] == "Default"
    assert fw_run["experiment_id"] == dashboard.experiment("Default")["id"]
    assert fw_run["params"] == {"where": "default"}
    assert [r.info.run_id for r in client.search_runs(["0"])] == [run.info.run_id]
    assert client.get_run(run.info.run_id).info.experiment_id == "0"
    listed = {e.name: e.experiment_id for e in client.search_experiments()}
    assert listed["Default"] == "0"


def test_delete_restore_and_search_experiments(dashboard, client):
    ids = {
        name: client.create_experiment(name, tags={"group": group})
        for name, group in [("proj-a", "x"), ("proj-b", "y"), ("proj-c", "x"), ("other", "x")]
    }

    def names(**kw) -> list[str]:
        return [e.name for e in client.search_experiments(**kw)]

    assert names(filter_string="name LIKE 'proj-%'", order_by=["name ASC"]) == ["proj-a", "proj-b", "proj-c"]
    assert names(filter_string="tags.group = 'x'", order_by=["name DESC"]) == ["proj-c", "proj-a", "other"]
    # paging: max_results and page_token
    first = client.search_experiments(
        filter_string="name LIKE 'proj-%'", order_by=["name ASC"], max_results=2
    )
    assert [e.name for e in first] == ["proj-a", "proj-b"] and first.token
    rest = client.search_experiments(
        filter_string="name LIKE 'proj-%'", order_by=["name ASC"], max_results=2, page_token=first.token
    )
    assert [e.name for e in rest] == ["proj-c"] and not rest.token

    client.delete_experiment(ids["proj-b"])
    gone = client.get_experiment(ids["proj-b"])
    assert gone.lifecycle_stage == "deleted"
    assert client.get_experiment_by_name("proj-b").lifecycle_stage == "deleted"
    assert dashboard.experiment("proj-b")["archived"] is True
    assert names(filter_string="name LIKE 'proj-%'", order_by=["name ASC"]) == ["proj-a", "proj-c"]
    assert names(view_type=ViewType.DELETED_ONLY) == ["proj-b"]
    assert {"proj-a", "proj-b", "proj-c", "other"} <= set(names(view_type=ViewType.ALL))
    with pytest.raises(MlflowException):  # no new runs in a deleted experiment
        client.create_run(ids["proj-b"])

    client.restore_experiment(ids["proj-b"])
    assert client.get_experiment(ids["proj-b"]).lifecycle_stage == "active"
    assert dashboard.experiment("proj-b")["archived"] is False
    assert names(view_type=ViewType.DELETED_ONLY) == []
    run = client.create_run(ids["proj-b"])
    assert dashboard.run(run.info.run_id)["experiment"] == "proj-b"


# -- runs: params, tags, metrics, lifecycle ------------------------------------------------------


def test_run_params_tags_metrics_round_trip(dashboard, client):
    mlflow.set_experiment("roundtrip")
    name = "resnet #1 (lr=0.1)"  # '#', '(' and ')' are not allowed in fw run names
    with mlflow.start_run(run_name=name, tags={"team": "vision"}, description="first try") as run:
        rid = run.info.run_id
        mlflow.log_param("lr", 0.1)
        mlflow.log_params({"batch_size": 32, "optimizer": "adam", "layers": [64, 32]})
        mlflow.set_tag("stage", "dev")
        mlflow.set_tags({"owner": "ml", "temp": "x"})
        mlflow.delete_tag("temp")
        for step in range(5):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step, timestamp=T0 + step * 1000)
        mlflow.log_metrics({"acc": 0.5, "f1": 0.25}, step=7, timestamp=T0 + 9000)
        mlflow.log_metrics({"acc": 0.75, "f1": 0.5}, step=8, timestamp=T0 + 10000)
        mlflow.log_metric("no_step", 3.5, timestamp=T0)  # step defaults to 0
        assert dashboard.run(rid)["status"] == "running"

    params = {"lr": "0.1", "batch_size": "32", "optimizer": "adam", "layers": "[64, 32]"}
    got = client.get_run(rid)
    assert got.info.run_name == name  # unchanged, from the mlflow.runName tag
    assert got.info.status == "FINISHED" and got.info.end_time >= got.info.start_time
    assert got.info.lifecycle_stage == "active"
    assert got.data.params == params
    tags = got.data.tags
    assert (tags["team"], tags["stage"], tags["owner"]) == ("vision", "dev", "ml")
    assert tags["mlflow.runName"] == name and tags["mlflow.note.content"] == "first try"
    assert "temp" not in tags and not any(k.startswith("fw.") for k in tags)
    assert got.data.metrics == {"loss": 0.2, "acc": 0.75, "f1": 0.5, "no_step": 3.5}
    hist = client.get_metric_history(rid, "loss")
    assert [(m.key, m.step, m.value, m.timestamp) for m in hist] == [
        ("loss", s, 1.0 / (s + 1), T0 + s * 1000) for s in range(5)
    ]
    assert [(m.step, m.value, m.timestamp) for m in client.get_metric_history(rid, "f1")] == [
        (7, 0.25, T0 + 9000),
        (8, 0.5, T0 + 10000),
    ]
    assert [(m.step, m.value) for m in client.get_metric_history(rid, "no_step")] == [(0, 3.5)]

    r = dashboard.run(rid)
    assert r["status"] == "finished" and r["ended"]
    assert r["name"] == "resnet -1 -lr=0.1-"
    assert r["params"] == params
    assert {k: r["tags"][k] for k in ("team", "stage", "owner", "mlflow.runName")} == {
        "team": "vision",
        "stage": "dev",
        "owner": "ml",
        "mlflow.runName": name,
    }
    assert "temp" not in r["tags"]
    assert dashboard.points(rid, "loss") == [(s, 1.0 / (s + 1)) for s in range(5)]
    assert dashboard.points(rid, "acc") == [(7, 0.5), (8, 0.75)]
    loss = r["metrics"]["loss"]
    assert (loss["count"], loss["last"], loss["last_step"], loss["min"], loss["max"]) == (5, 0.2, 4, 0.2, 1.0)
    assert _ms(loss["last_time"]) == T0 + 4000

    # Renaming through MLflow (the mlflow.runName tag) renames the fw run too.
    client.set_tag(rid, "mlflow.runName", "resnet v2")
    assert client.get_run(rid).info.run_name == "resnet v2"
    assert dashboard.run(rid)["name"] == "resnet v2"


def test_nested_runs_record_their_parent(dashboard, client):
    exp = mlflow.set_experiment("hpo")
    children = []
    with mlflow.start_run(run_name="sweep") as parent:
        for i in range(2):
            with mlflow.start_run(run_name=f"trial-{i}", nested=True) as child:
                mlflow.log_param("trial", i)
                children.append(child.info.run_id)
        assert mlflow.active_run().info.run_id == parent.info.run_id
    pid = parent.info.run_id
    for i, cid in enumerate(children):
        got = client.get_run(cid)
        assert got.data.tags["mlflow.parentRunId"] == pid
        assert got.data.params == {"trial": str(i)} and got.info.status == "FINISHED"
        fw_child = dashboard.run(cid)
        assert fw_child["tags"]["mlflow.parentRunId"] == pid
        assert fw_child["name"] == f"trial-{i}" and fw_child["status"] == "finished"
    assert "mlflow.parentRunId" not in client.get_run(pid).data.tags
    found = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{pid}'")
    assert sorted(r.info.run_id for r in found) == sorted(children)
    fw_runs = dashboard.runs("hpo")
    assert sorted(r["id"] for r in fw_runs) == sorted([pid, *children])
    assert {r["status"] for r in fw_runs} == {"finished"}


def test_end_run_statuses_map_to_fw(dashboard, client):
    mlflow.set_experiment("statuses")
    ended = {}
    for status in ("FINISHED", "FAILED", "KILLED"):
        run = mlflow.start_run(run_name=f"end-{status.lower()}")
        assert dashboard.run(run.info.run_id)["status"] == "running"
        assert client.get_run(run.info.run_id).info.status == "RUNNING"
        mlflow.end_run(status=status)
        ended[status] = run.info.run_id
    with pytest.raises(ZeroDivisionError):  # an exception in the with block: FAILED
        with mlflow.start_run(run_name="raises") as boom:
            1 / 0  # noqa: B018
    ended["raised"] = boom.info.run_id
    scheduled = client.create_run(
        mlflow.get_experiment_by_name("statuses").experiment_id, run_name="killed-api"
    )
    client.set_terminated(scheduled.info.run_id, "KILLED")
    ended["api"] = scheduled.info.run_id

    want = {
        "FINISHED": ("FINISHED", "finished"),
        "FAILED": ("FAILED", "failed"),
        "KILLED": ("KILLED", "stopped"),
        "raised": ("FAILED", "failed"),
        "api": ("KILLED", "stopped"),
    }
    for key, (ml_status, fw_status) in want.items():
        got = client.get_run(ended[key])
        assert got.info.status == ml_status, key
        assert got.info.end_time is not None and got.info.end_time >= got.info.start_time, key
        r = dashboard.run(ended[key])
        assert r["status"] == fw_status, (key, r)
        assert abs(_ms(r["ended"]) - got.info.end_time) <= 1, (key, r["ended"], got.info.end_time)


def test_delete_and_restore_run(dashboard, client):
    exp_id = client.create_experiment("lifecycle")
    keep = client.create_run(exp_id, run_name="keep").info.run_id
    gone = client.create_run(exp_id, run_name="gone").info.run_id
    client.log_param(gone, "p", "1")

    def ids(view) -> list[str]:
        return sorted(r.info.run_id for r in client.search_runs([exp_id], run_view_type=view))

    client.delete_run(gone)
    got = client.get_run(gone)
    assert got.info.lifecycle_stage == "deleted" and "fw.lifecycle" not in got.data.tags
    assert ids(ViewType.ACTIVE_ONLY) == [keep]
    assert [r.info.run_id for r in client.search_runs([exp_id])] == [keep]  # the default view
    assert ids(ViewType.DELETED_ONLY) == [gone]
    assert ids(ViewType.ALL) == sorted([keep, gone])
    assert dashboard.run(gone)["tags"].get("fw.lifecycle") == "deleted"  # fw's own API still shows it
    assert "fw.lifecycle" not in dashboard.run(keep)["tags"]
    assert sorted(r["id"] for r in dashboard.runs("lifecycle")) == sorted([keep, gone])

    client.restore_run(gone)
    got = client.get_run(gone)
    assert got.info.lifecycle_stage == "active" and got.data.params == {"p": "1"}
    assert ids(ViewType.ACTIVE_ONLY) == sorted([keep, gone])
    assert ids(ViewType.DELETED_ONLY) == []
    assert "fw.lifecycle" not in dashboard.run(gone)["tags"]


# -- artifacts -----------------------------------------------------------------------------------


def test_artifacts_round_trip(dashboard, client, tmp_path):
    mlflow.set_experiment("artifacts")
    blob = random.Random(0).randbytes(300_000)  # every byte value, not valid UTF-8
    src = tmp_path / "src"
    (src / "tree" / "sub").mkdir(parents=True)
    (src / "model.bin").write_bytes(blob)
    (src / "tree" / "a.txt").write_bytes(b"alpha\n")
    (src / "tree" / "sub" / "b.csv").write_bytes(b"x,y\n1,2\n")
    config = {"lr": 0.1, "layers": [64, 32], "name": "héllo"}
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(src / "model.bin"))
        mlflow.log_artifact(str(src / "model.bin"), artifact_path="weights")
        mlflow.log_artifacts(str(src / "tree"), artifact_path="tree")
        mlflow.log_text("héllo wörld\n", "notes/readme.txt")
        mlflow.log_dict(config, "config/params.json")
        mlflow.log_dict(config, "config/params.yaml")
    rid = run.info.run_id
    assert run.info.artifact_uri.endswith(f"/{rid}/artifacts")

    listing = client.list_artifacts(rid)
    assert [(f.path, f.is_dir) for f in listing] == [
        ("config", True),
        ("model.bin", False),
        ("notes", True),
        ("tree", True),
        ("weights", True),
    ]
    assert [f.file_size for f in listing if not f.is_dir] == [len(blob)]
    assert [(f.path, f.is_dir) for f in client.list_artifacts(rid, "tree")] == [
        ("tree/a.txt", False),
        ("tree/sub", True),
    ]
    assert [(f.path, f.file_size) for f in client.list_artifacts(rid, "tree/sub")] == [("tree/sub/b.csv", 8)]

    # Everything back, through MLflow's download (the whole root, then one file).
    dst = Path(mlflow.artifacts.download_artifacts(run_id=rid, dst_path=str(tmp_path / "all")))
    files = {p.relative_to(dst).as_posix(): p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    known = {
        "model.bin": blob,
        "weights/model.bin": blob,
        "tree/a.txt": b"alpha\n",
        "tree/sub/b.csv": b"x,y\n1,2\n",
        "notes/readme.txt": "héllo wörld\n".encode(),
    }
    assert set(files) == set(known) | {"config/params.json", "config/params.yaml"}
    for rel, data in known.items():
        assert files[rel] == data, rel
    assert json.loads(files["config/params.json"]) == config
    one = mlflow.artifacts.download_artifacts(
        run_id=rid, artifact_path="weights/model.bin", dst_path=str(tmp_path / "one")
    )
    assert Path(one).read_bytes() == blob
    assert mlflow.artifacts.load_text(f"runs:/{rid}/notes/readme.txt") == "héllo wörld\n"
    assert mlflow.artifacts.load_dict(f"runs:/{rid}/config/params.json") == config
    assert yaml.safe_load(files["config/params.yaml"]) == config

    # fw's own API lists and serves the same files.
    assert dashboard.artifacts(rid) == {rel: len(data) for rel, data in files.items()}
    for rel, data in files.items():
        assert dashboard.download(rid, rel) == data, rel


# -- search --------------------------------------------------------------------------------------

# name, lr, seed, x, tag t, final status
SEARCH_RUNS = [
    ("alpha-1", "0.01", "s3", 0.95, "v", "FINISHED"),
    ("alpha-2", "0.1", "s1", 0.50, "v", "FAILED"),
    ("beta-1", "0.01", "s5", 0.99, "w", "FINISHED"),
    ("beta-2", "0.001", "s2", 0.10, None, "KILLED"),
    ("gamma", "0.01", "s4", 0.70, "v", "FINISHED"),
    ("delta", "0.5", "s0", 0.91, "v", "RUNNING"),
]


def _search_runs(client: MlflowClient, exp_id: str) -> dict[str, str]:
    """The runs of SEARCH_RUNS, started a minute apart (explicit start_time), as {name: run id}."""
    ids = {}
    for i, (name, lr, seed, x, t, status) in enumerate(SEARCH_RUNS):
        start = T0 + i * 60_000
        run = client.create_run(exp_id, start_time=start, run_name=name, tags={"t": t} if t else None)
        rid = run.info.run_id
        client.log_batch(
            rid, metrics=[Metric("x", x, start + 1, 0)], params=[Param("lr", lr), Param("seed", seed)]
        )
        if status != "RUNNING":
            client.set_terminated(rid, status)
        ids[name] = rid
    return ids


def test_search_runs_filters_and_order(dashboard, client):
    exp_id = client.create_experiment("search")
    ids = _search_runs(client, exp_id)
    by_id = {v: k for k, v in ids.items()}

    def names(filter_string: str = "", order_by: list[str] | None = None) -> list[str]:
        return [by_id[r.info.run_id] for r in client.search_runs([exp_id], filter_string, order_by=order_by)]

    def matching(filter_string: str) -> list[str]:
        return sorted(names(filter_string))

    assert matching("metrics.x > 0.9") == ["alpha-1", "beta-1", "delta"]
    assert matching("params.lr = '0.01'") == ["alpha-1", "beta-1", "gamma"]
    assert matching("tags.t = 'v'") == ["alpha-1", "alpha-2", "delta", "gamma"]
    assert matching("attributes.status = 'FINISHED'") == ["alpha-1", "beta-1", "gamma"]
    assert matching("attributes.status = 'RUNNING'") == ["delta"]
    assert matching("attributes.run_name LIKE 'alpha%'") == ["alpha-1", "alpha-2"]
    assert matching("metrics.x > 0.9 AND params.lr = '0.01' AND tags.t = 'v'") == ["alpha-1"]
    assert matching("attributes.run_name LIKE '%-1' AND metrics.x >= 0.99") == ["beta-1"]
    assert matching("attributes.status = 'FINISHED' AND metrics.x < 0.9") == ["gamma"]
    assert matching("params.lr = '0.3'") == []

    order = [n for n, *_ in SEARCH_RUNS]
    assert names() == order[::-1]  # MLflow's default: start_time DESC
    assert names(order_by=["attributes.start_time ASC"]) == order
    assert names(order_by=["attributes.start_time DESC"]) == order[::-1]
    assert names(order_by=["metrics.x DESC"]) == ["beta-1", "alpha-1", "delta", "gamma", "alpha-2", "beta-2"]
    assert names(order_by=["params.seed ASC"]) == ["delta", "alpha-2", "beta-2", "alpha-1", "gamma", "beta-1"]
    assert names("tags.t = 'v'", ["metrics.x ASC"]) == ["alpha-2", "gamma", "delta", "alpha-1"]

    # A search result carries the whole run.
    (hit,) = client.search_runs([exp_id], "attributes.run_name LIKE 'beta-2'")
    assert hit.info.run_id == ids["beta-2"] and hit.info.status == "KILLED"
    assert hit.info.start_time == T0 + 3 * 60_000
    assert hit.data.params == {"lr": "0.001", "seed": "s2"} and hit.data.metrics == {"x": 0.10}
    assert "t" not in hit.data.tags and hit.data.tags["mlflow.runName"] == "beta-2"

    # fw's view of the same runs.
    fw_runs = {r["name"]: r for r in dashboard.runs("search")}
    fw_status = {"FINISHED": "finished", "FAILED": "failed", "KILLED": "stopped", "RUNNING": "running"}
    assert {n: (r["id"], r["status"]) for n, r in fw_runs.items()} == {
        name: (ids[name], fw_status[status]) for name, *_, status in SEARCH_RUNS
    }
    assert {n: r["params"]["lr"] for n, r in fw_runs.items()} == {name: lr for name, lr, *_ in SEARCH_RUNS}
    assert _ms(fw_runs["gamma"]["started"]) == T0 + 4 * 60_000


def test_search_runs_by_an_mlflow_run_name_fw_had_to_change(dashboard, client):
    # fw's run name is "resnet -1 -lr=0.1-"; MLflow's client shows (and filters by) "resnet #1 (lr=0.1)".
    exp_id = client.create_experiment("names")
    rid = client.create_run(exp_id, run_name="resnet #1 (lr=0.1)").info.run_id
    client.create_run(exp_id, run_name="other")
    assert dashboard.run(rid)["name"] == "resnet -1 -lr=0.1-"
    assert [r.info.run_name for r in client.search_runs([exp_id], "tags.mlflow.runName LIKE 'resnet%'")] == [
        "resnet #1 (lr=0.1)"
    ]
    for f in ("attributes.run_name = 'resnet #1 (lr=0.1)'", "attributes.run_name LIKE 'resnet #1%'"):
        assert [r.info.run_id for r in client.search_runs([exp_id], f)] == [rid], f


@pytest.mark.parametrize(
    "order_by, page_size",
    [(None, 4), (["metrics.x DESC"], 4), (["params.seed ASC"], 1), (["attributes.start_time ASC"], 3)],
)
def test_search_runs_pages_cover_every_run_once(dashboard, client, order_by, page_size):
    exp_id = client.create_experiment("paging")
    ids = _search_runs(client, exp_id)
    full = [r.info.run_id for r in client.search_runs([exp_id], order_by=order_by, max_results=1000)]
    assert sorted(full) == sorted(ids.values())
    pages: list[list[str]] = []
    token = None
    while True:
        page = client.search_runs([exp_id], order_by=order_by, max_results=page_size, page_token=token)
        pages.append([r.info.run_id for r in page])
        assert len(page) <= page_size
        token = page.token
        if not token:
            break
        assert len(page) == page_size, "a page before the last one is short"
        assert len(pages) <= len(ids) + 1, "paging does not end"
    assert [rid for p in pages for rid in p] == full  # every run exactly once, in the same order
    assert all(pages[:-1]) and len(pages) in (-(-len(ids) // page_size), -(-len(ids) // page_size) + 1)


@pytest.mark.parametrize("order_by", [None, ["metrics.x DESC"], ["params.seed ASC"]])
def test_search_runs_of_two_experiments(dashboard, client, order_by):
    # Both experiments' runs start at the same times: ties across them are
    # ordered by run ID, through every page.
    exps = [client.create_experiment("left"), client.create_experiment("right")]
    ids = [*_search_runs(client, exps[0]).values(), *_search_runs(client, exps[1]).values()]
    full = client.search_runs(exps, order_by=order_by, max_results=1000)
    assert sorted(r.info.run_id for r in full) == sorted(ids)
    if order_by is None:  # MLflow's default: start_time descending, then run ID
        assert [r.info.run_id for r in full] == [
            r.info.run_id for r in sorted(full, key=lambda r: (-r.info.start_time, r.info.run_id))
        ]
    pages, token = [], None
    while True:
        page = client.search_runs(exps, order_by=order_by, max_results=3, page_token=token)
        pages += [r.info.run_id for r in page]
        token = page.token
        if not token:
            break
        assert len(page) == 3, "a page before the last one is short"
    assert pages == [r.info.run_id for r in full]


def test_metric_history_over_several_pages(dashboard, client, monkeypatch):
    from mlflow.store.tracking.rest_store import RestStore
    from mlflow.tracking._tracking_service import client as tracking_client

    exp_id = client.create_experiment("history")
    rid = client.create_run(exp_id).info.run_id
    n = 2500
    loss = [Metric("loss", 1.0 / (s + 1), T0 + 7 * s, s) for s in range(n)]
    for i in range(0, n, 1000):  # MLflow's log_batch takes at most 1000 metrics
        client.log_batch(rid, metrics=loss[i : i + 1000])
    client.log_batch(rid, metrics=[Metric("acc", s / 10, T0 + s, s) for s in range(10)])

    # MLflow's client pages get_metric_history by 25,000; with 1,000 per page the 2,500 points take
    # three pages, each fetched with the previous answer's next_page_token.
    calls: list[tuple[int | None, bool, int]] = []
    real = RestStore.get_metric_history

    def spy(self, run_id, metric_key, max_results=None, page_token=None):
        page = real(self, run_id, metric_key, max_results=max_results, page_token=page_token)
        calls.append((max_results, page_token is not None, len(page)))
        return page

    monkeypatch.setattr(RestStore, "get_metric_history", spy)
    monkeypatch.setattr(tracking_client, "GET_METRIC_HISTORY_MAX_RESULTS", 1000)
    hist = client.get_metric_history(rid, "loss")
    assert [(m.key, m.step, m.value, m.timestamp) for m in hist] == [
        (m.key, m.step, m.value, m.timestamp) for m in loss
    ]
    assert [c for c in calls if c[2]] == [(1000, False, 1000), (1000, True, 1000), (1000, True, 500)]
    assert len(calls) <= 4  # at most one trailing empty page
    assert [(m.step, m.value) for m in client.get_metric_history(rid, "acc")] == [
        (s, s / 10) for s in range(10)
    ]
    assert client.get_metric_history(rid, "never-logged") == []
    monkeypatch.setattr(tracking_client, "GET_METRIC_HISTORY_MAX_RESULTS", 25000)
    calls.clear()
    assert len(client.get_metric_history(rid, "loss")) == n and len(calls) == 1
    assert client.get_run(rid).data.metrics == {"loss": 1.0 / n, "acc": 0.9}

    # A second value at a step: MLflow's history keeps both (ordered by time, then value), as
    # MLflow's server does, within a batch too; fw's own series shows the last per step.
    client.log_metric(rid, "dup", 1.0, timestamp=T0, step=5)
    client.log_metric(rid, "dup", 2.0, timestamp=T0 + 1, step=5)
    client.log_metric(rid, "dup", 2.0, timestamp=T0 + 1, step=5)  # the same again: kept once
    client.log_batch(rid, metrics=[Metric("dup", 4.0, T0 + 3, 6), Metric("dup", 3.0, T0 + 2, 6)])
    assert [(m.step, m.value, m.timestamp) for m in client.get_metric_history(rid, "dup")] == [
        (5, 1.0, T0),
        (5, 2.0, T0 + 1),
        (6, 3.0, T0 + 2),
        (6, 4.0, T0 + 3),
    ]
    client.set_terminated(rid)

    assert dashboard.points(rid, "loss") == [(m.step, m.value) for m in loss]
    r = dashboard.run(rid)
    assert r["status"] == "finished"
    assert (r["metrics"]["loss"]["count"], r["metrics"]["loss"]["last_step"]) == (n, n - 1)
    assert _ms(r["metrics"]["loss"]["last_time"]) == T0 + 7 * (n - 1)
    assert dashboard.points(rid, "dup") == [(5, 2.0), (6, 3.0)]


def test_log_batch_params_tags_and_metrics(dashboard, client):
    exp_id = client.create_experiment("batch")
    rid = client.create_run(exp_id, run_name="batch").info.run_id
    client.log_batch(
        rid,
        metrics=[Metric("m", float(s), T0 + s, s) for s in range(3)] + [Metric("n", -1.5, T0, 0)],
        params=[Param(f"p{i}", str(i)) for i in range(100)],  # MLflow's limit per batch
        tags=[RunTag("k", "v"), RunTag("empty", "")],
    )
    got = client.get_run(rid)
    assert got.data.params == {f"p{i}": str(i) for i in range(100)}
    assert got.data.metrics == {"m": 2.0, "n": -1.5}
    assert (got.data.tags["k"], got.data.tags["empty"]) == ("v", "")
    r = dashboard.run(rid)
    assert r["params"] == {f"p{i}": str(i) for i in range(100)}
    assert (r["tags"]["k"], r["tags"]["empty"]) == ("v", "")
    assert dashboard.points(rid, "m") == [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert dashboard.points(rid, "n") == [(0, -1.5)]

    # NaN and the infinities (a diverged loss) survive the trip; fw's API writes them as strings.
    client.log_batch(
        rid, metrics=[Metric("bad", v, T0 + s, s) for s, v in enumerate([math.nan, math.inf, -math.inf, 1.0])]
    )
    hist = client.get_metric_history(rid, "bad")
    assert [m.step for m in hist] == [0, 1, 2, 3] and math.isnan(hist[0].value)
    assert [m.value for m in hist[1:]] == [math.inf, -math.inf, 1.0]
    assert dashboard.points(rid, "bad") == [(0, "NaN"), (1, "Infinity"), (2, "-Infinity"), (3, 1.0)]


# -- asynchronous logging ------------------------------------------------------------------------


def test_async_logging_delivers_every_point(dashboard, client):
    mlflow.set_experiment("async")
    with mlflow.start_run(run_name="per-call") as run:
        ops = [mlflow.log_metric("explicit", i * 0.5, step=i, synchronous=False) for i in range(100)]
        for op in ops:
            op.wait()
    one = run.info.run_id
    assert dashboard.points(one, "explicit") == [(i, i * 0.5) for i in range(100)]
    assert dashboard.run(one)["status"] == "finished"

    mlflow.config.enable_async_logging(True)
    with mlflow.start_run(run_name="configured") as run:
        mlflow.log_params({"mode": "async", "n": 300})
        mlflow.set_tag("async", "yes")
        for i in range(300):
            mlflow.log_metrics({"a": i / 300, "b": -float(i)}, step=i)
        mlflow.flush_async_logging()
    two = run.info.run_id
    # end_run shuts the async queue down without waiting for it; poll until everything is stored.
    want_a = [(i, i / 300) for i in range(300)]
    assert (
        dashboard.wait_for(
            lambda: dashboard.points(two, "a"), lambda p: len(p) >= 300, what="300 points of a"
        )
        == want_a
    )
    assert dashboard.wait_for(
        lambda: dashboard.points(two, "b"), lambda p: len(p) >= 300, what="300 points of b"
    ) == [(i, -float(i)) for i in range(300)]
    r = dashboard.run(two)
    assert r["status"] == "finished" and r["params"] == {"mode": "async", "n": "300"}
    assert r["tags"]["async"] == "yes"
    got = client.get_run(two)
    assert got.data.metrics == {"a": 299 / 300, "b": -299.0} and got.info.status == "FINISHED"


# -- errors and auth -----------------------------------------------------------------------------


def test_client_errors_carry_mlflow_codes(dashboard, client):
    missing = "0123456789abcdef0123456789abcdef"
    with pytest.raises(MlflowException) as e:
        client.get_run(missing)
    assert e.value.error_code == "RESOURCE_DOES_NOT_EXIST" and e.value.get_http_status_code() == 404
    with pytest.raises(MlflowException) as e:
        client.log_metric(missing, "x", 1.0)
    assert e.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    with pytest.raises(MlflowException) as e:
        client.get_experiment("424242")
    assert e.value.error_code == "RESOURCE_DOES_NOT_EXIST"

    exp_id = client.create_experiment("errors")
    rid = client.create_run(exp_id).info.run_id
    client.log_param(rid, "lr", "0.1")
    client.log_param(rid, "lr", "0.1")  # the same value again is fine, as in MLflow
    with pytest.raises(MlflowException) as e:
        client.log_param(rid, "lr", "0.2")
    assert e.value.error_code == "INVALID_PARAMETER_VALUE" and e.value.get_http_status_code() == 400
    assert client.get_run(rid).data.params == {"lr": "0.1"}
    assert dashboard.run(rid)["params"] == {"lr": "0.1"}
    with pytest.raises(MlflowException) as e:
        client.delete_tag(rid, "no-such-tag")
    assert e.value.error_code == "RESOURCE_DOES_NOT_EXIST"


def test_token_is_required_and_taken_from_mlflow_tracking_token(token_dashboard, monkeypatch, tmp_path):
    d = token_dashboard
    client = MlflowClient(d.url)
    exp_id = client.create_experiment("secure")  # MLFLOW_TRACKING_TOKEN is set: works
    with mlflow.start_run(experiment_id=exp_id) as run:
        mlflow.log_metric("m", 1.5, step=1)
        mlflow.log_text("secret\n", "a.txt")
    rid = run.info.run_id
    assert d.run(rid)["status"] == "finished" and d.points(rid, "m") == [(1, 1.5)]
    assert [f.path for f in client.list_artifacts(rid)] == ["a.txt"]
    assert d.artifacts(rid) == {"a.txt": 7}

    for token in (None, "wrong"):
        if token is None:
            monkeypatch.delenv("MLFLOW_TRACKING_TOKEN")
        else:
            monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", token)
        with pytest.raises(MlflowException) as e:
            client.get_run(rid)
        assert e.value.get_http_status_code() == 401 and e.value.error_code == "UNAUTHENTICATED", token
        with pytest.raises(MlflowException) as e:
            client.create_experiment(f"never-{token}")
        assert e.value.get_http_status_code() == 401, token
        with pytest.raises(Exception, match="401|UNAUTHENTICATED"):  # the artifact API needs it too
            mlflow.artifacts.download_artifacts(
                artifact_uri=f"{run.info.artifact_uri}/a.txt", dst_path=str(tmp_path / "x")
            )
        raw = d.request("GET", "/api/2.0/mlflow/experiments/get?experiment_id=0", token=token)
        assert raw.status == 401 and raw.json()["error_code"] == "UNAUTHENTICATED" and raw.json()["message"]
    assert not {"never-None", "never-wrong"} & {e["name"] for e in d.experiments()}  # nothing created
    assert d.request("GET", "/health", token=None).status == 200

    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", d.token)
    assert client.get_run(rid).data.metrics == {"m": 1.5}
    dl = mlflow.artifacts.download_artifacts(run_id=rid, artifact_path="a.txt", dst_path=str(tmp_path / "ok"))
    assert Path(dl).read_bytes() == b"secret\n"


def test_raw_http_error_shape_and_ajax_api(dashboard, client):
    for prefix in ("/api/2.0/mlflow", "/ajax-api/2.0/mlflow"):
        r = dashboard.request("GET", f"{prefix}/runs/get?run_id=nope")
        assert r.status == 404, r
        body = r.json()
        assert body["error_code"] == "RESOURCE_DOES_NOT_EXIST", body
        assert isinstance(body["message"], str) and body["message"], body
        assert r.headers.get("Content-Type", "").startswith("application/json")
        r = dashboard.request("GET", f"{prefix}/experiments/get")  # a required parameter is missing
        assert r.status == 400 and r.json()["error_code"] == "INVALID_PARAMETER_VALUE", r
        r = dashboard.request("POST", f"{prefix}/runs/create", b"{not json")
        assert r.status == 400 and set(r.json()) >= {"error_code", "message"}, r

    exp_id = client.create_experiment("raw")
    rid = client.create_run(exp_id, run_name="raw-run").info.run_id
    client.log_metric(rid, "m", 0.25, timestamp=T0, step=3)
    for path in (
        f"/experiments/get?experiment_id={exp_id}",
        "/experiments/get-by-name?experiment_name=raw",
        f"/runs/get?run_id={rid}",
        f"/metrics/get-history?run_id={rid}&metric_key=m",
        f"/artifacts/list?run_id={rid}",
    ):
        a = dashboard.request("GET", "/api/2.0/mlflow" + path)
        b = dashboard.request("GET", "/ajax-api/2.0/mlflow" + path)
        assert a.status == b.status == 200, (path, a, b)
        assert a.json() == b.json(), path
    hist = dashboard.request(
        "GET", f"/ajax-api/2.0/mlflow/metrics/get-history?run_id={rid}&metric_key=m"
    ).json()
    assert [(m["key"], m["value"], int(m["timestamp"]), int(m["step"])) for m in hist["metrics"]] == [
        ("m", 0.25, T0, 3)
    ]
    search = {"experiment_ids": [exp_id], "max_results": 10}
    a = dashboard.request("POST", "/api/2.0/mlflow/runs/search", search)
    b = dashboard.request("POST", "/ajax-api/2.0/mlflow/runs/search", search)
    assert a.status == b.status == 200 and a.json() == b.json()
    assert [x["info"]["run_id"] for x in a.json()["runs"]] == [rid]

    # Writes through /ajax-api (what MLflow's web UI uses) land in the same run.
    w = dashboard.request(
        "POST", "/ajax-api/2.0/mlflow/runs/set-tag", {"run_id": rid, "key": "via", "value": "ajax"}
    )
    assert w.status == 200, w
    assert client.get_run(rid).data.tags["via"] == "ajax"
    assert dashboard.run(rid)["tags"]["via"] == "ajax"


# -- MLflow and fw.track side by side ------------------------------------------------------------


def test_mlflow_and_fw_track_runs_share_an_experiment(dashboard, client):
    import fw.track

    exp = mlflow.set_experiment("shared")
    with mlflow.start_run(run_name="from-mlflow") as mr:
        mlflow.log_param("lr", 0.1)
        for s in range(3):
            mlflow.log_metric("loss", 1.0 / (s + 1), step=s)
    with fw.track.run(
        experiment="shared",
        name="from-fw",
        params={"lr": 0.2, "layers": [8, 8]},
        tags={"src": "fw"},
        capture_output=False,
        handle_sigterm=False,
        system_interval=0,
    ) as fr:
        for s in range(3):
            fr.log({"loss": 2.0 / (s + 1)}, step=s)
    assert fr.errors == [] and fr.spooled == 0 and fr.uri == dashboard.url

    fw_runs = {r["name"]: r for r in dashboard.runs("shared")}
    assert {n: (r["id"], r["status"]) for n, r in fw_runs.items()} == {
        "from-mlflow": (mr.info.run_id, "finished"),
        "from-fw": (fr.id, "finished"),
    }
    assert fw_runs["from-mlflow"]["params"] == {"lr": "0.1"}

    found = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    assert set(found) == {"from-mlflow", "from-fw"}
    f = found["from-fw"]
    assert (f.info.run_id, f.info.status, f.info.experiment_id) == (fr.id, "FINISHED", exp.experiment_id)
    assert f.data.params["lr"] == "0.2" and json.loads(f.data.params["layers"]) == [8, 8]
    assert f.data.tags["src"] == "fw" and f.data.metrics == {"loss": 2.0 / 3}
    assert [(m.step, m.value) for m in client.get_metric_history(fr.id, "loss")] == [
        (s, 2.0 / (s + 1)) for s in range(3)
    ]
    assert found["from-mlflow"].data.metrics == {"loss": 1.0 / 3}
    assert [r.info.run_name for r in client.search_runs([exp.experiment_id], "metrics.loss > 0.5")] == [
        "from-fw"
    ]
    assert [r.info.run_name for r in client.search_runs([exp.experiment_id], "params.lr = '0.1'")] == [
        "from-mlflow"
    ]
    # fw.track's params are JSON values (0.2 a number); MLflow shows them as strings and filters on those.
    assert [r.info.run_name for r in client.search_runs([exp.experiment_id], "params.lr = '0.2'")] == [
        "from-fw"
    ], "an fw.track run's numeric param is not found by MLflow's string filter on it"
