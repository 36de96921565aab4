"""MLflow 3's logged models through MLflow's own client against fw (issue #23 item 3).

mlflow.<flavor>.log_model creates a logged model, uploads its files to the model's artifact URI
through fw's artifact proxy, finalizes it and links it to the run; loading it back resolves
models:/ and runs:/ URIs through the same API.
"""

from __future__ import annotations

import pytest

mlflow = pytest.importorskip(
    "mlflow", reason="mlflow is not installed: use scripts/setup-mlflow-venv.sh's venv"
)
torch = pytest.importorskip("torch")

from mlflow.entities import LoggedModelStatus  # noqa: E402


def test_pytorch_log_model_round_trip(dashboard, client):
    mlflow.set_experiment("logged-models")
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    x = torch.randn(5, 4)
    with mlflow.start_run() as run:
        mlflow.log_param("lr", "0.1")
        info = mlflow.pytorch.log_model(net, name="net", params={"hidden": 3}, input_example=x.numpy())
        mlflow.log_metric("val_acc", 0.9, step=1, model_id=info.model_id)

    model = client.get_logged_model(info.model_id)
    assert model.status == LoggedModelStatus.READY
    assert model.source_run_id == run.info.run_id
    assert model.params["hidden"] == "3"
    assert [(m.key, m.value, m.run_id) for m in model.metrics] == [("val_acc", 0.9, run.info.run_id)]
    assert model.artifact_location.startswith("mlflow-artifacts:/")
    assert [o.model_id for o in client.get_run(run.info.run_id).outputs.model_outputs] == [info.model_id]

    for uri in (info.model_uri, f"models:/{info.model_id}"):
        loaded = mlflow.pytorch.load_model(uri)
        assert torch.allclose(loaded(x), net(x))
    found = mlflow.search_logged_models(experiment_ids=[model.experiment_id], output_format="list")
    assert [m.model_id for m in found] == [info.model_id]
    assert "MLmodel" in [f.path for f in client.list_logged_model_artifacts(info.model_id)]

    client.delete_logged_model(info.model_id)
    with pytest.raises(mlflow.exceptions.MlflowException, match="not found"):
        client.get_logged_model(info.model_id)


def test_pytorch_autolog_with_default_settings_logs_a_loadable_model(dashboard, client):
    L = pytest.importorskip("lightning.pytorch")
    from torch.utils.data import DataLoader, TensorDataset

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    xs = torch.randn(32, 4, generator=g)
    data = DataLoader(TensorDataset(xs, xs.sum(1, keepdim=True)), batch_size=8)
    mlflow.set_experiment("autolog")
    mlflow.pytorch.autolog()  # log_models=True, MLflow's default
    try:
        model = Tiny()
        with mlflow.start_run() as run:
            L.Trainer(
                max_epochs=2,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
            ).fit(model, data)
    finally:
        mlflow.pytorch.autolog(disable=True)
    exp_id = run.info.experiment_id
    models = client.search_logged_models(experiment_ids=[exp_id])
    assert len(models) == 1 and models[0].source_run_id == run.info.run_id, models
    assert client.get_run(run.info.run_id).data.metrics["train_loss"] >= 0
    loaded = mlflow.pytorch.load_model(f"models:/{models[0].model_id}")
    assert torch.allclose(loaded(xs), model(xs))
    # fw's Models page lists it, with the run and experiment it came from.
    r = dashboard.request("GET", "/api/logged-models?limit=10")
    assert r.status == 200, r
    listed = {m["model_id"]: m for m in r.json()["logged_models"]}
    assert models[0].model_id in listed, r.json()
    got = listed[models[0].model_id]
    assert got["source_run_id"] == run.info.run_id and got["experiment"] == "autolog", got
    assert got["status"] == "LOGGED_MODEL_READY", got
