"""Recipe: a small MLP regressor on scikit-learn's bundled diabetes dataset (442 patients, 10 features)."""

from __future__ import annotations

import sys
from typing import Any

from fw.recipes._train import COMMON_PARAMS

RECIPE: dict[str, Any] = {
    "description": "MLP regressor on scikit-learn's diabetes dataset (standardised target, MSE)",
    "params": [
        *[{**p, "default": 0.01} if p["name"] == "lr" else p for p in COMMON_PARAMS],
        {"name": "hidden", "type": "int", "default": 32, "min": 2, "max": 512, "description": "hidden units"},
    ],
}


def diabetes(seed: int) -> tuple[Any, Any, Any, Any]:
    import torch
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    x = torch.tensor(d.data, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.float32)
    x = (x - x.mean(0)) / x.std(0)
    y = (y - y.mean()) / y.std()
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(len(x) * 0.8)
    return x[perm[:cut]], y[perm[:cut]], x[perm[cut:]], y[perm[cut:]]


def main(argv: list[str] | None = None) -> int:
    from fw.recipes import parse_args
    from fw.recipes._train import train
    from fw.recipes.tabular import TabularMLP

    args = parse_args("diabetes_mlp", argv)
    return train("diabetes_mlp", args, diabetes, lambda p: TabularMLP(hidden=p["hidden"]), "regress")


if __name__ == "__main__":
    sys.exit(main())
