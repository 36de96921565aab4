"""A real autologger end to end: PyTorch Lightning's MLFlowLogger writing into fw's dashboard."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("mlflow", reason="mlflow is not installed: use scripts/setup-mlflow-venv.sh's venv")
torch = pytest.importorskip("torch")
L = pytest.importorskip(
    "lightning.pytorch", reason="lightning is not installed: use scripts/setup-mlflow-venv.sh's venv"
)

from lightning.pytorch.loggers import MLFlowLogger  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

EPOCHS, TRAIN_BATCHES, VAL_BATCHES = 3, 4, 2


class TinyMLP(L.LightningModule):
    def __init__(self, hidden: int = 8, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.train_losses: list[float] = []  # what training_step logged, to compare with the store
        self.val_losses: list[float] = []
        self._val_epoch: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=False)
        self.train_losses.append(loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("val_loss", loss, on_step=False, on_epoch=True)
        self._val_epoch.append(loss.detach())

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.val_losses.append(torch.stack(self._val_epoch).mean().item())
        self._val_epoch = []

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def _data(n: int, seed: int) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0]]) + 0.1
    return DataLoader(TensorDataset(x, y), batch_size=8)


def test_lightning_mlflow_logger_end_to_end(dashboard):
    torch.manual_seed(0)
    model = TinyMLP(hidden=8, lr=0.05)
    logger = MLFlowLogger(experiment_name="lightning", run_name="tiny-mlp", tracking_uri=dashboard.url)
    trainer = L.Trainer(
        max_epochs=EPOCHS,
        limit_train_batches=TRAIN_BATCHES,
        limit_val_batches=VAL_BATCHES,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        accelerator="cpu",
        devices=1,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        trainer.fit(model, _data(64, 0), _data(16, 1))
    assert trainer.state.finished

    rid = logger.run_id
    r = dashboard.run(rid)
    assert r["status"] == "finished", r
    assert r["experiment"] == "lightning" and r["experiment_id"] == logger.experiment_id
    assert r["name"] == "tiny-mlp" and r["tags"]["mlflow.runName"] == "tiny-mlp"
    assert r["params"] == {"hidden": "8", "lr": "0.05"}

    # Every training step's loss, in order, at increasing steps (MLFlowLogger sends the global step).
    train = dashboard.points(rid, "train_loss")
    assert len(model.train_losses) == EPOCHS * TRAIN_BATCHES
    assert [v for _, v in train] == pytest.approx(model.train_losses, rel=1e-6)
    steps = [s for s, _ in train]
    assert steps == sorted(set(steps)) and len(steps) == EPOCHS * TRAIN_BATCHES
    assert model.train_losses[-1] < model.train_losses[0]  # it did learn something
    val = dashboard.points(rid, "val_loss")
    assert [v for _, v in val] == pytest.approx(model.val_losses, rel=1e-6) and len(val) == EPOCHS
    assert r["metrics"]["train_loss"]["count"] == EPOCHS * TRAIN_BATCHES
    assert [v for _, v in dashboard.points(rid, "epoch")][-1] == EPOCHS - 1

    # MLflow's client reads back the same run.
    from mlflow import MlflowClient

    client = MlflowClient(dashboard.url)
    got = client.get_run(rid)
    assert got.info.status == "FINISHED" and got.data.params == {"hidden": "8", "lr": "0.05"}
    hist = client.get_metric_history(rid, "train_loss")
    assert [(m.step, m.value) for m in hist] == train
