"""MLflow's model registry through MLflow's own client against fw (issue #23 item 2).

``mlflow.register_model`` and ``MlflowClient``'s registry calls land in fw's registry: a version is a
reference to the MLflow model (format ``mlflow`` on fw's Models page), loadable back through
``models:/name/version`` and ``models:/name@alias``; search, tags, aliases, stages, rename and delete
behave as against MLflow's server.
"""

from __future__ import annotations

import pytest

mlflow = pytest.importorskip(
    "mlflow", reason="mlflow is not installed: use scripts/setup-mlflow-venv.sh's venv"
)
torch = pytest.importorskip("torch")

from mlflow.exceptions import MlflowException  # noqa: E402


def test_register_model_and_load_it_back(dashboard, client):
    mlflow.set_experiment("registry")
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    x = torch.randn(5, 4)
    with mlflow.start_run() as run:
        info = mlflow.pytorch.log_model(net, name="net", input_example=x.numpy())
    mv = mlflow.register_model(info.model_uri, "digits-net", tags={"team": "vision"})
    assert mv.name == "digits-net" and mv.version == "1" and mv.status == "READY"
    assert mv.run_id == run.info.run_id and mv.tags == {"team": "vision"}

    # A second version from the run's URI; an alias on it; both load back.
    mv2 = mlflow.register_model(f"runs:/{run.info.run_id}/net", "digits-net")
    assert mv2.version == "2"
    client.set_registered_model_alias("digits-net", "champion", "2")
    assert client.get_model_version_by_alias("digits-net", "champion").version == "2"
    for uri in ("models:/digits-net/1", "models:/digits-net@champion"):
        loaded = mlflow.pytorch.load_model(uri)
        assert torch.allclose(loaded(x), net(x)), uri

    # fw's own API lists the model with both versions as torch.export programs (MLflow's default
    # serialization): not deployable files, but exportable into one (test_mlflow_onnx_versions.py).
    model = dashboard.get("/api/models/digits-net")
    assert [v["format"] for v in model["versions"]] == ["torch_export", "torch_export"]
    assert model["aliases"] == {"champion": 2} and model["versions"][0]["source"]["run_id"] == run.info.run_id


def test_registry_calls_as_mlflow_client_makes_them(dashboard, client):
    client.create_registered_model("m1", tags={"k": "v"}, description="first")
    with pytest.raises(MlflowException, match="already exists") as e:
        client.create_registered_model("m1")
    assert e.value.error_code == "RESOURCE_ALREADY_EXISTS"
    run = client.create_run(client.get_experiment_by_name("Default").experiment_id)
    for _ in range(3):
        client.create_model_version("m1", f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    client.update_model_version("m1", "2", description="the second")
    client.set_model_version_tag("m1", "2", "stage", "canary")
    assert client.get_model_version("m1", "2").description == "the second"
    assert client.get_model_version("m1", "2").tags == {"stage": "canary"}
    client.transition_model_version_stage("m1", "3", "Production")
    assert client.get_model_version("m1", "3").current_stage == "Production"
    latest = {v.current_stage: v.version for v in client.get_latest_versions("m1")}
    assert latest == {"None": "2", "Production": "3"}
    assert client.get_model_version_download_uri("m1", "1") == f"runs:/{run.info.run_id}/model"

    client.create_registered_model("m2")
    names = [m.name for m in client.search_registered_models(filter_string="name LIKE 'm%'")]
    assert names == ["m1", "m2"]
    assert [m.name for m in client.search_registered_models(max_results=1)] == ["m1"]
    versions = client.search_model_versions(
        f"name='m1' AND run_id='{run.info.run_id}'", order_by=["version ASC"]
    )
    assert [v.version for v in versions] == ["1", "2", "3"]

    client.update_registered_model("m1", description="renamed soon")
    client.set_registered_model_tag("m1", "owner", "me")
    client.delete_registered_model_tag("m1", "k")
    client.rename_registered_model("m1", "m1b")
    got = client.get_registered_model("m1b")
    assert got.description == "renamed soon" and got.tags == {"owner": "me"}
    with pytest.raises(MlflowException, match="not found") as e:
        client.get_registered_model("m1")
    assert e.value.error_code == "RESOURCE_DOES_NOT_EXIST"

    client.delete_model_version("m1b", "1")
    assert [v.version for v in client.search_model_versions("name='m1b'")] == ["3", "2"]
    client.delete_registered_model("m1b")
    assert [m.name for m in client.search_registered_models()] == ["m2"]
