"""Small importable models for the tests (checkpoints need importable classes)."""

from __future__ import annotations

import torch
from torch import nn


class TwoInput(nn.Module):
    """Float features plus int64 tokens; two outputs."""

    def __init__(self, vocab: int = 50) -> None:
        super().__init__()
        self.fw_init_kwargs = {"vocab": vocab}
        self.embed = nn.Embedding(vocab, 8)
        self.fc = nn.Linear(8 + 4, 3)

    def forward(self, features: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.cat([self.embed(tokens).mean(1), features], dim=1)
        logits = self.fc(h)
        return logits, logits.softmax(-1)


class BatchDependent(nn.Module):
    """Shape-dependent Python control flow: tracing freezes the branch taken for the example."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 2:
            return self.fc(x) * 2
        return self.fc(x)


class NeedsArgs(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class NotAModule:
    def __init__(self) -> None:
        pass
