"""Weights-only checkpoints: a model's class, constructor kwargs, state_dict and an example input.

A checkpoint is what ``torch.save`` writes for this dict::

    {"fw_checkpoint": 1,
     "model_class": "package.module:ClassName",
     "model_kwargs": {...},           # constructor kwargs (str/int/float/bool/None, lists, dicts)
     "state_dict": {...},             # tensors
     "example_input": tensor | tuple of tensors | dict of tensors | None,
     "calibration_input": like example_input, with more rows | None,   # optional
     "meta": {...}}                   # free metadata: name, labels, preprocessing, metrics, ...

:func:`load` reads it with ``torch.load(weights_only=True)`` only -- no arbitrary code runs while
reading. It then imports the module named by ``model_class`` (so only load checkpoints naming
modules you trust to import), checks the class is a ``torch.nn.Module`` and rebuilds the model.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CHECKPOINT_VERSION = 1
_CLASS_RE = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_]\w*)*"
)


class CheckpointError(ValueError):
    """A checkpoint cannot be written or read."""


@dataclasses.dataclass
class Checkpoint:
    """What :func:`load` returns. ``model`` is in eval mode on ``map_location``."""

    model: Any
    model_class: str
    model_kwargs: dict[str, Any]
    example_input: Any
    meta: dict[str, Any]
    path: str
    calibration_input: Any = None


def _check_plain(value: Any, where: str) -> None:
    """Only types torch.load(weights_only=True) reads back: tensors, containers and scalars."""
    import torch

    if value is None or isinstance(value, (str, bool, int, float, torch.Tensor)):
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int)):
                raise CheckpointError(
                    f"{where} has a key of type {type(k).__name__}. Hint: use str keys so the checkpoint "
                    "loads with torch.load(weights_only=True)"
                )
            _check_plain(v, f"{where}[{k!r}]")
        return
    raise CheckpointError(
        f"{where} holds a {type(value).__module__}.{type(value).__qualname__}, which "
        "torch.load(weights_only=True) cannot read. Hint: store only tensors, str, int, float, bool, None, "
        "lists, tuples and dicts"
    )


def class_path(cls: type) -> str:
    """``"module:QualName"`` for a class, refusing classes that cannot be imported back."""
    module, qual = cls.__module__, cls.__qualname__
    if module == "__main__" or "<locals>" in qual:
        raise CheckpointError(
            f"model class {qual} is defined in {'a function' if '<locals>' in qual else 'the __main__ script'} "
            "and cannot be imported when the checkpoint is loaded. Hint: move the class into an importable "
            "module (a .py file on PYTHONPATH) and import it from there"
        )
    return f"{module}:{qual}"


def _init_kwargs(model: Any, model_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    if model_kwargs is not None:
        return dict(model_kwargs)
    recorded = getattr(model, "fw_init_kwargs", None)
    if recorded is not None:
        return dict(recorded)
    params = list(inspect.signature(type(model).__init__).parameters.values())[1:]
    required = [
        p.name
        for p in params
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if required:
        raise CheckpointError(
            f"{type(model).__qualname__}.__init__ needs {', '.join(required)} but the model does not record its "
            "constructor arguments. Hint: pass model_kwargs={...} to fw.checkpoint.save, or set "
            "self.fw_init_kwargs = {...} in the model's __init__"
        )
    return {}


def save(
    model: Any,
    path: str | Path,
    example_input: Any = None,
    *,
    model_kwargs: Mapping[str, Any] | None = None,
    calibration_input: Any = None,
    **meta: Any,
) -> Path:
    """Write a weights-only checkpoint of ``model`` to ``path`` and return the path.

    Constructor kwargs come from ``model_kwargs`` or else ``model.fw_init_kwargs``. ``example_input``
    (a tensor, or a tuple/dict of tensors) is needed by ``python -m fw.export``. ``meta`` keys such as
    ``name``, ``version``, ``description``, ``task``, ``labels``, ``preprocessing`` and ``metrics``
    are used by the exporter as defaults. ``calibration_input`` (optional, shaped like ``example_input``
    with a few hundred rows of training data) is what ``python -m fw.export --format onnx_int8
    --quantization static`` calibrates on.
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        raise CheckpointError(
            f"expected a torch.nn.Module, got {type(model).__qualname__}. Hint: pass the model object itself"
        )
    if isinstance(model, torch.jit.ScriptModule):
        raise CheckpointError(
            "cannot checkpoint a TorchScript module. Hint: save the eager nn.Module it was made from"
        )
    kwargs = _init_kwargs(model, model_kwargs)
    _check_plain(kwargs, "model_kwargs")
    _check_plain(meta, "meta")
    if example_input is not None:
        if isinstance(example_input, list):
            example_input = tuple(example_input)
        _check_plain(example_input, "example_input")
        example_input = _detach(example_input)
    if calibration_input is not None:
        if isinstance(calibration_input, list):
            calibration_input = tuple(calibration_input)
        _check_plain(calibration_input, "calibration_input")
        calibration_input = _detach(calibration_input)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    ckpt = {
        "fw_checkpoint": CHECKPOINT_VERSION,
        "model_class": class_path(type(model)),
        "model_kwargs": kwargs,
        "state_dict": state,
        "example_input": example_input,
        "meta": dict(meta),
    }
    if calibration_input is not None:
        ckpt["calibration_input"] = calibration_input
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path


