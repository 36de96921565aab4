"""Recipe: fw.models.DigitsCNN on scikit-learn's 8x8 digits."""

from __future__ import annotations

import sys
from typing import Any

from fw.recipes._train import COMMON_PARAMS

RECIPE: dict[str, Any] = {
    "description": "small CNN (fw.models.DigitsCNN) classifying scikit-learn's 8x8 digits",
    "params": list(COMMON_PARAMS),
}


def main(argv: list[str] | None = None) -> int:
    from fw.models import DigitsCNN
    from fw.recipes import parse_args
    from fw.recipes._train import train
    from fw.recipes.digits_mlp import digits, digits_meta

    args = parse_args("digits_cnn", argv)
    return train(
        "digits_cnn",
        args,
        lambda s: digits(s, image=True),
        lambda p: DigitsCNN(),
        "classify",
        meta=digits_meta(flatten=False),
    )


if __name__ == "__main__":
    sys.exit(main())
