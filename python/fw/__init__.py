"""fw: export PyTorch models into fw model files.

Submodules are imported lazily, so ``import fw`` is fast and does not import torch:

* :mod:`fw.export`     -- ``torchscript()``, ``onnx()``, ``quantized()`` and ``python -m fw.export``
* :mod:`fw.checkpoint` -- ``save()`` / ``load()`` of weights-only checkpoints
* :mod:`fw.metadata`   -- build, validate, encode and read the ``fw.json`` document
* :mod:`fw.models`     -- reference model classes
* :mod:`fw.reference`  -- ``python -m fw.reference`` builds the reference model files
* :mod:`fw.track`      -- ``with fw.track.run(experiment=...) as run: run.log(...)``: experiment tracking
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
__all__ = ["checkpoint", "export", "metadata", "models", "reference", "track", "__version__"]

_SUBMODULES = frozenset({"checkpoint", "export", "metadata", "models", "reference", "track"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'fw' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _SUBMODULES)
