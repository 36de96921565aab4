from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _threads() -> None:
    torch.set_num_threads(2)


@pytest.fixture
def mlp():
    from fw.models import DigitsMLP

    torch.manual_seed(0)
    return DigitsMLP(hidden=16).eval()


@pytest.fixture
def digits_x() -> torch.Tensor:
    return torch.rand(6, 64, generator=torch.Generator().manual_seed(0))
