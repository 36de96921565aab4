"""Recipe: fw.models.DigitsMLP on scikit-learn's 8x8 digits (1,797 images, bundled with scikit-learn)."""

from __future__ import annotations

import sys
from typing import Any

from fw.recipes._train import COMMON_PARAMS

RECIPE: dict[str, Any] = {
    "description": "MLP (fw.models.DigitsMLP) classifying scikit-learn's 8x8 digits",
    "params": [
        *COMMON_PARAMS,
        {
            "name": "hidden",
            "type": "int",
            "default": 128,
            "min": 4,
            "max": 1024,
            "description": "hidden units",
        },
    ],
}


def digits(seed: int, image: bool = False) -> tuple[Any, Any, Any, Any]:
    """Digits as float32 tensors in 0..1 (``[N, 64]``, or ``[N, 1, 8, 8]`` with ``image``), 80/20 split."""
    import torch
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    if image:
        x = x.reshape(-1, 1, 8, 8)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(len(x) * 0.8)
    return x[perm[:cut]], y[perm[:cut]], x[perm[cut:]], y[perm[cut:]]


def digits_meta(flatten: bool) -> dict[str, Any]:
    """Checkpoint metadata for the digits recipes: the class labels and the image preprocessing that
    turns an uploaded image into the recipe's input (8x8 grey, 0..1), so an exported model answers
    ``/predict/image`` and names its classes."""
    from fw import metadata

    return {
        "task": "classification",
        "labels": [str(i) for i in range(10)],
        "preprocessing": metadata.image_preprocessing(
            8, 8, 1, scale=1 / 255, resize="nearest", flatten=flatten
        ),
    }


def main(argv: list[str] | None = None) -> int:
    from fw.models import DigitsMLP
    from fw.recipes import parse_args
    from fw.recipes._train import train

    args = parse_args("digits_mlp", argv)
    return train(
        "digits_mlp",
        args,
        digits,
        lambda p: DigitsMLP(hidden=p["hidden"]),
        "classify",
        meta=digits_meta(flatten=True),
    )


if __name__ == "__main__":
    sys.exit(main())
