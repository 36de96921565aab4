"""Model of the diabetes_mlp recipe (its own module so listing recipes does not import torch)."""

from __future__ import annotations

import torch
from torch import nn


class TabularMLP(nn.Module):
    """features -> hidden -> hidden -> 1 (importable, so fw.checkpoint.load can rebuild it)."""

    fw_input_names = ("input",)
    fw_output_names = ("prediction",)

    def __init__(self, features: int = 10, hidden: int = 32) -> None:
        super().__init__()
        self.fw_init_kwargs = {"features": features, "hidden": hidden}
        self.net = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)
