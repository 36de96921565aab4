"""What MLflow's own server accepts in everyday client code, through MLflow's client against fw.

Each behaviour here was answered differently by fw before (issue #23, found by running MLflow's own
REST tracking-server tests against `fw dashboard`): multi-line notes, free experiment names, the
Default experiment from the start, "." as an artifact path, MLflow's tie order, writes to a deleted
run, case-sensitive LIKE, artifact_location, GET /version and MLflow's 404 shape.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

mlflow = pytest.importorskip(
    "mlflow", reason="mlflow is not installed: use scripts/setup-mlflow-venv.sh's venv"
)

from mlflow.exceptions import MlflowException  # noqa: E402

NOTE = "# Baseline\n\nResNet-18, **no** augmentation.\n\n- lr 0.1\n- batch 32\n"


def test_markdown_notes_and_mlflow_tag_limits(dashboard, client):
    exp_id = mlflow.set_experiment("notes").experiment_id
    client.set_experiment_tag(exp_id, "mlflow.note.content", NOTE)
    with mlflow.start_run(description=NOTE) as run:  # description is the run's mlflow.note.content
        mlflow.set_tag("long", "é" * 8000)  # MLflow's limit: 8,000 characters
        with pytest.raises(MlflowException) as e:
            mlflow.set_tag("too_long", "x" * 8001)
        assert e.value.error_code == "INVALID_PARAMETER_VALUE"
    got = client.get_run(run.info.run_id)
    assert got.data.tags["mlflow.note.content"] == NOTE
    assert got.data.tags["long"] == "é" * 8000
    assert client.get_experiment(exp_id).tags["mlflow.note.content"] == NOTE
    assert dashboard.experiment("notes")["description"] == NOTE  # fw's UI shows it as the description


def test_experiment_names_as_mlflow_users_write_them(dashboard, client):
    for name in ("resnet (baseline)", "a, b", "run #1", "lr=0.1 & wd=1e-4?"):
        exp = mlflow.set_experiment(name)
        with mlflow.start_run():
            mlflow.log_metric("m", 1.0)
        assert client.get_experiment_by_name(name).experiment_id == exp.experiment_id
        assert dashboard.experiment(exp.experiment_id)["name"] == name
    client.rename_experiment(client.get_experiment_by_name("a, b").experiment_id, "a, b (old)")
    assert client.get_experiment_by_name("a, b (old)") is not None


def test_default_experiment_is_listed_from_the_start(dashboard, client):
    assert [(e.experiment_id, e.name) for e in client.search_experiments()] == [("0", "Default")]


def test_artifact_path_dot_lists_and_downloads_the_root(dashboard, client, tmp_path):
    with mlflow.start_run() as run:
        mlflow.log_text("a", "a.txt")
        mlflow.log_text("b", "dir/b.txt")
    rid = run.info.run_id
    # The client joins the asked path and the names ("./a.txt"), as against MLflow's server.
    assert sorted(os.path.normpath(f.path) for f in client.list_artifacts(rid, ".")) == ["a.txt", "dir"]
    dest = mlflow.artifacts.download_artifacts(run_id=rid, artifact_path=".", dst_path=str(tmp_path / "d"))
    assert sorted(os.listdir(dest)) == ["a.txt", "dir"]
    assert open(os.path.join(dest, "dir", "b.txt")).read() == "b"


def test_search_runs_breaks_ties_by_run_id_ascending(dashboard, client):
    exp_id = client.create_experiment("ties")
    ids = [client.create_run(exp_id, start_time=1_700_000_000_000).info.run_id for _ in range(6)]
    got = [r.info.run_id for r in client.search_runs([exp_id])]
    assert got == sorted(ids)
    paged, token = [], None
    while True:
        page = client.search_runs([exp_id], max_results=4, page_token=token)
        paged += [r.info.run_id for r in page]
        token = page.token
        if not token:
            break
    assert paged == sorted(ids)


def test_like_keeps_case_and_ilike_ignores_it(dashboard, client):
    exp_id = client.create_experiment("like")
    for team in ("Vision", "vision", "nlp"):
        client.create_run(exp_id, tags={"team": team})

    def teams(f):
        return sorted(r.data.tags["team"] for r in client.search_runs([exp_id], filter_string=f))

    assert teams("tags.team LIKE 'V%'") == ["Vision"]
    assert teams("tags.team ILIKE 'V%'") == ["Vision", "vision"]
    assert teams("tags.team LIKE '%isio%'") == ["Vision", "vision"]


def test_a_deleted_run_takes_no_writes_until_restored(dashboard, client):
    rid = client.create_run("0").info.run_id
    client.delete_run(rid)
    for write in (
        lambda: client.log_metric(rid, "m", 1.0),
        lambda: client.log_param(rid, "p", "1"),
        lambda: client.set_tag(rid, "t", "1"),
        lambda: client.log_batch(rid, params=[mlflow.entities.Param("q", "1")]),
    ):
        with pytest.raises(MlflowException, match="must be in the 'active' state") as e:
            write()
        assert e.value.error_code == "INVALID_PARAMETER_VALUE"
    client.restore_run(rid)
    client.log_metric(rid, "m", 1.0)
    assert client.get_run(rid).data.metrics == {"m": 1.0}


def test_artifact_location_is_refused_with_the_reason(dashboard, client):
    with pytest.raises(MlflowException, match='artifact_location "s3://bucket/p".*FW_ARTIFACT_URI') as e:
        client.create_experiment("elsewhere", artifact_location="s3://bucket/p")
    assert e.value.error_code == "INVALID_PARAMETER_VALUE"
    assert client.get_experiment_by_name("elsewhere") is None  # nothing created


def test_version_and_mlflow_404_shape(dashboard, client):
    r = dashboard.request("GET", "/version")
    assert r.status == 200 and r.body.decode() == mlflow.__version__, r
    for path in (
        "/api/3.0/mlflow/scorers/register",
        "/ajax-api/2.0/mlflow/gateway/secrets/create",
        "/ajax-api/3.0/mlflow/datasets/create",
        "/graphql",
    ):
        r = dashboard.request("POST", path, {})
        assert r.status == 404, (path, r)
        assert r.json()["error_code"] == "ENDPOINT_NOT_FOUND" and r.json()["message"], (path, r)


def test_artifact_proxy_takes_any_path_with_mlflows_headers(dashboard, client, tmp_path):
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    src = tmp_path / "report.pdf"
    src.write_bytes(b"%PDF-1.4")
    repo = get_artifact_repository("mlflow-artifacts:/shared/reports")  # no run: a free path
    repo.log_artifact(str(src))
    repo.log_artifact(str(src), "2024")
    assert sorted((f.path, f.is_dir) for f in repo.list_artifacts()) == [
        ("2024", True),
        ("report.pdf", False),
    ]
    got = mlflow.artifacts.download_artifacts(
        artifact_uri="mlflow-artifacts:/shared/reports/2024/report.pdf", dst_path=str(tmp_path / "d")
    )
    assert open(got, "rb").read() == b"%PDF-1.4"
    r = dashboard.request("GET", "/api/2.0/mlflow-artifacts/artifacts/shared/reports/report.pdf")
    assert r.status == 200 and r.headers["Content-Type"] == "application/pdf", r
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["Content-Disposition"] == "attachment; filename=report.pdf"
    assert (Path(dashboard.dirs["FW_ARTIFACT_DIR"]) / "_mlflow-artifacts/shared/reports/report.pdf").exists()

    with mlflow.start_run() as run:  # a run's files keep their own place and headers
        mlflow.log_text("hello", "notes.md")
    r = dashboard.request("GET", f"/get-artifact?run_id={run.info.run_id}&path=notes.md")
    assert r.status == 200 and r.body == b"hello" and r.headers["Content-Type"].startswith("text/plain"), r


def test_negative_steps_are_kept(dashboard, client):
    with mlflow.start_run() as run:
        mlflow.log_metric("loss", 2.0, step=-1)  # "before training"
        mlflow.log_metric("loss", 1.0, step=0)
    hist = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in hist] == [(-1, 2.0), (0, 1.0)]
    assert dashboard.points(run.info.run_id, "loss") == [(-1, 2.0), (0, 1.0)]


def test_trace_assessments(dashboard, client):
    # MLflow 3's feedback and expectations on a trace (found missing by MLflow's own
    # test_assessments_end_to_end): log, read back with the trace, update, override, delete.
    from mlflow.entities import AssessmentSource, AssessmentSourceType

    exp = mlflow.set_experiment("judged")

    @mlflow.trace
    def answer(q):
        return q[::-1]

    answer("abc")
    mlflow.flush_trace_async_logging()
    (trace,) = client.search_traces(locations=[exp.experiment_id])
    tid = trace.info.trace_id
    human = AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id="reviewer@x")
    fb = mlflow.log_feedback(trace_id=tid, name="quality", value={"rating": 4}, source=human, rationale="ok")
    assert fb.assessment_id.startswith("a-") and fb.valid
    ex = mlflow.log_expectation(trace_id=tid, name="expected", value={"answer": "cba", "n": [1, 2]})
    assert mlflow.get_assessment(tid, ex.assessment_id).value == {"answer": "cba", "n": [1, 2]}
    got = mlflow.get_trace(tid).info.assessments
    assert {a.name for a in got} == {"quality", "expected"}, got

    from mlflow.entities import Feedback

    up = mlflow.update_assessment(tid, fb.assessment_id, Feedback(name="quality2", value={"rating": 5}))
    assert up.name == "quality2" and up.value == {"rating": 5} and up.rationale == "ok"
    over = mlflow.override_feedback(
        trace_id=tid, assessment_id=fb.assessment_id, value={"rating": 2}, source=human
    )
    assert mlflow.get_assessment(tid, fb.assessment_id).valid is False
    assert mlflow.get_assessment(tid, over.assessment_id).overrides == fb.assessment_id
    mlflow.delete_assessment(tid, over.assessment_id)
    assert mlflow.get_assessment(tid, fb.assessment_id).valid is True  # the overridden one is back
    with pytest.raises(MlflowException) as e:
        mlflow.get_assessment(tid, over.assessment_id)
    assert e.value.error_code == "RESOURCE_DOES_NOT_EXIST"

    # Refusals: neither or both values, an unknown trace, an unknown field in the mask.
    base = f"/api/3.0/mlflow/traces/{tid}/assessments"
    r = dashboard.request("POST", base, {"assessment": {"assessment_name": "x"}})
    assert r.status == 400 and "exactly one of" in r.json()["message"], r
    r = dashboard.request(
        "POST",
        "/api/3.0/mlflow/traces/tr-00000000000000000000000000000000/assessments",
        {"assessment": {"assessment_name": "x", "feedback": {"value": 1}}},
    )
    assert r.status == 404, r
    r = dashboard.request("PATCH", f"{base}/{fb.assessment_id}", {"assessment": {}, "update_mask": "valid"})
    assert r.status == 400 and "update_mask" in r.json()["message"], r


def test_mlflow_tracing_round_trip(dashboard, client):
    # Traced code's spans reach fw (OTLP at /v1/traces with MLflow's experiment header, then
    # StartTraceV3); the client reads them back, searches, tags and deletes (docs/mlflow.md).
    from mlflow.entities import TraceState

    exp = mlflow.set_experiment("traced")

    @mlflow.trace(span_type="CHAIN")
    def pipeline(q):
        with mlflow.start_span(name="retrieve") as span:
            span.set_attributes({"docs": 3, "source": "wiki"})
        return q.upper()

    with mlflow.start_run() as run:
        assert pipeline("hi") == "HI"
    assert pipeline("plain") == "PLAIN"  # outside a run
    mlflow.flush_trace_async_logging()

    traces = client.search_traces(locations=[exp.experiment_id], order_by=["timestamp ASC"])
    assert len(traces) == 2, traces
    first = traces[0]
    assert first.info.state == TraceState.OK and first.info.experiment_id == exp.experiment_id
    assert sorted(s.name for s in first.data.spans) == ["pipeline", "retrieve"]
    root = next(s for s in first.data.spans if s.name == "pipeline")
    assert root.inputs == {"q": "hi"} and root.outputs == "HI", root
    child = next(s for s in first.data.spans if s.name == "retrieve")
    assert child.attributes["docs"] == 3 and child.parent_id == root.span_id

    got = mlflow.get_trace(first.info.trace_id)
    assert got.info.trace_id == first.info.trace_id and len(got.data.spans) == 2
    by_run = client.search_traces(
        locations=[exp.experiment_id], filter_string=f"attribute.run_id = '{run.info.run_id}'"
    )
    assert [t.info.trace_id for t in by_run] == [first.info.trace_id]
    by_text = client.search_traces(locations=[exp.experiment_id], filter_string="trace.text LIKE '%plain%'")
    assert [t.info.trace_id for t in by_text] == [traces[1].info.trace_id]

    client.set_trace_tag(first.info.trace_id, "reviewed", "yes")
    assert client.get_trace(first.info.trace_id).info.tags["reviewed"] == "yes"
    client.delete_trace_tag(first.info.trace_id, "reviewed")
    assert "reviewed" not in client.get_trace(first.info.trace_id).info.tags
    assert client.delete_traces(exp.experiment_id, trace_ids=[first.info.trace_id]) == 1
    assert [t.info.trace_id for t in client.search_traces(locations=[exp.experiment_id])] == [
        traces[1].info.trace_id
    ]
    # Without MLflow's header, /v1/traces is fw's own OTLP receiver (the deployments' request
    # spans): an empty OTLP/JSON export is answered with OTLP's empty response.
    r = dashboard.request("POST", "/v1/traces", {})
    assert r.status == 200 and r.json() == {}, r