def _detach(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, tuple):
        return tuple(_detach(v) for v in value)
    if isinstance(value, dict):
        return {k: _detach(v) for k, v in value.items()}
    return value


def resolve_class(spec: Any) -> type:
    """Import ``"module:QualName"`` and return the class, which must subclass torch.nn.Module."""
    import torch

    if not isinstance(spec, str) or not _CLASS_RE.fullmatch(spec):
        raise CheckpointError(
            f"model_class {spec!r} is not of the form 'package.module:ClassName'. Hint: write checkpoints "
            "with fw.checkpoint.save"
        )
    module_name, qual = spec.split(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise CheckpointError(
            f"model_class {spec!r}: module {module_name!r} cannot be imported ({e}). Hint: install or add to "
            "PYTHONPATH the package that defines the model"
        ) from e
    for part in qual.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise CheckpointError(
                f"model_class {spec!r}: {module_name} has no attribute {qual!r}. Hint: the class was renamed or "
                "moved; re-save the checkpoint or pass the new location"
            )
    if not (isinstance(obj, type) and issubclass(obj, torch.nn.Module)):
        raise CheckpointError(
            f"model_class {spec!r} is not a torch.nn.Module subclass; refusing to instantiate it. Hint: "
            "checkpoints must name the model's nn.Module class"
        )
    return obj


def _reason(e: BaseException) -> str:
    """The informative line of a torch.load error (no ANSI colours, no multi-line advice)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in str(e).splitlines()]
    lines = [ln for ln in lines if ln]
    for ln in lines:
        if "Unsupported global" in ln or "WeightsUnpickler error" in ln:
            ln = ln.split("WeightsUnpickler error:")[-1].strip()
            return ln.split(" was not an allowed global")[0] + " is not allowed in weights-only loading"
    return lines[0] if lines else type(e).__name__


def load(path: str | Path, map_location: str = "cpu") -> Checkpoint:
    """Read a checkpoint written by :func:`save` and rebuild its model (eval mode).

    Uses ``torch.load(weights_only=True)`` only; whole pickled modules, legacy pickles of custom
    objects and anything else that needs arbitrary unpickling are refused.
    """
    import pickle

    import torch

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist. Hint: check the path")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError, EOFError, ValueError) as e:
        first = _reason(e)
        raise CheckpointError(
            f"{path} cannot be read as a weights-only checkpoint ({first}). Hint: it may be a whole pickled model "
            "or an unrelated file; load it in trusted code and re-save with fw.checkpoint.save(model, path, "
            "example_input)"
        ) from e
    if not isinstance(ckpt, dict) or "fw_checkpoint" not in ckpt:
        what = "a state_dict" if isinstance(ckpt, dict) else f"a {type(ckpt).__name__}"
        raise CheckpointError(
            f"{path} holds {what}, not an fw checkpoint (no 'fw_checkpoint' key). Hint: build the model, "
            "load_state_dict() it and save with fw.checkpoint.save(model, path, example_input)"
        )
    version = ckpt["fw_checkpoint"]
    if not isinstance(version, int) or version > CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{path} has fw_checkpoint={version!r}; this fw reads version {CHECKPOINT_VERSION}. Hint: upgrade fw"
        )
    cls = resolve_class(ckpt.get("model_class"))
    kwargs = ckpt.get("model_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise CheckpointError(f"{path}: model_kwargs must be a dict. Hint: re-save with fw.checkpoint.save")
    try:
        model = cls(**kwargs)
    except TypeError as e:
        raise CheckpointError(
            f"{path}: {ckpt['model_class']}(**{kwargs}) failed: {e}. Hint: the class's constructor changed since "
            "the checkpoint was saved; re-save it"
        ) from e
    try:
        model.load_state_dict(ckpt.get("state_dict") or {}, strict=True)
    except RuntimeError as e:
        raise CheckpointError(
            f"{path}: the state_dict does not fit {ckpt['model_class']}: {str(e).splitlines()[0]}. Hint: the "
            "model's layers changed since the checkpoint was saved; re-save it"
        ) from e
    model.to(map_location).eval()
    return Checkpoint(
        model=model,
        model_class=ckpt["model_class"],
        model_kwargs=dict(kwargs),
        example_input=ckpt.get("example_input"),
        meta=dict(ckpt.get("meta") or {}),
        path=str(path),
        calibration_input=ckpt.get("calibration_input"),
    )
