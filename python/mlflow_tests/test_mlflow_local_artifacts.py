"""Local artifact locations: MLflow's `--default-artifact-root <dir>` and `artifact_location=<dir>`.

Found by MLflow's own REST tracking-server tests (issue #23): their server keeps runs' files in a
local directory the client writes itself (file:// artifact URIs); fw refused artifact_location and
had no local root. Here, through MLflow's client against a real `fw dashboard`: experiments get
<root>/<id>, runs <location>/<run>/artifacts, the client writes and reads there, and the dashboard
lists and serves those files (inside its root only), including a registered version's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

mlflow = pytest.importorskip(
    "mlflow", reason="mlflow is not installed: use scripts/setup-mlflow-venv.sh's venv"
)

from mlflow.exceptions import MlflowException  # noqa: E402


def test_default_artifact_root_runs_write_files_locally(local_root_dashboard, tmp_path):
    from mlflow import MlflowClient

    d = local_root_dashboard
    client = MlflowClient(d.url)
    root = (tmp_path / "mlruns").as_uri()
    exp_id = client.create_experiment("local files")
    exp = client.get_experiment(exp_id)
    assert exp.artifact_location == f"{root}/{exp_id}"
    # The Default experiment, created on first use, is <root>/0 as MLflow's.
    assert client.get_experiment("0").artifact_location == f"{root}/0"

    run = client.create_run(exp_id)
    rid = run.info.run_id
    assert run.info.artifact_uri == f"{root}/{exp_id}/{rid}/artifacts"
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("hello")
    (src / "sub" / "b.json").write_text('{"b": 1}')
    client.log_artifacts(rid, str(src))
    # The client wrote the files itself, under the run's directory.
    on_disk = tmp_path / "mlruns" / exp_id / rid / "artifacts"
    assert (on_disk / "a.txt").read_text() == "hello"
    assert {a.path for a in client.list_artifacts(rid)} == {"a.txt", "sub"}
    assert {a.path for a in client.list_artifacts(rid, "sub")} == {"sub/b.json"}
    got = mlflow.artifacts.download_artifacts(run_id=rid, artifact_path=".", tracking_uri=d.url)
    assert Path(got, "sub", "b.json").read_text() == '{"b": 1}'

    # The dashboard reads them back: MLflow's REST listing and its download route.
    r = d.request("GET", f"/api/2.0/mlflow/artifacts/list?run_id={rid}&path=sub")
    assert r.status == 200, r
    assert r.json()["root_uri"] == run.info.artifact_uri
    assert r.json()["files"] == [{"path": "sub/b.json", "is_dir": False, "file_size": 8}]
    r = d.request("GET", f"/get-artifact?run_id={rid}&path=sub/b.json")
    assert r.status == 200 and r.body == b'{"b": 1}', r
    r = d.request("GET", f"/get-artifact?run_id={rid}&path=missing.txt")
    assert r.status == 404, r

    # MLflow's web UI upload writes into the run's local directory too.
    import requests

    up = requests.post(
        f"{d.url}/ajax-api/2.0/mlflow/upload-artifact",
        params={"run_uuid": rid, "path": "up/u.txt"},
        data=b"up",
    )
    assert up.status_code == 200, up.text
    assert (on_disk / "up" / "u.txt").read_bytes() == b"up"

    # fw's own run page lists and downloads them too.
    r = d.request("GET", f"/api/runs/{rid}/artifacts")
    assert r.status == 200, r
    assert {a["path"] for a in r.json()["artifacts"]} == {"a.txt", "sub/b.json", "up/u.txt"}, r
    r = d.request("GET", f"/api/runs/{rid}/download?kind=artifact&path=sub/b.json")
    assert r.status == 200 and r.body == b'{"b": 1}', r

    # A symbolic link in the run's directory that points out of the root is not followed.
    os.symlink("/etc/hostname", on_disk / "escape")
    r = d.request("GET", f"/get-artifact?run_id={rid}&path=escape")
    assert r.status == 404, r
    assert "escape" not in {
        f["path"] for f in d.request("GET", f"/api/2.0/mlflow/artifacts/list?run_id={rid}").json()["files"]
    }


def test_client_artifact_location_and_registry_sources(local_root_dashboard, tmp_path):
    from mlflow import MlflowClient

    d = local_root_dashboard
    client = MlflowClient(d.url)
    # An absolute directory outside the root is honoured for the client, which writes there itself ...
    elsewhere = tmp_path / "elsewhere"
    exp_id = client.create_experiment("mine", artifact_location=str(elsewhere))
    assert client.get_experiment(exp_id).artifact_location == str(elsewhere)
    rid = client.create_run(exp_id).info.run_id
    f = tmp_path / "m.txt"
    f.write_text("x")
    client.log_artifact(rid, str(f))
    assert (elsewhere / rid / "artifacts" / "m.txt").read_text() == "x"
    assert [a.path for a in client.list_artifacts(rid)] == ["m.txt"]  # the client reads it itself
    # ... but the dashboard opens no file outside its root, and says why.
    r = d.request("GET", f"/get-artifact?run_id={rid}&path=m.txt")
    assert r.status == 400 and "outside the dashboard's --default-artifact-root" in r.json()["message"], r
    r = d.request("GET", f"/api/runs/{rid}/artifacts")
    assert (
        r.status == 400 and "outside the dashboard's --default-artifact-root" in r.json()["error"]["message"]
    ), r

    # Locations fw cannot honour are refused with the reason, never ignored.
    for bad in ("s3://bucket/p", "file://otherhost/x", "/a/../b", "hdfs:/x"):
        with pytest.raises(MlflowException, match="is not supported by fw") as e:
            client.create_experiment("bad " + bad.replace("/", "_"), artifact_location=bad)
        assert e.value.error_code == "INVALID_PARAMETER_VALUE"

    # Model versions from a run's local files (MLflow's rule: inside that run's directory).
    exp2 = client.create_experiment("registry")
    run = client.create_run(exp2)
    uri = run.info.artifact_uri
    client.log_artifact(run.info.run_id, str(f), "model")
    client.create_registered_model("local")
    for src in (uri, f"{uri}/model", f"{uri}/.", f"{uri}/model/..", uri[len("file://") :]):
        r = d.request(
            "POST",
            "/api/2.0/mlflow/model-versions/create",
            {"name": "local", "source": src, "run_id": run.info.run_id},
        )
        assert r.status == 200, (src, r)
    for body in (
        {"name": "local", "source": uri},  # no run_id
        {"name": "local", "source": "file:///tmp", "run_id": run.info.run_id},  # outside the run
        {"name": "local", "source": f"{uri}/../..", "run_id": run.info.run_id},
        {"name": "local", "source": str(elsewhere), "run_id": rid},  # a run outside ... still its dir only
    ):
        r = d.request("POST", "/api/2.0/mlflow/model-versions/create", body)
        assert r.status == 400 and "To use a local path as a model version" in r.json()["message"], (body, r)
    r = d.request(
        "POST",
        "/api/2.0/mlflow/model-versions/create",
        {"name": "local", "source": "file://10.0.0.1/x", "run_id": run.info.run_id},
    )
    assert r.status == 500 and "is not a valid remote uri" in r.json()["message"], r
    # A version's file is served from the root (MLflow's web UI's download of a version's file).
    r = d.request("GET", "/model-versions/get-artifact?name=local&version=2&path=m.txt")
    assert r.status == 200 and r.body == b"x", r


def test_without_a_root_runs_stay_behind_the_proxy(dashboard, client):
    exp_id = client.create_experiment("proxied")
    assert client.get_experiment(exp_id).artifact_location == f"mlflow-artifacts:/{exp_id}"
    assert client.create_run(exp_id).info.artifact_uri.startswith(f"mlflow-artifacts:/{exp_id}/")


def test_s3_root_mlflow_client_writes_the_bucket(s3_root_dashboard, tmp_path):
    # MLflow's own S3 artifact repository (boto3) writes the run's files into the bucket of
    # --default-artifact-root s3://...; the dashboard reads them back from there.
    import boto3
    from mlflow import MlflowClient

    d = s3_root_dashboard
    client = MlflowClient(d.url)
    exp_id = client.create_experiment("in the bucket")
    assert client.get_experiment(exp_id).artifact_location == f"s3://fw-mlruns/team/{exp_id}"
    run = client.create_run(exp_id)
    rid = run.info.run_id
    assert run.info.artifact_uri == f"s3://fw-mlruns/team/{exp_id}/{rid}/artifacts"
    src = tmp_path / "src"
    (src / "model").mkdir(parents=True)
    (src / "model" / "MLmodel").write_text("flavors: {}")
    (src / "notes.txt").write_text("hello")
    client.log_artifacts(rid, str(src))
    s3 = boto3.client("s3", endpoint_url=os.environ["MLFLOW_S3_ENDPOINT_URL"])
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="fw-mlruns")["Contents"]}
    assert keys == {
        f"team/{exp_id}/{rid}/artifacts/notes.txt",
        f"team/{exp_id}/{rid}/artifacts/model/MLmodel",
    }
    assert {a.path for a in client.list_artifacts(rid)} == {"model", "notes.txt"}

    r = d.request("GET", f"/api/2.0/mlflow/artifacts/list?run_id={rid}&path=model")
    assert r.status == 200 and r.json()["files"] == [
        {"path": "model/MLmodel", "is_dir": False, "file_size": 11}
    ], r
    r = d.request("GET", f"/get-artifact?run_id={rid}&path=notes.txt")
    assert r.status == 200 and r.body == b"hello", r
    r = d.request("GET", f"/api/runs/{rid}/artifacts")
    assert {a["path"] for a in r.json()["artifacts"]} == {"model/MLmodel", "notes.txt"}, r
    client.create_registered_model("bucketed")
    client.create_model_version("bucketed", f"{run.info.artifact_uri}/model", run_id=rid)
    r = d.request("GET", "/model-versions/get-artifact?name=bucketed&version=1&path=MLmodel")
    assert r.status == 200 and r.body == b"flavors: {}", r

    # An s3:// location inside the root is the client's to write; elsewhere it is refused.
    inside = client.create_experiment("mine", artifact_location="s3://fw-mlruns/team/custom")
    assert client.get_experiment(inside).artifact_location == "s3://fw-mlruns/team/custom"
    with pytest.raises(MlflowException, match="is not supported by fw"):
        client.create_experiment("elsewhere", artifact_location="s3://another-bucket/x")


def test_artifacts_destination_keeps_mlflows_layout(destination_dashboard, tmp_path):
    """--artifacts-destination: what MLflow's client uploads through the proxy lands where MLflow's
    server puts it (MLflow's own test_log_artifact checks <destination>/<exp>/<run>/artifacts/...),
    and reads back through MLflow's client, its REST routes and fw's own run page."""
    from mlflow import MlflowClient

    d = destination_dashboard
    dest = tmp_path / "mlartifacts"
    mlflow.set_tracking_uri(d.url)
    src = tmp_path / "a.txt"
    src.write_text("0")
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(src))
        mlflow.log_artifact(str(src), artifact_path="artifact_path")
        mlflow.log_text("notes", "sub/notes.md")
    rid = run.info.run_id
    assert run.info.artifact_uri == f"mlflow-artifacts:/0/{rid}/artifacts"
    on_disk = dest / "0" / rid / "artifacts"
    assert (on_disk / "a.txt").read_text() == "0"
    assert (on_disk / "artifact_path" / "a.txt").read_text() == "0"
    assert (on_disk / "sub" / "notes.md").read_text() == "notes"

    client = MlflowClient(d.url)
    assert {a.path for a in client.list_artifacts(rid)} == {"a.txt", "artifact_path", "sub"}
    assert [a.path for a in client.list_artifacts(rid, "artifact_path")] == ["artifact_path/a.txt"]
    got = mlflow.artifacts.download_artifacts(run_id=rid, artifact_path=".", tracking_uri=d.url)
    assert Path(got, "sub", "notes.md").read_text() == "notes"
    r = d.request("GET", f"/api/runs/{rid}/artifacts")
    assert r.status == 200, r
    assert {a["path"] for a in r.json()["artifacts"]} == {"a.txt", "artifact_path/a.txt", "sub/notes.md"}, r
    r = d.request("GET", f"/api/runs/{rid}/download?kind=artifact&path=sub/notes.md")
    assert r.status == 200 and r.body == b"notes", r

    # An MLflow 3 logged model's files: <exp>/models/<id>/artifacts/..., as MLflow's server keeps them.
    exp_id = client.create_experiment("destination models")
    model = client.create_logged_model(exp_id, name="m")
    mdir = tmp_path / "model"
    (mdir / "data").mkdir(parents=True)
    (mdir / "MLmodel").write_text("flavors: {}")
    (mdir / "data" / "w.bin").write_bytes(b"\0\1")
    client.log_model_artifacts(model.model_id, str(mdir))
    on_disk = dest / exp_id / "models" / model.model_id / "artifacts"
    assert (on_disk / "MLmodel").read_text() == "flavors: {}"
    assert (on_disk / "data" / "w.bin").read_bytes() == b"\0\1"
    assert {a.path for a in client.list_logged_model_artifacts(model.model_id)} == {"MLmodel", "data"}
    assert [a.path for a in client.list_logged_model_artifacts(model.model_id, "data")] == ["data/w.bin"]
    r = d.request(
        "GET", f"/api/2.0/mlflow-artifacts/artifacts/{exp_id}/models/{model.model_id}/artifacts/data/w.bin"
    )
    assert r.status == 200 and r.body == b"\0\1", r

    # The proxy's own listing goes level by level through the destination.
    r = d.request("GET", "/api/2.0/mlflow-artifacts/artifacts")
    assert r.status == 200, r
    assert {f["path"] for f in r.json()["files"]} == {"0", exp_id}, r
