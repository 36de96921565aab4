"""Export a PyTorch model into one fw model file and check it against the eager model.

Python API (each returns an :class:`ExportReport`)::

    fw.export.torchscript(model, example_input, "m.ts.pt", method="trace")
    fw.export.onnx(model, example_input, "m.onnx", opset_version=14)
    fw.export.quantized(model, example_input, "m.quant.pt", eval_data=(x, y))
    fw.export.onnx_int8(model, example_input, "m.int8.onnx", quantization="dynamic")
    fw.export.onnx_int8(model, example_input, "m.int8.onnx", quantization="static", calibration=x_train[:256])
    fw.export.aoti(model, example_input, "m.pt2")  # AOTInductor package (compiles C++: needs g++)

Command line (prints a one-line JSON report on stdout; errors on stderr, exit 1; usage errors exit 2)::

    python -m fw.export CHECKPOINT --format onnx|torchscript|quantized|onnx_int8|aoti --out PATH
                        [--opset N] [--exporter auto|dynamo|legacy] [--method trace|script]
                        [--name N] [--version V]
                        [--quantization dynamic|static] [--calibration FILE.npz] [--per-channel]

Every file embeds ``fw.json`` (docs/model-format.md). ``preprocessing=`` is the image recipe: a dict (the
simple form, :func:`fw.metadata.image_preprocessing`) or the model's torchvision eval transform
(``transforms.Compose`` / ``transforms.v2.Compose``, see :mod:`fw.transforms`), written as its steps;
with one, the test vector also holds a sample picture and what the pipeline and the model make of it. After writing, the file is loaded back
(``torch.jit.load`` / ``onnxruntime`` / ``torch._inductor.aoti_load_package``) and compared with the eager model on the example input and
on random inputs with other batch sizes; a file beyond tolerance is removed and
:class:`ParityError` raised.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import inspect
import io
import json
import keyword
import math
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from fw import metadata as _md

METHODS = ("trace", "script")
# fw.export.aoti captures the model with torch.export (neither trace nor script).
AOTI_METHOD = "export"
AOTI_DEVICES = ("cpu", "cuda")
# Keys of AOTInductor's package metadata (inductor_configs["aot_inductor.metadata"]) that fw writes:
# fw.json itself, and the CPU features of the exporting machine that a -march=native package needs.
AOTI_CPU_FLAGS_KEY = "fw.cpu_flags"
# ONNX: the exporters fw.export.onnx can use. "auto" (the default) is torch's current exporter
# ("dynamo", built on torch.export), falling back to the legacy TorchScript-based one ("legacy",
# torch.onnx.export(dynamo=False)) with the reason printed when the current one cannot export the
# model; method="script" is legacy only (torch.export does not take ScriptModules).
ONNX_EXPORTER_CHOICES = ("auto", "dynamo", "legacy")
# The opset each exporter writes by default: the dynamo exporter's own (torch's choice: 20 with
# torch 2.13; fw.json records the one written); the legacy exporter's is the seed format's 14. An
# explicit opset_version applies to both (the dynamo exporter converts its graph with the onnx
# version converter).
DEFAULT_OPSET = 14
CHECK_BATCHES = (1, 7)
# AOTInductor packages also run a batch beyond the 15 rows at which Inductor's CPU convolution
# heuristics change (see _aoti_batch_range), through fw's batch splitting.
AOTI_CHECK_BATCHES = (1, 7, 33)
# The least (atol, rtol) a CUDA package is held to against the eager model on the CPU: cuDNN runs
# convolutions in TF32 by default on Ampere and newer (PyTorch's own default), which put a
# ResNet-18's logits about 2e-3 from float32's on an H200 (docs/gpu-check.md). The same floor as
# the engine's test-vector check on a GPU (engine.GPUTolerance); a looser tolerance passed still applies.
GPU_TOLERANCE = (1e-2, 1e-2)
TEST_VECTOR_ROWS = 4
ONNX_EXPORTER = "torch.onnx (legacy TorchScript-based)"
DYNAMO_EXPORTER = "torch.onnx (dynamo, torch.export-based)"

# (atol, rtol) for the comparison file-vs-eager done here ("parity") and for the test vector the
# engine replays at load ("test_vector": same file, another runtime build / thread count).
TOLERANCES = {
    "torchscript": {"parity": (1e-4, 1e-4), "test_vector": (1e-4, 1e-4)},
    "onnx": {"parity": (1e-4, 1e-3), "test_vector": (1e-4, 1e-3)},
    # int8 dynamic quantization moves outputs by design; accuracy_delta is the meaningful measure.
    "quantized": {"parity": (0.25, 0.1), "test_vector": (1e-2, 1e-2)},
    # int8 ONNX: the same loose bound against the eager model (int8 rounding of weights and activations);
    # the test vector holds the int8 file's own outputs, which another ONNX Runtime build or CPU
    # reproduces up to integer-kernel differences (e.g. u8s8 saturation on CPUs without VNNI).
    "onnx_int8": {"parity": (0.25, 0.1), "test_vector": (1e-2, 1e-2)},
    # Inductor fuses and reorders float operations (and picks its own GEMM/conv paths).
    "aoti": {"parity": (1e-4, 1e-3), "test_vector": (1e-4, 1e-3)},
}

# onnx_int8: how activations get their int8 scale.
QUANTIZATIONS = ("dynamic", "static")
# onnx_int8 static: onnxruntime.quantization.CalibrationMethod by fw's name for it.
CALIBRATION_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}
# Rows per calibration batch (bounds the memory of one calibration run on big models).
CALIBRATION_BATCH = 16
# How many training rows fw's recipes and reference models keep in a checkpoint for calibration.
DEFAULT_CALIBRATION_ROWS = 256
# onnx_int8 with eval_data: the largest accuracy loss accepted before the file is refused.
DEFAULT_MAX_ACCURACY_DROP = 0.01


class ExportError(RuntimeError):
    """The model cannot be exported as asked."""


class ParityError(ExportError):
    """The exported file's outputs differ from the eager model beyond tolerance."""


@dataclasses.dataclass
class ExportReport:
    """Summary of one export; ``to_dict()`` is what the CLI prints as JSON."""

    path: str
    format: str
    name: str
    max_abs_error: float
    atol: float
    rtol: float
    size_bytes: int
    seconds: float
    method: str
    checks: list[dict[str, Any]]
    accuracy: float | None = None
    eager_accuracy: float | None = None
    accuracy_delta: float | None = None
    quantization: str | None = None
    # ONNX: the exporter used ("dynamo" or "legacy"), and why the current one was not (auto mode).
    exporter: str | None = None
    fallback: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@contextlib.contextmanager
def quiet_warnings() -> Iterator[None]:
    """Hide the deprecation noise of the legacy exporters (torch.jit.*, torch.onnx dynamo=False,
    torch.ao.quantization). See python/README.md for what replaces them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch(\..*)?$")
        warnings.filterwarnings("ignore", message=r".*(deprecated|Deprecated|legacy).*")
        yield


# ---------------------------------------------------------------------------- inputs and outputs


def _forward_params(model: Any) -> list[str]:
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _positional(
    model: Any, example_input: Any, input_names: Sequence[str] | None
) -> tuple[list[str], tuple[Any, ...]]:
    """Input names and positional args from a tensor, a tuple/list or a dict of tensors."""
    import torch

    params = _forward_params(model)
    if isinstance(example_input, torch.Tensor):
        args: tuple[Any, ...] = (example_input,)
        default = list(getattr(model, "fw_input_names", ()) or ["input"])
    elif isinstance(example_input, (tuple, list)):
        args = tuple(example_input)
        default = list(getattr(model, "fw_input_names", ()) or params or [])
        if len(default) < len(args):
            default = [f"input_{i}" for i in range(len(args))]
    elif isinstance(example_input, Mapping):
        if input_names is not None:
            raise ExportError(
                "input_names= cannot be combined with a dict example_input. Hint: the dict keys are the names"
            )
        unknown = [k for k in example_input if k not in params]
        if unknown:
            raise ExportError(
                f"example_input keys {unknown} are not parameters of {type(model).__name__}.forward{params}. "
                "Hint: key the dict by the forward() parameter names"
            )
        order = [p for p in params if p in example_input]
        if order != params[: len(order)]:
            raise ExportError(
                f"example_input covers {order} but forward() takes {params} positionally, so an earlier "
                "parameter would be missing. Hint: give every forward() parameter up to the last one you use"
            )
        args = tuple(example_input[k] for k in order)
        default = order
    else:
        raise ExportError(
            f"example_input must be a tensor, a tuple/list of tensors or a dict of tensors, got "
            f"{type(example_input).__name__}. Hint: pass e.g. torch.zeros(4, 64)"
        )
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise ExportError(
                f"example input {i} is a {type(a).__name__}. Hint: every input must be a tensor"
            )
        if a.dim() == 0 or a.shape[0] < 1:
            raise ExportError(
                f"example input {i} has shape {list(a.shape)}; inputs need a batch axis first with at least one "
                "row. Hint: add a batch axis, e.g. x.unsqueeze(0)"
            )
    batches = {int(a.shape[0]) for a in args}
    if len(batches) != 1:
        raise ExportError(
            f"example inputs disagree on the batch size (axis 0): {sorted(batches)}. Hint: give every input the "
            "same number of rows"
        )
    names = list(input_names) if input_names is not None else default[: len(args)]
    if len(names) != len(args) or len(set(names)) != len(names):
        raise ExportError(f"need {len(args)} distinct input names, got {names}. Hint: pass input_names=[...]")
    return names, tuple(a.detach().cpu() for a in args)


def _as_outputs(out: Any) -> list[Any]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return list(out)
    raise ExportError(
        f"the model returned {type(out).__name__}; fw model files need a tensor or a tuple of tensors. "
        "Hint: return a tensor or a tuple of tensors from forward() (not a dict or nested structures)"
    )


def _output_names(model: Any, n: int, output_names: Sequence[str] | None) -> list[str]:
    if output_names is not None:
        names = list(output_names)
    else:
        names = list(getattr(model, "fw_output_names", ()) or [])
        if len(names) != n:
            names = ["output"] if n == 1 else [f"output_{i}" for i in range(n)]
    if len(names) != n or len(set(names)) != n:
        raise ExportError(f"the model has {n} outputs but got names {names}. Hint: pass output_names=[...]")
    return names


def _to_numpy(values: Sequence[Any]) -> list[Any]:
    import numpy as np

    return [np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v) for v in values]


def _random_inputs(model: Any, args: tuple[Any, ...], batch: int, gen: Any) -> tuple[Any, ...]:
    """Random inputs shaped like ``args`` but with ``batch`` rows, in the example's value range."""
    import torch

    vocab = [m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    out = []
    for a in args:
        shape = (batch, *a.shape[1:])
        if a.dtype == torch.bool:
            out.append(torch.rand(shape, generator=gen) < 0.5)
        elif a.dtype.is_floating_point:
            lo, hi = (float(a.min()), float(a.max())) if a.numel() else (0.0, 1.0)
            r = torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo
            out.append(r.to(a.dtype))
        else:
            lo = min(0, int(a.min())) if a.numel() else 0
            hi = min(vocab) if vocab else (int(a.max()) + 1 if a.numel() else 2)
            out.append(torch.randint(lo, max(hi, lo + 1), shape, generator=gen, dtype=a.dtype))
    return tuple(out)


def _compare(
    got: list[Any], want: list[Any], names: list[str], atol: float, rtol: float
) -> tuple[float, str]:
    """(max abs error, "" or a description of the first violation)."""
    import numpy as np

    worst = 0.0
    problem = ""
    for name, g, w in zip(names, got, want, strict=True):
        if g.shape != w.shape:
            return math.inf, f"output {name!r} has shape {list(g.shape)}, eager gives {list(w.shape)}"
        if g.dtype == np.bool_ or w.dtype == np.bool_:
            g, w = g.astype(np.float64), w.astype(np.float64)
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        if g64.size == 0:
            continue
        nan_mismatch = np.isnan(g64) != np.isnan(w64)
        if nan_mismatch.any():
            return math.inf, f"output {name!r} has NaN where the eager model does not (or the reverse)"
        diff = np.abs(np.nan_to_num(g64) - np.nan_to_num(w64))
        err = float(diff.max())
        worst = max(worst, err)
        bad = diff > atol + rtol * np.abs(np.nan_to_num(w64))
        if bad.any() and not problem:
            idx = np.unravel_index(int(np.argmax(np.where(bad, diff, -1.0))), diff.shape)
            problem = (
                f"output {name!r} at {list(map(int, idx))}: got {g64[idx]:.6g}, eager {w64[idx]:.6g} "
                f"(|diff| {diff[idx]:.3g} > atol {atol:g} + rtol {rtol:g} * |eager|)"
            )
    return worst, problem


def _accuracy(run: Any, x: Any, y: Any) -> float:
    import numpy as np
    import torch

    xs = x if isinstance(x, (tuple, list)) else (x,)
    y = np.asarray(y.cpu().numpy() if hasattr(y, "cpu") else y).reshape(-1)
    preds = []
    n = int(xs[0].shape[0])
    step = 4096  # dynamic quantization scales activations per call: evaluate in as few calls as possible
    for start in range(0, n, step):
        chunk = tuple(torch.as_tensor(t[start : start + step]) for t in xs)
        preds.append(np.asarray(run(chunk)[0]).argmax(axis=-1))
    return float((np.concatenate(preds) == y).mean())


# ---------------------------------------------------------------------------- shared pipeline


def _tolerance(fmt: str, tolerance: float | tuple[float, float] | None) -> tuple[float, float]:
    if tolerance is None:
        return TOLERANCES[fmt]["parity"]
    if isinstance(tolerance, (int, float)):
        return float(tolerance), 0.0
    atol, rtol = tolerance
    return float(atol), float(rtol)


def _device_tolerance(
    fmt: str, tolerance: float | tuple[float, float] | None, device: str
) -> tuple[float, float]:
    """The parity tolerance of a file compiled for ``device``: on CUDA at least GPU_TOLERANCE."""
    atol, rtol = _tolerance(fmt, tolerance)
    if device == "cuda":
        atol, rtol = max(atol, GPU_TOLERANCE[0]), max(rtol, GPU_TOLERANCE[1])
    return atol, rtol


def _default_name(path: Path, name: str | None) -> str:
    if name is None:
        name = path.name.split(".")[0]
        if not _md.NAME_RE.fullmatch(name):
            raise ExportError(
                f"cannot derive a model name from the file name {path.name!r}. Hint: pass name='my_model'"
            )
    return _md.validate_name(name)


def _atomic_write(path: Path, write: Any) -> None:
    """Write into a temporary folder next to ``path``, then rename (readers never see half a file).

    The temporary file has the final file name, so TorchScript's archive folder is named after it.
    """
    import shutil

    path.parent.mkdir(parents=True, exist_ok=True)
    tmpdir = tempfile.mkdtemp(prefix=".fw-export-", dir=path.parent)
    try:
        tmp = os.path.join(tmpdir, path.name)
        write(tmp)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


class _Job:
    """State shared by the three exporters: eager reference outputs and metadata inputs."""

    def __init__(
        self,
        fmt: str,
        model: Any,
        example_input: Any,
        path: str | os.PathLike[str],
        method: str,
        name: str | None,
        input_names: Sequence[str] | None,
        output_names: Sequence[str] | None,
    ) -> None:
        import torch

        if not isinstance(model, torch.nn.Module):
            raise ExportError(f"expected a torch.nn.Module, got {type(model).__name__}. Hint: pass the model")
        if method not in METHODS and not (fmt == "aoti" and method == AOTI_METHOD):
            raise ExportError(f"method must be 'trace' or 'script', got {method!r}. Hint: use method='trace'")
        self.t0 = time.perf_counter()
        self.fmt = fmt
        self.method = method
        self.path = Path(path)
        self.name = _default_name(self.path, name)
        self.model = model.eval()
        self.input_names, self.args = _positional(model, example_input, input_names)
        with torch.no_grad():
            out = _as_outputs(model(*self.args))
        self.output_names = _output_names(model, len(out), output_names)
        self.eager_out = _to_numpy(out)
        self.inputs = [
            _md.io_spec(n, a.dtype, a.shape) for n, a in zip(self.input_names, self.args, strict=True)
        ]
        self.outputs = [_md.io_spec(n, o.dtype, o.shape) for n, o in zip(self.output_names, out, strict=True)]
        rows = min(TEST_VECTOR_ROWS, int(self.args[0].shape[0]))
        self.tv_args = tuple(a[:rows].contiguous() for a in self.args)

    def eager(self, args: tuple[Any, ...]) -> list[Any]:
        import torch

        with torch.no_grad():
            return _to_numpy(_as_outputs(self.model(*args)))

    def test_vector(self, outputs: list[Any]) -> dict[str, Any]:
        atol, rtol = TOLERANCES[self.fmt]["test_vector"]
        return {
            "inputs": {n: _md.encode_tensor(a) for n, a in zip(self.input_names, self.tv_args, strict=True)},
            "outputs": {n: _md.encode_tensor(o) for n, o in zip(self.output_names, outputs, strict=True)},
            "atol": atol,
            "rtol": rtol,
        }

    def metadata(
        self, tv_outputs: list[Any], export: dict[str, Any], fields: dict[str, Any], run: Any = None
    ) -> str:
        """fw.json text; ``run(args) -> list of arrays`` computes the image test case's outputs (the
        written model's code: the eager model by default)."""
        fields = dict(fields)
        fields["preprocessing"] = self.preprocessing(fields.get("preprocessing"))
        tv = self.test_vector(_to_numpy(tv_outputs))
        image = (fields["preprocessing"] or {}).get("image")
        if image is not None and len(self.args) == 1:
            tv["image"] = self.image_case(image, run or self.eager)
        doc = _md.build(
            name=self.name,
            format=self.fmt,
            inputs=self.inputs,
            outputs=self.outputs,
            export={**export, "dynamic_batch": True},
            test_vector=tv,
            **fields,
        )
        return _md.dumps(doc)

    def preprocessing(self, pre: Any) -> Mapping[str, Any] | None:
        """``preprocessing=`` as fw.json holds it: a dict as given, or a torchvision transform as its steps
        (flattened when the first input is one vector per sample)."""
        if pre is None or isinstance(pre, Mapping):
            return pre
        from fw import transforms

        shape = list(self.args[0].shape)
        try:
            out = transforms.image_preprocessing_from(pre)
            if len(shape) == 2:
                image = out["image"]
                if image["channels"] * image["height"] * image["width"] == shape[1]:
                    image["flatten"] = True
        except transforms.TransformError as e:
            raise ExportError(f"preprocessing: {e}") from e
        return out

    def image_case(self, image: Mapping[str, Any], run: Any) -> dict[str, Any]:
        """test_vector.image: a sample picture, what the user's Python pipeline makes of it and the
        model's outputs for that (docs/model-format.md)."""
        import base64

        import numpy as np

        from fw import transforms

        png = transforms.sample_png()
        try:
            x = transforms.preprocess(png, image)
        except Exception as e:
            raise ExportError(
                f"preprocessing: running it on a sample picture failed: {e}. Hint: check the transform on a "
                "PIL image, e.g. transform(Image.open(path).convert('RGB'))"
            ) from e
        x = x.reshape(1, *self.args[0].shape[1:]) if image.get("flatten") else x.unsqueeze(0)
        x = x.to(self.args[0].dtype).contiguous()
        if list(x.shape[1:]) != list(self.args[0].shape[1:]):
            raise ExportError(
                f"preprocessing makes samples of shape {list(x.shape[1:])} but the model's first input takes "
                f"{list(self.args[0].shape[1:])}. Hint: make the transform's output size and channels match"
            )
        outs = [np.asarray(v) for v in run((x,))]
        self.image_input, self.image_outputs = x, outs
        # One 8-bit level after normalisation where PyTorch's uint8 kernels run (they differ by a level
        # between CPUs with and without AVX2); fw reproduces everything else exactly.
        atol = 1e-5
        steps = image.get("steps")
        if steps is None:
            atol = 1e-4  # the simple form folds scale and normalisation into one multiply-add
        elif transforms.uses_tensor_kernels(steps):
            stds = [abs(v) for st in steps if st["op"] == "normalize" for v in st["std"]] or [1.0]
            atol = 1e-5 + 1.0 / 255 / min(stds)
        return {
            "image_b64": base64.b64encode(png).decode("ascii"),
            "input": _md.encode_tensor(x),
            "input_atol": atol,
            "outputs": {n: _md.encode_tensor(o) for n, o in zip(self.output_names, outs, strict=True)},
        }

    def check(
        self,
        run: Any,
        tolerance: float | tuple[float, float] | None,
        eval_data: tuple[Any, Any] | None,
        samples: tuple[Any, ...] | None = None,
        batches: Sequence[int] = CHECK_BATCHES,
    ) -> ExportReport:
        """Compare the written file (``run(args) -> list of arrays``) with the eager model.

        The extra batches are random inputs in the example's value range, or, given ``samples``
        (positional input tensors), rows drawn at random from them.
        """
        import torch

        atol, rtol = _tolerance(self.fmt, tolerance)
        gen = torch.Generator().manual_seed(0)
        cases = [("example", self.args, self.eager_out)]
        if getattr(self, "image_input", None) is not None:
            cases.append(("sample picture", (self.image_input,), self.eager((self.image_input,))))
        for b in batches:
            if samples is not None:
                idx = torch.randint(0, int(samples[0].shape[0]), (b,), generator=gen)
                args = tuple(s[idx] for s in samples)
                cases.append((f"calibration rows batch {b}", args, self.eager(args)))
                continue
            args = _random_inputs(self.model, self.args, b, gen)
            cases.append((f"random batch {b}", args, self.eager(args)))
        checks = []
        worst = 0.0
        for label, args, want in cases:
            try:
                got = [v for v in run(args)]
            except Exception as e:  # the runtime itself refused the input
                self._reject()
                raise ParityError(
                    f"the exported {self.fmt} file {self.path} fails on the {label} input "
                    f"(batch {int(args[0].shape[0])}): {str(e).strip().splitlines()[0] if str(e).strip() else e!r}. "
                    f"The file was removed. Hint: {self._hint()}"
                ) from e
            err, problem = _compare(got, want, self.output_names, atol, rtol)
            checks.append({"input": label, "batch": int(args[0].shape[0]), "max_abs_error": err})
            worst = max(worst, err)
            if problem:
                self._reject()
                raise ParityError(
                    f"the exported {self.fmt} file {self.path} differs from the eager model on the {label} "
                    f"input (batch {int(args[0].shape[0])}): max |got - eager| = {err:.4g}; {problem}. "
                    f"The file was removed. Hint: {self._hint()}"
                )
        report = ExportReport(
            path=str(self.path),
            format=self.fmt,
            name=self.name,
            max_abs_error=worst,
            atol=atol,
            rtol=rtol,
            size_bytes=self.path.stat().st_size,
            seconds=0.0,
            method=self.method,
            checks=checks,
        )
        if eval_data is not None:
            x, y = eval_data
            report.eager_accuracy = _accuracy(lambda a: self.eager(a), x, y)
            report.accuracy = _accuracy(run, x, y)
            report.accuracy_delta = report.accuracy - report.eager_accuracy
        report.seconds = round(time.perf_counter() - self.t0, 3)
        return report

    def _reject(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _hint(self) -> str:
        if self.fmt == "onnx_int8":
            return (
                "int8 quantization moved the outputs too far for this model; try quantization='static' with a "
                "calibration set like the serving data, per_channel=True, or pass a looser tolerance=(atol, rtol) "
                "if accuracy_delta is acceptable; or export fp32 with fw.export.onnx"
            )
        if self.fmt == "aoti":
            return (
                "AOTInductor compiled the model into different kernels; check forward() for ops whose result "
                "depends on the batch size, or pass a looser tolerance=(atol, rtol)"
            )
        if self.fmt == "quantized":
            return (
                "int8 quantization moved the outputs too far for this model; pass a looser tolerance=(atol, rtol) "
                "if accuracy_delta is acceptable, or export without quantization"
            )
        if self.method == "trace":
            return (
                "tracing records one run, so shape- or data-dependent Python control flow is frozen; use "
                "method='script', or make forward() free of such branches"
            )
        return (
            "check for ops the exporter does not support identically, or pass a looser tolerance=(atol, rtol)"
        )


def _fields(
    version: str,
    labels: Sequence[str] | None,
    preprocessing: Any,
    task: str | None,
    metrics: Mapping[str, float] | None,
    description: str | None,
) -> dict[str, Any]:
    return {
        "version": version,
        "labels": labels,
        "preprocessing": preprocessing,
        "task": task,
        "metrics": metrics,
        "description": description,
    }


def _script_module(model: Any, args: tuple[Any, ...], method: str) -> Any:
    import torch

    with quiet_warnings():
        try:
            if method == "script":
                return torch.jit.script(model)
            return torch.jit.trace(model, args, check_trace=False)
        except Exception as e:
            other = "trace" if method == "script" else "script"
            raise ExportError(
                f"torch.jit.{method} failed on {type(model).__name__}: {str(e).strip().splitlines()[0]}. "
                f"Hint: try method='{other}', or simplify forward() to tensor operations"
            ) from e


def _module_runner(module: Any) -> Any:
    """``run(args) -> list of arrays`` for an in-memory module."""
    import torch

    def run(args: tuple[Any, ...]) -> list[Any]:
        with torch.no_grad():
            return _to_numpy(_as_outputs(module(*args)))

    return run


def _jit_runner(path: Path) -> Any:
    import torch

    with quiet_warnings():
        loaded = torch.jit.load(str(path), map_location="cpu").eval()

    def run(args: tuple[Any, ...]) -> list[Any]:
        with torch.no_grad():
            return _to_numpy(_as_outputs(loaded(*args)))

    return run


def _write_jit(sm: Any, path: Path, text: str) -> None:
    import torch

    def write(tmp: str) -> None:
        with quiet_warnings():
            torch.jit.save(sm, tmp, _extra_files={_md.METADATA_KEY: text})

    _atomic_write(path, write)


# ---------------------------------------------------------------------------- public exporters


def torchscript(
    model: Any,
    example_input: Any,
    path: str | os.PathLike[str],
    method: str = "trace",
    name: str | None = None,
    version: str = "1",
    labels: Sequence[str] | None = None,
    preprocessing: Any = None,
    task: str | None = None,
    metrics: Mapping[str, float] | None = None,
    tolerance: float | tuple[float, float] | None = None,
    *,
    description: str | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    eval_data: tuple[Any, Any] | None = None,
) -> ExportReport:
    """Write ``model`` as a TorchScript archive (``torch.jit.trace`` or ``torch.jit.script``) with fw.json.

    ``tolerance`` is a max absolute error (float) or ``(atol, rtol)``; default ``TOLERANCES``.
    ``name`` defaults to the file name up to its first dot.
    """
    job = _Job("torchscript", model, example_input, path, method, name, input_names, output_names)
    import torch

    sm = _script_module(job.model, job.args, method)
    with torch.no_grad():
        tv_out = _as_outputs(sm(*job.tv_args))
    exporter = f"torch.jit.{method}"
    text = job.metadata(
        tv_out,
        {"method": method, "opset_version": None, "quantization": None, "exporter": exporter},
        _fields(version, labels, preprocessing, task, metrics, description),
        run=_module_runner(sm),
    )
    _write_jit(sm, job.path, text)
    return job.check(_jit_runner(job.path), tolerance, eval_data)


def quantized(
    model: Any,
    example_input: Any,
    path: str | os.PathLike[str],
    method: str = "dynamic",
    name: str | None = None,
    version: str = "1",
    labels: Sequence[str] | None = None,
    preprocessing: Any = None,
    task: str | None = None,
    metrics: Mapping[str, float] | None = None,
    tolerance: float | tuple[float, float] | None = None,
    *,
    jit_method: str = "trace",
    description: str | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    eval_data: tuple[Any, Any] | None = None,
) -> ExportReport:
    """int8 dynamic quantization of ``nn.Linear`` and ``nn.LSTM``, saved as TorchScript with fw.json.

    ``method`` is the quantization method (only ``"dynamic"``); ``jit_method`` is how the quantized
    model becomes TorchScript (``"trace"`` or ``"script"``). Give ``eval_data=(x, y)`` to get
    ``accuracy`` / ``accuracy_delta`` (quantized minus eager accuracy, argmax of the first output).
    """
    if method != "dynamic":
        raise ExportError(
            f"quantization method {method!r} is not supported. Hint: use method='dynamic' (int8 weights, "
            "activations quantized at run time)"
        )
    import torch
    from torch import nn

    job = _Job("quantized", model, example_input, path, jit_method, name, input_names, output_names)
    with quiet_warnings():
        from torch.ao.quantization import quantize_dynamic

        qmodel = quantize_dynamic(copy.deepcopy(job.model), {nn.Linear, nn.LSTM}, dtype=torch.qint8).eval()
    replaced = [
        m
        for m in qmodel.modules()
        if type(m).__module__.startswith("torch.ao.nn.quantized.dynamic") and "Packed" not in type(m).__name__
    ]
    if not replaced:
        raise ExportError(
            f"{type(model).__name__} has no nn.Linear or nn.LSTM layer, so dynamic quantization changes nothing. "
            "Hint: export it with fw.export.torchscript or fw.export.onnx instead"
        )
    sm = _script_module(qmodel, job.args, jit_method)
    with torch.no_grad():
        tv_out = _as_outputs(sm(*job.tv_args))
    export = {
        "method": jit_method,
        "opset_version": None,
        "quantization": "dynamic",
        "exporter": f"torch.ao.quantization.quantize_dynamic + torch.jit.{jit_method}",
        "quantized_dtype": "qint8",
        "quantized_modules": sorted({f"nn.{type(m).__name__}" for m in replaced}),
        "quantized_engine": torch.backends.quantized.engine,
    }
    text = job.metadata(
        tv_out,
        export,
        _fields(version, labels, preprocessing, task, metrics, description),
        run=_module_runner(sm),
    )
    _write_jit(sm, job.path, text)
    return job.check(_jit_runner(job.path), tolerance, eval_data)


def _write_onnx(job: _Job, proto: Any, text: str, what: str) -> None:
    """Put fw.json ``text`` into ``proto``'s metadata (replacing one already there), check the model
    and write it to the job's path atomically."""
    import onnx as onnx_lib

    for prop in list(proto.metadata_props):
        if prop.key == _md.METADATA_KEY:
            proto.metadata_props.remove(prop)
    entry = proto.metadata_props.add()
    entry.key, entry.value = _md.METADATA_KEY, text
    try:
        onnx_lib.checker.check_model(proto)
    except onnx_lib.checker.ValidationError as e:
        raise ExportError(f"the {what} ONNX model is invalid: {e}. Hint: try another opset_version") from e

    def write(tmp: str) -> None:
        onnx_lib.save_model(proto, tmp, save_as_external_data=False)

    _atomic_write(job.path, write)


def _legacy_onnx(job: _Job, target: Any, opset_version: int) -> bytes:
    """The model through torch's TorchScript-based exporter, as ONNX bytes."""
    import torch

    names = job.input_names + job.output_names
    buf = io.BytesIO()
    with quiet_warnings(), contextlib.redirect_stdout(sys.stderr):
        torch.onnx.export(
            target,
            job.args,
            buf,
            dynamo=False,
            opset_version=opset_version,
            input_names=job.input_names,
            output_names=job.output_names,
            dynamic_axes={n: {0: "batch"} for n in names},
            do_constant_folding=True,
        )
    return buf.getvalue()


@contextlib.contextmanager
def _quiet_loggers(*names: str) -> Iterator[None]:
    """Raise these loggers to ERROR for the block: the exporters log their fallbacks (with
    tracebacks) at WARNING, which fw reports in one line of its own."""
    import logging

    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, lv in zip(loggers, levels, strict=True):
            lg.setLevel(lv)


def _dynamo_onnx(job: _Job, opset_version: int | None) -> bytes:
    """The model through torch's current exporter (torch.export, then onnxscript's optimizer), as one
    ONNX file's bytes: axis 0 of every input is dynamic (the batch), weights are inside the file."""
    import torch

    dim = torch.export.Dim.DYNAMIC
    shapes = tuple({0: dim} for _ in job.args)
    kwargs: dict[str, Any] = {}
    if opset_version is not None:
        kwargs["opset_version"] = opset_version
    with (
        quiet_warnings(),
        _quiet_loggers("torch.onnx", "onnxscript", "torch.export", "torch._dynamo"),
        contextlib.redirect_stdout(sys.stderr),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        prog = torch.onnx.export(
            job.model,
            job.args,
            dynamo=True,
            input_names=job.input_names,
            output_names=job.output_names,
            dynamic_shapes=shapes,
            external_data=False,
            optimize=True,
            verbose=False,
            **kwargs,
        )
        if prog is None:
            raise ExportError("torch.onnx.export returned no program")
        proto = prog.model_proto
    written = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset_version is not None and written != opset_version:
        # torch exports at 18 at least and converts down with onnx's version converter, which lacks
        # adapters for some ops; then it keeps 18. An explicit opset is a promise: not kept here.
        raise ExportError(
            f"it could not write opset {opset_version} (onnx's version converter failed; it wrote {written})"
        )
    # torch.export names the batch axis after its symbol (s77); name it "batch" as the legacy
    # exporter does, wherever the graph's inputs, outputs and value infos use that symbol.
    rename: dict[str, str] = {}
    for vi in proto.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if dims and dims[0].dim_param and dims[0].dim_param not in rename:
            rename[dims[0].dim_param] = "batch" if not rename else f"batch_{len(rename)}"
    for vi in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param in rename:
                d.dim_param = rename[d.dim_param]
    # The onnx package writes the newest IR version it knows; fw's engine (and older ONNX Runtime
    # builds) read IR 10, which opset 18+ graphs need and which holds everything the exporter emits.
    proto.ir_version = min(proto.ir_version, 10)
    return proto.SerializeToString()


def onnx(
    model: Any,
    example_input: Any,
    path: str | os.PathLike[str],
    opset_version: int | None = None,
    name: str | None = None,
    version: str = "1",
    labels: Sequence[str] | None = None,
    preprocessing: Any = None,
    task: str | None = None,
    metrics: Mapping[str, float] | None = None,
    tolerance: float | tuple[float, float] | None = None,
    *,
    method: str = "trace",
    description: str | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    eval_data: tuple[Any, Any] | None = None,
    exporter: str = "auto",
) -> ExportReport:
    """Write ``model`` as a single-file ONNX model (dynamic batch axis) with fw.json.

    ``exporter="auto"`` (default) uses torch's current exporter (``torch.onnx.export(dynamo=True)``,
    built on ``torch.export``; torch's default opset, 20 with torch 2.13, unless ``opset_version``
    says otherwise) and falls back to
    the legacy TorchScript-based one (opset 14 by default) when it cannot export the model, printing
    the reason on stderr and recording it in fw.json (``export.fallback``); ``"dynamo"`` or
    ``"legacy"`` picks one. ``method="script"`` scripts the model first (keeps control flow as ONNX
    Loop/If), which only the legacy exporter takes. The test vector's outputs are the eager model's;
    the file is checked with onnxruntime.
    """
    import numpy as np
    import onnx as onnx_lib

    if exporter not in ONNX_EXPORTER_CHOICES:
        raise ExportError(
            f"exporter must be one of {', '.join(ONNX_EXPORTER_CHOICES)}, got {exporter!r}. Hint: leave the "
            "default, 'auto' (torch's current exporter, the legacy one if it fails)"
        )
    if method == "script" and exporter == "dynamo":
        raise ExportError(
            "method='script' needs the legacy exporter (torch.export does not take ScriptModules). Hint: use "
            "method='trace' with exporter='dynamo', or exporter='legacy' (or 'auto') with method='script'"
        )
    job = _Job("onnx", model, example_input, path, method, name, input_names, output_names)
    used, fallback, data = "legacy", None, b""
    if exporter != "legacy" and method != "script":
        try:
            data = _dynamo_onnx(job, opset_version)
            used = "dynamo"
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if exporter == "dynamo":
                raise ExportError(
                    f"torch.onnx.export (dynamo) failed on {type(model).__name__}: {first}. Hint: "
                    "exporter='legacy' uses the TorchScript-based exporter; or export TorchScript with "
                    "fw.export.torchscript"
                ) from e
            fallback = f"torch.onnx.export (dynamo) failed: {first[:500]}"
            print(
                f"fw.export: the current ONNX exporter (dynamo) failed on {type(model).__name__} ({first[:500]}); "
                "using the legacy TorchScript-based exporter",
                file=sys.stderr,
            )
    if used == "legacy":
        target = _script_module(job.model, job.args, "script") if method == "script" else job.model
        opset = opset_version or DEFAULT_OPSET
        try:
            data = _legacy_onnx(job, target, opset)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if fallback:
                raise ExportError(
                    f"{fallback}; then the legacy exporter (opset {opset}) failed on {type(model).__name__}: "
                    f"{first}. Hint: leave opset_version to the exporter (torch's current one writes its own, "
                    "20 with torch 2.13), or export TorchScript with fw.export.torchscript"
                ) from e
            raise ExportError(
                f"torch.onnx.export (opset {opset}) failed on {type(model).__name__}: "
                f"{first}. Hint: try a newer opset_version, or export TorchScript "
                "with fw.export.torchscript"
            ) from e
    proto = onnx_lib.load_model_from_string(data)
    opset_written = next(
        (o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), opset_version
    )
    initializers = {i.name for i in proto.graph.initializer}
    graph_inputs = [i.name for i in proto.graph.input if i.name not in initializers]
    graph_outputs = [o.name for o in proto.graph.output]
    if graph_inputs != job.input_names or graph_outputs != job.output_names:
        raise ExportError(
            f"the ONNX graph has inputs {graph_inputs} and outputs {graph_outputs}, expected {job.input_names} "
            f"and {job.output_names}. Hint: an input the model never uses is dropped by the exporter; remove it "
            "from forward()"
        )
    tv_out = job.eager(job.tv_args)
    export: dict[str, Any] = {
        "method": method,
        "opset_version": opset_written,
        "quantization": None,
        "exporter": DYNAMO_EXPORTER if used == "dynamo" else ONNX_EXPORTER,
    }
    if fallback:
        export["fallback"] = fallback
    text = job.metadata(tv_out, export, _fields(version, labels, preprocessing, task, metrics, description))
    _write_onnx(job, proto, text, "exported")

    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(job.path), opts, providers=["CPUExecutionProvider"])

    def run(args: tuple[Any, ...]) -> list[Any]:
        feed = {n: np.ascontiguousarray(a.numpy()) for n, a in zip(job.input_names, args, strict=True)}
        return [np.asarray(v) for v in sess.run(job.output_names, feed)]

    report = job.check(run, tolerance, eval_data)
    report.exporter, report.fallback = used, fallback
    return report


# ---------------------------------------------------------------------------- int8 ONNX


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """Hide onnxruntime.quantization's advice logged on the root logger and its progress prints."""
    import logging

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        root.setLevel(level)


def _calibration_batches(
    job: _Job, calibration: Any, input_names: Sequence[str] | None
) -> tuple[list[dict[str, Any]], tuple[Any, ...]]:
    """The calibration set as ONNX Runtime feeds of at most CALIBRATION_BATCH rows, and as positional tensors."""
    import numpy as np

    try:
        names, args = _positional(job.model, calibration, input_names)
    except ExportError as e:
        raise ExportError(f"calibration: {e}") from e
    if len(args) != len(job.args):
        raise ExportError(
            f"calibration gives {len(args)} inputs but the model takes {len(job.args)} ({job.input_names}). Hint: "
            "give calibration rows in the same form as example_input (a tensor, a tuple in forward() order, or "
            "a dict keyed by forward() parameter)"
        )
    names = job.input_names
    for name, a, ex in zip(names, args, job.args, strict=True):
        if a.dtype != ex.dtype or tuple(a.shape[1:]) != tuple(ex.shape[1:]):
            raise ExportError(
                f"calibration input {name!r} is {str(a.dtype).removeprefix('torch.')} {list(a.shape)} but "
                f"example_input's is {str(ex.dtype).removeprefix('torch.')} {list(ex.shape)}. Hint: calibration "
                "rows must look like the model's inputs (same dtype and shape after the batch axis)"
            )
        if a.dtype.is_floating_point and not bool(a.isfinite().all()):
            raise ExportError(
                f"calibration input {name!r} holds NaN or Inf. Hint: calibrate on real, finite input rows"
            )
    feeds = [
        {
            n: np.ascontiguousarray(a[i : i + CALIBRATION_BATCH].numpy())
            for n, a in zip(names, args, strict=True)
        }
        for i in range(0, int(args[0].shape[0]), CALIBRATION_BATCH)
    ]
    return feeds, args


def _quantize(
    src: str,
    dst: str,
    quantization: str,
    feeds: list[dict[str, Any]],
    per_channel: bool,
    calibration_method: str,
) -> None:
    """Run onnxruntime.quantization on the float ONNX file ``src`` (pre-processed first) into ``dst``."""
    import onnx as onnx_lib
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    # The dynamo exporter records value infos (shapes of intermediates) that ONNX Runtime's
    # pre-processing optimisations invalidate (a Gemm's weight folded to another layout); shape
    # inference then refuses the graph. They are hints only: drop them and let it infer afresh.
    proto = onnx_lib.load_model(src)
    if proto.graph.value_info:
        del proto.graph.value_info[:]
        src = dst + ".src.onnx"
        onnx_lib.save_model(proto, src)
    pre = dst + ".pre.onnx"
    with _quiet_quantizer():
        # ONNX shape inference and ONNX Runtime's basic graph optimisations, as ONNX Runtime advises
        # before quantizing (symbolic shape inference is for transformer-style dynamic shapes).
        quant_pre_process(src, pre, skip_symbolic_shape=True)
        if quantization == "dynamic":
            quantize_dynamic(pre, dst, per_channel=per_channel, weight_type=QuantType.QInt8)
            return

        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.batches = iter(feeds)

            def get_next(self) -> dict[str, Any] | None:
                return next(self.batches, None)

        method = getattr(CalibrationMethod, CALIBRATION_METHODS[calibration_method])
        quantize_static(
            pre,
            dst,
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=method,
        )


def _int8_ops(proto: Any) -> tuple[list[str], int]:
    """(op types of the quantized graph that compute with int8 weights, how many such nodes).

    A node counts when it reads an int8/uint8 initializer, directly (``MatMulInteger``, ``ConvInteger``,
    ``DynamicQuantizeLSTM``, ``Gather`` of dynamic quantization) or through a ``DequantizeLinear``
    (``Conv``, ``Gemm``, ``Gather`` ... of the QDQ format).
    """
    import onnx as onnx_lib

    int8 = (onnx_lib.TensorProto.INT8, onnx_lib.TensorProto.UINT8)
    weights = {t.name for t in proto.graph.initializer if t.data_type in int8}
    nodes = list(proto.graph.node)
    dq_weights = {
        o
        for n in nodes
        if n.op_type == "DequantizeLinear" and n.input and n.input[0] in weights
        for o in n.output
    }
    hits = [
        n.op_type
        for n in nodes
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
        and any(i in weights or i in dq_weights for i in n.input)
    ]
    return sorted(set(hits)), len(hits)


def onnx_int8(
    model: Any,
    example_input: Any,
    path: str | os.PathLike[str],
    quantization: str = "dynamic",
    calibration: Any = None,
    opset_version: int | None = None,
    name: str | None = None,
    version: str = "1",
    labels: Sequence[str] | None = None,
    preprocessing: Mapping[str, Any] | None = None,
    task: str | None = None,
    metrics: Mapping[str, float] | None = None,
    tolerance: float | tuple[float, float] | None = None,
    *,
    method: str = "trace",
    per_channel: bool = False,
    calibration_method: str | None = None,
    max_accuracy_drop: float | None = DEFAULT_MAX_ACCURACY_DROP,
    description: str | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    eval_data: tuple[Any, Any] | None = None,
    exporter: str = "auto",
) -> ExportReport:
    """Write ``model`` as an int8 ONNX model quantized by ``onnxruntime.quantization``, with fw.json.

    The model is first exported to float ONNX exactly as :func:`onnx` does (and checked; ``exporter``
    as there), then quantized:

    * ``quantization="dynamic"`` (``quantize_dynamic``): int8 weights; activations are quantized at
      run time with a scale taken from each call's input, so a row's output depends slightly on the
      rows batched with it. ``MatMul``/``Gemm`` (``nn.Linear``), ``Conv`` and ``LSTM`` run as integer
      ops (``MatMulInteger``, ``ConvInteger``, ``DynamicQuantizeLSTM``). No data needed.
    * ``quantization="static"`` (``quantize_static``, QDQ format, int8 weights and activations):
      activation scales are fixed ahead of time from ``calibration``, rows shaped like
      ``example_input`` (a tensor, tuple or dict; a few hundred rows of training data), using
      ``calibration_method`` ``"minmax"`` (default), ``"entropy"`` or ``"percentile"``. ONNX Runtime
      fuses the QDQ pairs into ``QLinearConv``/``QGemm``/``QLinearMatMul`` at load; ``LSTM`` stays float.

    ``per_channel=True`` gives every output channel of a weight its own scale. The written file is
    compared with the eager model on the example input and on random batches within
    ``tolerance`` (default ``TOLERANCES["onnx_int8"]``: atol 0.25, rtol 0.1); for static quantization the
    random batches are rows of ``calibration`` (uniform random inputs fall outside the calibrated
    ranges, where static int8 saturates by design). With
    ``eval_data=(x, y)`` (the held-out test set) the int8 file's accuracy (argmax of the first
    output) is measured before writing: a loss of more than ``max_accuracy_drop`` (default 0.01,
    one point; ``None`` accepts any) refuses the export, and fw.json's ``metrics.test_accuracy``
    becomes the int8 file's accuracy and ``metrics.float_test_accuracy`` the eager model's.
    """
    import numpy as np
    import onnx as onnx_lib
    import onnxruntime as ort

    if quantization not in QUANTIZATIONS:
        raise ExportError(
            f"quantization must be 'dynamic' or 'static', got {quantization!r}. Hint: use quantization='dynamic' "
            "(no data needed) or quantization='static' with calibration=rows of training inputs"
        )
    if quantization == "dynamic" and (calibration is not None or calibration_method is not None):
        raise ExportError(
            "calibration data and calibration_method are only used by static quantization. Hint: pass "
            "quantization='static', or drop calibration= and calibration_method= for dynamic quantization"
        )
    if quantization == "static" and calibration is None:
        raise ExportError(
            "static quantization needs a calibration set to fix the activation scales. Hint: pass calibration= "
            "a few hundred rows of training inputs shaped like example_input (e.g. x_train[:256]), or use "
            "quantization='dynamic'"
        )
    calibration_method = calibration_method or "minmax"
    if calibration_method not in CALIBRATION_METHODS:
        raise ExportError(
            f"calibration_method must be one of {', '.join(CALIBRATION_METHODS)}, got {calibration_method!r}. "
            "Hint: use calibration_method='minmax'"
        )
    if max_accuracy_drop is not None and not (0 <= max_accuracy_drop <= 1):
        raise ExportError(
            f"max_accuracy_drop must be between 0 and 1 (a fraction of accuracy), got {max_accuracy_drop!r}. "
            "Hint: 0.01 accepts a loss of one point; None accepts any"
        )
    job = _Job("onnx_int8", model, example_input, path, method, name, input_names, output_names)
    feeds, samples = (
        _calibration_batches(job, calibration, input_names) if quantization == "static" else ([], None)
    )
    names = {"input_names": input_names, "output_names": output_names}
    with tempfile.TemporaryDirectory(prefix="fw-int8-") as tmp:
        fp32 = os.path.join(tmp, f"{job.name}.onnx")
        try:
            float_report = onnx(
                job.model,
                example_input,
                fp32,
                opset_version,
                name=job.name,
                method=method,
                exporter=exporter,
                **names,
            )
        except ExportError as e:
            raise type(e)(f"the float ONNX export that int8 quantization starts from failed: {e}") from e
        qpath = os.path.join(tmp, "int8.onnx")
        try:
            _quantize(fp32, qpath, quantization, feeds, per_channel, calibration_method)
        except Exception as e:
            raise ExportError(
                f"onnxruntime.quantization ({quantization}) failed on {type(model).__name__}: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}. Hint: try the other "
                "quantization method, or export fp32 with fw.export.onnx"
            ) from e
        proto = onnx_lib.load_model(qpath)
    ops, n_ops = _int8_ops(proto)
    if not ops:
        covers = (
            "MatMul/Gemm, Conv and LSTM" if quantization == "dynamic" else "Conv, Gemm, MatMul and friends"
        )
        raise ExportError(
            f"{quantization} quantization found nothing to quantize in {type(model).__name__} (it covers "
            f"{covers}). Hint: export it with fw.export.onnx instead"
        )
    graph_inputs = [
        i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}
    ]
    graph_outputs = [o.name for o in proto.graph.output]
    if graph_inputs != job.input_names or graph_outputs != job.output_names:
        raise ExportError(
            f"the quantized graph has inputs {graph_inputs} and outputs {graph_outputs}, expected "
            f"{job.input_names} and {job.output_names}. Hint: report this; export fp32 with fw.export.onnx meanwhile"
        )
    for prop in list(proto.metadata_props):
        if prop.key == _md.METADATA_KEY:
            proto.metadata_props.remove(prop)
    # The pre-processing pass re-saves the model with every domain this onnxruntime registers; keep the
    # ones the graph uses, so an older ONNX Runtime (fw's engine) is not asked about opsets it lacks.
    used = {n.domain for n in proto.graph.node} | {""}
    for imp in [i for i in proto.opset_import if i.domain not in used]:
        proto.opset_import.remove(imp)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    mem = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])

    def runner(sess: Any) -> Any:
        def run(args: tuple[Any, ...]) -> list[Any]:
            feed = {n: np.ascontiguousarray(a.numpy()) for n, a in zip(job.input_names, args, strict=True)}
            return [np.asarray(v) for v in sess.run(job.output_names, feed)]

        return run

    recorded = dict(metrics or {})
    if eval_data is not None:
        x, y = eval_data
        eager_acc = _accuracy(lambda a: job.eager(a), x, y)
        int8_acc = _accuracy(runner(mem), x, y)
        if max_accuracy_drop is not None and eager_acc - int8_acc > max_accuracy_drop + 1e-12:
            raise ParityError(
                f"{quantization} int8 quantization loses {100 * (eager_acc - int8_acc):.2f} points of accuracy on "
                f"eval_data ({int8_acc:.4f} vs {eager_acc:.4f} in float), more than max_accuracy_drop="
                f"{max_accuracy_drop:g}; no file was written. Hint: try quantization='static' with a calibration set "
                "like the serving data, per_channel=True, or pass a larger max_accuracy_drop (None accepts any)"
            )
        recorded.update({"test_accuracy": int8_acc, "float_test_accuracy": eager_acc})
    float_exporter = DYNAMO_EXPORTER if float_report.exporter == "dynamo" else ONNX_EXPORTER
    export = {
        "method": method,
        "opset_version": next(
            (o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), opset_version
        ),
        "quantization": quantization,
        "exporter": f"{float_exporter} + onnxruntime.quantization.quantize_{quantization}",
        "quantizer_version": ort.__version__,
        "quant_format": "QDQ" if quantization == "static" else "QOperator",
        "weight_dtype": "int8",
        "activation_dtype": "int8" if quantization == "static" else "uint8",
        "per_channel": bool(per_channel),
        "quantized_ops": ops,
        "quantized_nodes": n_ops,
        "calibration": (
            {"method": calibration_method, "rows": int(samples[0].shape[0]), "batch": CALIBRATION_BATCH}
            if quantization == "static"
            else None
        ),
    }
    tv_out = runner(mem)(job.tv_args)
    text = job.metadata(
        tv_out,
        export,
        _fields(version, labels, preprocessing, task, recorded or None, description),
        run=runner(mem),
    )
    _write_onnx(job, proto, text, "quantized")
    sess = ort.InferenceSession(str(job.path), opts, providers=["CPUExecutionProvider"])
    # Static int8 is exact only within the calibrated ranges; uniform random inputs saturate it by design,
    # so its extra parity batches are calibration rows.
    report = job.check(
        runner(sess), tolerance, eval_data, samples=samples if quantization == "static" else None
    )
    report.quantization = quantization
    return report


# ---------------------------------------------------------------------------- AOTInductor (.pt2)

AOTI_EXPORTER = "torch.export + torch._inductor.aoti_compile_and_package"


def _aoti_march(configs: Mapping[str, Any]) -> str:
    """The -march the package's C++ is compiled with: ``"native"`` unless configured."""
    from torch._inductor import config

    # torch before 2.12 has no cpp.march setting (it compiles with -march=native).
    march = configs.get("cpp.march", getattr(config.cpp, "march", None))
    return "native" if march is None else str(march)


def _cpu_flags() -> list[str]:
    """This machine's CPU features as torch names them (``torch.cpu.get_capabilities()``, true flags only)."""
    import torch

    return sorted(k for k, v in torch.cpu.get_capabilities().items() if v is True)


def _aoti_program(job: _Job, device: str, max_batch: int | None) -> Any:
    """``torch.export.export`` of the model on ``device`` with a dynamic batch axis on every input.

    torch.export specialises sizes 0 and 1, so ``Dim("batch", min=1)`` alone gives a program for
    batches of 2 and more. ``backed_size_oblivious`` (the export tutorial's "avoiding 0/1
    specialization") keeps batch 1 in range where the model allows it; its caveat (broadcasting
    decided as for sizes >= 2) is what the parity check at batch 1 catches. Where the model itself
    guards on the batch not being 1 (an LSTM does), it is exported again without it, and fw pads
    single rows to two (see _aoti_batch_range).
    """
    import torch
    import torch.fx.experimental._config as fx_config

    args = job.args
    if int(args[0].shape[0]) < 2:  # torch.export specialises axes of size 0 and 1
        args = tuple(torch.cat([a, a]) for a in args)
    model = job.model
    if device != "cpu":
        model = copy.deepcopy(model).to(device)
        args = tuple(a.to(device) for a in args)
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    dynamic = tuple({0: batch} for _ in args)
    with quiet_warnings(), contextlib.redirect_stdout(sys.stderr):
        try:
            with fx_config.patch(backed_size_oblivious=True):
                return torch.export.export(model, args, dynamic_shapes=dynamic, strict=False)
        except Exception:
            pass
        try:
            return torch.export.export(model, args, dynamic_shapes=dynamic, strict=False)
        except Exception as e:
            raise ExportError(
                f"torch.export.export failed on {type(job.model).__name__} with a dynamic batch axis: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else e!r}. Hint: forward() must work for any "
                "batch size, without Python branches on tensor values or on the batch size (torch.export "
                "captures one graph); export ONNX or TorchScript (method='script') for such models"
            ) from e


@contextlib.contextmanager
def _aoti_input_checks() -> Iterator[None]:
    """Turn on the package's own input checks (``AOTI_RUNTIME_CHECK_INPUTS``, read on a package's
    first run), as fw's libtorch shim does, so the parity check sees what the server will."""
    old = os.environ.get("AOTI_RUNTIME_CHECK_INPUTS")
    os.environ["AOTI_RUNTIME_CHECK_INPUTS"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["AOTI_RUNTIME_CHECK_INPUTS"]
        else:
            os.environ["AOTI_RUNTIME_CHECK_INPUTS"] = old


_BATCH_MIN_RE = re.compile(r"dim value is too small at 0, expected it to be >= (\d+)")
_BATCH_MAX_RE = re.compile(r"dim value is too large at 0, expected to be <= (\d+)")


@contextlib.contextmanager
def _stderr_captured() -> Iterator[Any]:
    """Redirects file descriptor 2 (C++ code writes there) to a temporary file for the block; yields
    a function that returns what was written (decoded, at most 64 KiB), valid after the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    text: list[str] = []
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lambda: "".join(text)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text.append(tmp.read(64 << 10).decode("utf-8", "replace"))


def _aoti_batch_range(loaded: Any, args: tuple[Any, ...], device: str) -> tuple[int, int | None]:
    """The batch sizes a compiled package accepts, as ``(min, max or None)``.

    torch.export gives the batch axis the range 1.., but Inductor narrows it while compiling from
    the example's batch size (its CPU convolution picks a backend and memory format for fewer or
    more than 16 rows, and guards on it), and the package's input checks (on: _aoti_input_checks)
    refuse the rest. The bounds are read from those checks: one row, then 2**40 rows expanded from
    one (no memory); an unbounded package fails that input on its stride check instead, before
    computing anything.
    """
    import torch

    def refusal(inputs: tuple[Any, ...]) -> str | None:
        # The check's own words reach the exception in some torch releases and only the C++
        # stderr in others (2.11: the exception names the failing call): read both.
        with _stderr_captured() as captured:
            try:
                with torch.no_grad():
                    loaded(*inputs)
            except RuntimeError as e:
                err: str | None = str(e)
            else:
                err = None
        if err is None:
            return None
        return err + "\n" + captured()

    one = tuple(a[:1].to(device) for a in args)
    low = 1
    msg = refusal(one)
    if msg is not None:
        m = _BATCH_MIN_RE.search(msg)
        if not m:
            raise ExportError(f"the compiled package fails on one row: {msg.strip().splitlines()[0]}")
        low = int(m.group(1))
    msg = refusal(tuple(a.expand(1 << 40, *a.shape[1:]) for a in one)) or ""
    m = _BATCH_MAX_RE.search(msg)
    if m:
        return low, int(m.group(1))
    if "unmatched stride value at 0" not in msg:
        raise ExportError(
            f"cannot tell which batch sizes the compiled package accepts: {msg.strip()[:200]!r}. "
            "Hint: this torch release words AOTInductor's input checks differently; report it"
        )
    return low, None


def _in_batch_range(run: Any, low: int, high: int | None) -> Any:
    """``run`` for any batch size: splits batches above ``high`` and pads those below ``low`` by
    repeating their first row (the Go engine does the same, engine/aoti.go)."""
    import numpy as np
    import torch

    def ranged(args: tuple[Any, ...]) -> list[Any]:
        n = int(args[0].shape[0])
        step = n if high is None else high
        parts: list[list[Any]] = []
        for start in range(0, n, step):
            chunk = tuple(a[start : start + step] for a in args)
            k = int(chunk[0].shape[0])
            if k < low:
                chunk = tuple(torch.cat([c, c[:1].expand(low - k, *c.shape[1:])]) for c in chunk)
            parts.append([o[:k] for o in run(chunk)])
        return [np.concatenate(outs) for outs in zip(*parts, strict=True)]

    return ranged


def _set_package_fw_json(path: str, text: str) -> None:
    """Replace fw.json in every copy of a package's AOTInductor metadata (written before the batch
    range was known), rewriting the zip in place."""
    import zipfile

    tmp = path + ".meta"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if "/data/aotinductor/" in info.filename and info.filename.endswith("_metadata.json"):
                meta = json.loads(data)
                meta[_md.METADATA_KEY] = text
                data = json.dumps(meta).encode()
            dst.writestr(info, data)
    os.replace(tmp, path)


def _aoti_runner(path: Path, device: str) -> Any:
    import torch

    with quiet_warnings():
        loaded = torch._inductor.aoti_load_package(str(path))

    def run(args: tuple[Any, ...]) -> list[Any]:
        with torch.no_grad():
            return _to_numpy(_as_outputs(loaded(*(a.to(device) for a in args))))

    return run, loaded


def aoti(
    model: Any,
    example_input: Any,
    path: str | os.PathLike[str],
    name: str | None = None,
    version: str = "1",
    labels: Sequence[str] | None = None,
    preprocessing: Mapping[str, Any] | None = None,
    task: str | None = None,
    metrics: Mapping[str, float] | None = None,
    tolerance: float | tuple[float, float] | None = None,
    *,
    device: str = "cpu",
    max_batch: int | None = None,
    inductor_configs: Mapping[str, Any] | None = None,
    description: str | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    eval_data: tuple[Any, Any] | None = None,
) -> ExportReport:
    """Write ``model`` as an AOTInductor package (``.pt2``) with fw.json, which libtorch runs without Python.

    ``torch.export.export`` captures forward() with a dynamic batch axis (1 to ``max_batch``, default
    unbounded) and ``torch._inductor.aoti_compile_and_package`` compiles it into C++ kernels and a
    shared library for ``device`` (``"cpu"``, or ``"cuda"`` on a machine with a GPU). fw.json rides in
    the package's AOTInductor metadata (key ``fw.json``; docs/model-format.md). Compiling needs a C++
    compiler (g++) and takes from seconds to minutes.

    The package only runs where it was compiled for: a CPU package is built with ``-march=native``
    unless ``inductor_configs={"cpp.march": "x86-64-v3"}`` (for example) asks for a portable
    instruction set; fw records the exporting CPU's features and refuses to load a native package on
    a CPU that lacks one. ``inductor_configs`` is passed to AOTInductor as it is.

    A CUDA package is compared with the eager model on the CPU to at least ``GPU_TOLERANCE``
    (atol = rtol = 1e-2): cuDNN's TF32 convolutions move a ResNet's logits by about 2e-3.
    """
    import torch

    if device not in AOTI_DEVICES:
        raise ExportError(
            f"device must be one of {', '.join(AOTI_DEVICES)}, got {device!r}. Hint: use device='cpu'"
        )
    if device == "cuda" and not torch.cuda.is_available():
        raise ExportError(
            "device='cuda' compiles CUDA kernels for the GPU of this machine, but torch sees no CUDA device. "
            "Hint: export on a machine with a GPU, or use device='cpu'"
        )
    if max_batch is not None and (
        isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 2
    ):
        raise ExportError(f"max_batch must be an int >= 2 or None, got {max_batch!r}. Hint: leave it out")
    configs = dict(inductor_configs or {})
    user_meta = configs.pop("aot_inductor.metadata", None) or {}
    job = _Job("aoti", model, example_input, path, AOTI_METHOD, name, input_names, output_names)
    program = _aoti_program(job, device, max_batch)
    march = _aoti_march(configs)
    export = {
        "method": AOTI_METHOD,
        "opset_version": None,
        "quantization": None,
        "exporter": AOTI_EXPORTER,
        "device": device,
        "march": march if device == "cpu" else None,
        "max_batch": max_batch,
    }
    tv_out = job.eager(job.tv_args)
    fields = _fields(version, labels, preprocessing, task, metrics, description)
    package_meta = {str(k): str(v) for k, v in dict(user_meta).items()}
    package_meta[_md.METADATA_KEY] = job.metadata(tv_out, export, fields)
    if device == "cpu" and march == "native":
        package_meta[AOTI_CPU_FLAGS_KEY] = " ".join(_cpu_flags())
    configs["aot_inductor.metadata"] = package_meta

    def write(tmp: str) -> None:
        # A file object, so the package may have any file name (a path must end in .pt2).
        try:
            with open(tmp, "w+b") as f, quiet_warnings(), contextlib.redirect_stdout(sys.stderr):
                torch._inductor.aoti_compile_and_package(program, package_path=f, inductor_configs=configs)
        except Exception as e:
            raise ExportError(
                f"AOTInductor could not compile {type(model).__name__}: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else e!r}. Hint: it compiles C++ with the "
                "system compiler (g++, and nvcc for CUDA): check that one is installed, or export ONNX instead"
            ) from e
        _, loaded = _aoti_runner(Path(tmp), device)
        low, high = _aoti_batch_range(loaded, job.args, device)
        del loaded
        export["batch_min"], export["batch_max"] = low, high
        _set_package_fw_json(tmp, job.metadata(tv_out, export, fields))

    with _aoti_input_checks():
        _atomic_write(job.path, write)
        run, _ = _aoti_runner(job.path, device)
        return job.check(
            _in_batch_range(run, export["batch_min"], export["batch_max"]),
            _device_tolerance("aoti", tolerance, device),
            eval_data,
            batches=AOTI_CHECK_BATCHES,
        )


# ---------------------------------------------------------------------------- command line

_META_KEYS = ("labels", "preprocessing", "task", "metrics", "description", "input_names", "output_names")


def is_program(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a ``torch.export.save`` archive (a ``.pt2`` program, e.g. what
    ``mlflow.pytorch.log_model`` writes as ``data/model.pt2``), not an AOTInductor package."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            fmt = [n for n in names if n.count("/") == 1 and n.endswith("/archive_format")]
            if len(fmt) != 1:
                return False
            with z.open(fmt[0]) as f:
                if f.read(16).strip() != b"pt2":
                    return False
    except Exception:  # not a zip, or one zipfile cannot read: not a program
        return False
    root = fmt[0].split("/")[0]
    has_model = any(n.startswith(f"{root}/models/") and n.endswith(".json") for n in names)
    return has_model and not any(n.startswith(f"{root}/data/aotinductor/") for n in names)


_PICKLED_OBJECT = (
    "it holds a pickled Python object, and fw never unpickles files it did not write. Hint: save a "
    "program whose constants are tensors (torch.export.save of a plain nn.Module)"
)

# The operator-module functions a graph may call (torch.export writes them for symbolic sizes):
# arithmetic and comparisons only. attrgetter, methodcaller, call and the like would let a graph reach
# any object.
_OPERATOR_TARGETS = frozenset(
    "add sub mul truediv floordiv mod pow neg pos abs eq ne lt le gt ge and_ or_ xor not_ invert "
    "getitem lshift rshift index truth".split()
)
# Names a size expression may use besides the deserializer's own functions and size symbols (s0, u1).
_SYMPY_NAMES = frozenset(
    "Symbol Integer Rational Float True False oo zoo nan positive negative integer real nonnegative "
    "nonpositive finite infinite Max Min Abs Eq Ne Lt Le Gt Ge And Or Not floor ceiling sqrt Pow Mul Add".split()
)


def _size_expr_ok(expr: str, known: Any) -> bool:
    """Whether a size expression from a program is plain arithmetic over size symbols: sympy parses
    strings with eval, so anything else (attributes, dunders, calls of other names) is refused."""
    if len(expr) > 4096 or "__" in expr or expr.count("**") > 1:
        return False
    # Numbers stay small: sympy evaluates what it parses (9**9**9 would never end).
    if any(len(n) > 18 for n in re.findall(r"[0-9]+", expr)):
        return False
    if any(int(n) > 64 for n in re.findall(r"\*\*\s*\(?\s*([0-9]+)", expr)):
        return False
    rest = re.sub(r"'[A-Za-z_][A-Za-z0-9_]{0,63}'", "0", expr)  # Symbol('s77', ...): quoted names
    if not re.fullmatch(r"[A-Za-z0-9_+\-*/%()., <>=!]*", rest) or re.search(
        r"(?<![0-9])\.|\.(?![0-9])", rest
    ):
        return False
    for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", rest):
        if (
            name not in _SYMPY_NAMES
            and name not in known
            and not re.fullmatch(r"[a-z]+[0-9]+|[0-9]*e[0-9]+", name)
        ):
            return False
    return True


@contextlib.contextmanager
def _weights_only() -> Iterator[list[str]]:
    """Read a torch.export archive without running anything from it. torch's reader reads some parts
    with ``torch.load(weights_only=False)`` or plain ``pickle`` (and falls back to them when the safe
    reader fails), parses size expressions with sympy (which evals strings), resolves a graph's call
    targets by name from ``torch``, ``operator`` and ``math``, and imports the modules a pytree
    context names. Here: ``torch.load`` is weights-only, pickles are refused, size expressions must
    be plain arithmetic over size symbols, call targets must be torch operators, size functions or
    arithmetic, and pytree contexts may name built-in containers only. Yields the list of refusals
    (torch turns the exception into its own, so the reason is kept here)."""
    import collections
    import types

    import sympy
    import torch
    from torch._export.serde import serialize
    from torch.export.pt2_archive import _package
    from torch.utils import _pytree

    refused: list[str] = []

    def refuse(why: str) -> Any:
        refused.append(why)
        raise ExportError(why)

    real_load, real_obj, real_pickle = torch.load, torch._C._pickle_load_obj, _package.pickle
    real_sympify, real_importlib = sympy.sympify, _pytree.importlib
    deserializer = serialize.GraphModuleDeserializer
    real_operator = deserializer.deserialize_operator

    def load(f: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["weights_only"] = True
        return real_load(f, *args, **kwargs)

    def no_pickle(*_: Any, **__: Any) -> Any:
        return refuse(_PICKLED_OBJECT)

    class NoPickle:  # stands in for the pickle module in torch's archive reader
        loads = staticmethod(no_pickle)

    def sympify(a: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(a, str) and not _size_expr_ok(a, kwargs.get("locals") or {}):
            refuse(f"its size expression {a[:120]!r} is not plain arithmetic over size symbols")
        return real_sympify(a, *args, **kwargs)

    syms = {getattr(torch, n) for n in dir(torch) if n.startswith(("sym_", "_sym_"))}

    def ident(x: Any, dotted: bool = False) -> bool:
        # An attribute path's parts may also be numbers (nn.Sequential's "0.weight"): FX writes a part
        # that is not an identifier as getattr(obj, "part"), safe when it is plain digits.
        if dotted:
            return isinstance(x, str) and all(re.fullmatch(r"[A-Za-z0-9_]+", p) for p in x.split("."))
        return (
            isinstance(x, str)
            and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", x) is not None
            and not keyword.iskeyword(x)
        )

    real_python_code = torch.fx.Graph.python_code

    def python_code(self: Any, *args: Any, **kwargs: Any) -> Any:
        # FX writes node names, placeholder and attribute targets and keyword names into Python
        # source it execs: names from the file must be plain identifiers.
        for node in self.nodes:
            target = node.target.lstrip("*") if node.op == "placeholder" else node.target
            bad = (
                not ident(node.name)
                or (node.op in ("placeholder", "call_method") and not ident(target))
                or (node.op in ("get_attr", "call_module") and not ident(target, dotted=True))
                or not all(ident(k) for k in node.kwargs)
            )
            if bad:
                refuse(
                    f"its graph names a value {str(node.name)[:80]!r} ({node.op} {str(node.target)[:80]!r}) that is not a plain identifier"
                )
        info = getattr(self._codegen, "pytree_info", None)
        if info is not None and not all(ident(a) for a in info.orig_args):
            refuse("its forward() argument names are not plain identifiers")
        return real_python_code(self, *args, **kwargs)

    def operator_target(self: Any, name: str) -> Any:
        target = real_operator(self, name)
        if isinstance(target, str):
            return target  # unresolved: kept as a name, never called
        ops = (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)
        if (
            isinstance(target, ops)
            or target in syms
            or (name.startswith("_operator.") and name.split(".", 1)[1] in _OPERATOR_TARGETS)
            or (name.startswith("math.") and callable(target) and getattr(target, "__module__", "") == "math")
        ):
            return target
        return refuse(f"its graph calls {name[:120]}, which is not a torch operator")

    containers = {
        "builtins": types.SimpleNamespace(
            list=list, dict=dict, tuple=tuple, set=set, int=int, float=float, str=str
        ),
        "collections": types.SimpleNamespace(
            OrderedDict=collections.OrderedDict, defaultdict=collections.defaultdict, deque=collections.deque
        ),
    }

    class Importer:  # stands in for importlib in torch's pytree reader
        @staticmethod
        def import_module(name: str) -> Any:
            if name in containers:
                return containers[name]
            return refuse(
                f"its input or output structure names the module {name[:120]}; fw reads built-in containers only"
            )

    torch.load = load
    torch._C._pickle_load_obj = no_pickle
    _package.pickle = NoPickle  # type: ignore[assignment]
    sympy.sympify = sympify
    _pytree.importlib = Importer  # type: ignore[assignment]
    deserializer.deserialize_operator = operator_target  # type: ignore[method-assign]
    torch.fx.Graph.python_code = python_code  # type: ignore[method-assign]
    try:
        yield refused
    finally:
        torch.load, torch._C._pickle_load_obj, _package.pickle = real_load, real_obj, real_pickle
        sympy.sympify, _pytree.importlib = real_sympify, real_importlib
        deserializer.deserialize_operator = real_operator  # type: ignore[method-assign]
        torch.fx.Graph.python_code = real_python_code  # type: ignore[method-assign]


def load_program(path: str | os.PathLike[str]) -> tuple[Any, Any]:
    """A ``torch.export.save`` archive as (module, example input) for :func:`onnx` and the others.

    The archive is read without running anything from it (see :func:`_weights_only`; its guards,
    Python source, are dropped); the example input
    is the one the program was captured with (``ExportedProgram.example_inputs``). Its batch axis
    (axis 0) must have been captured as dynamic: MLflow does so when the model was logged with an
    ``input_example`` of two or more rows.
    """
    import pickle

    import torch

    class Program(torch.nn.Module):
        def __init__(self, gm: Any, names: list[str]) -> None:
            super().__init__()
            self.program = gm
            self.fw_input_names = names

        def forward(self, *args: Any) -> Any:
            return self.program(*args)

        def train(self, mode: bool = True) -> Any:
            self.training = mode
            return self

    refused: list[str] = []
    try:
        with _weights_only() as refused, quiet_warnings(), _quiet_loggers("torch.export", "torch._export"):
            ep = torch.export.load(path)
    except (
        pickle.UnpicklingError,
        RuntimeError,
        ValueError,
        KeyError,
        TypeError,
        AssertionError,
        OSError,
    ) as e:
        if refused:
            raise ExportError(f"{path} cannot be exported: {refused[0]}") from e
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise ExportError(
            f"{path} cannot be read as a torch.export program ({first}). Hint: write it with "
            "torch.export.save(torch.export.export(model, example_args), path) with this torch version"
        ) from e
    if refused:  # torch caught the refusal and read the file another way
        raise ExportError(f"{path} cannot be exported: {refused[0]}")
    example = ep.example_inputs
    if example is None:
        raise ExportError(
            f"{path} carries no example input, which export needs to check the model. Hint: save a program "
            "captured by torch.export.export(model, example_args) with torch 2.6 or later"
        )
    args, kwargs = example
    if kwargs:
        raise ExportError(
            f"{path} was captured with keyword inputs {sorted(kwargs)}; fw's model files take positional inputs. "
            "Hint: capture it with positional example inputs"
        )
    if not args or not all(isinstance(a, torch.Tensor) for a in args):
        raise ExportError(f"{path} takes inputs that are not tensors. Hint: every input must be a tensor")
    users = [
        s
        for s in ep.graph_signature.input_specs
        if s.kind == torch.export.graph_signature.InputKind.USER_INPUT
    ]
    names = [s.arg.name for s in users if hasattr(s.arg, "name")]
    static = []
    for node in ep.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" and node.name in names else None
        if isinstance(val, torch.Tensor) and (val.dim() == 0 or not isinstance(val.shape[0], torch.SymInt)):
            static.append(node.name)
    if static:
        raise ExportError(
            f"{path} was captured with a fixed size on axis 0 (the batch) of {static}, so it takes no other batch "
            "size. Hint: capture it with a dynamic batch axis: with MLflow, log the model with an input_example "
            "of 2 or more rows (torch.export fixes size-1 axes); with torch, pass dynamic_shapes"
        )
    # ep.module() turns the program's guards (Python source in the file) into code and its input
    # structure into argument paths: fw runs no code from the file (the export's parity checks stand
    # in for the guards), and takes positional tensor inputs only.
    if ep.call_spec.in_spec != torch.utils._pytree.tree_structure((tuple(args), {})):
        raise ExportError(
            f"{path} takes its inputs in a structure other than positional tensors. Hint: capture it with "
            "positional tensor inputs"
        )
    ep._guards_code = []
    for node in ep.graph.nodes:
        if node.op == "placeholder" and isinstance(node.meta.get("val"), str):
            raise ExportError(f"{path} has a text input ({node.name}); fw's model files take tensors")
    if len(names) != len(args) or any(not n.isidentifier() for n in names):
        names = [f"input_{i}" for i in range(len(args))]
    # forward() names the program's inputs, so that torch.export (aoti) and the input names see them
    # one by one rather than as one *args tuple.
    P = inspect.Parameter
    Program.forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [P("self", P.POSITIONAL_OR_KEYWORD), *(P(n, P.POSITIONAL_OR_KEYWORD) for n in names)]
    )
    # ep.module() generates code from the graph again: under the same guard.
    try:
        with _weights_only() as refused, quiet_warnings():
            gm = ep.module()
    except Exception as e:
        if refused:
            raise ExportError(f"{path} cannot be exported: {refused[0]}") from e
        raise
    return Program(gm, names), (args[0] if len(args) == 1 else tuple(args))


def export_checkpoint(
    checkpoint: str | os.PathLike[str],
    format: str,
    out: str | os.PathLike[str],
    opset_version: int | None = None,
    method: str = "trace",
    name: str | None = None,
    version: str | None = None,
    quantization: str | None = None,
    calibration: str | os.PathLike[str] | None = None,
    per_channel: bool = False,
    device: str = "cpu",
    exporter: str = "auto",
) -> ExportReport:
    """Export a checkpoint written by :func:`fw.checkpoint.save`, or a ``torch.export.save`` program
    (:func:`load_program`, e.g. an MLflow PyTorch model's ``data/model.pt2``): what ``python -m fw.export``
    runs.

        ``method`` applies to onnx, torchscript and quantized; ``device`` to aoti only; ``exporter`` to
        onnx and onnx_int8 (see :func:`onnx`).

        Labels, preprocessing, task, metrics and description come from the checkpoint's ``meta``; ``name``
        and ``version`` default to the meta's, then to the output file name and ``"1"``. Format
        ``onnx_int8`` takes ``quantization`` (default ``"dynamic"``) and ``per_channel``; static
        quantization calibrates on ``calibration`` (an ``.npz`` file, see :func:`load_calibration`),
        else on the rows the checkpoint carries (``fw.checkpoint.save(..., calibration_input=...)``).
    """
    from fw import checkpoint as _ckpt

    if is_program(checkpoint):
        model, example = load_program(checkpoint)
        ck = _ckpt.Checkpoint(
            model=model,
            model_class="torch.export program",
            model_kwargs={},
            example_input=example,
            meta={},
            path=str(checkpoint),
        )
    else:
        ck = _ckpt.load(checkpoint)
    if ck.example_input is None:
        raise ExportError(
            f"checkpoint {checkpoint} carries no example input, which export needs to trace and check the "
            "model. Hint: re-save it with fw.checkpoint.save(model, path, example_input=...)"
        )
    kwargs: dict[str, Any] = {k: ck.meta[k] for k in _META_KEYS if ck.meta.get(k) is not None}
    kwargs["name"] = name or ck.meta.get("name")
    kwargs["version"] = version or str(ck.meta.get("version", "1"))
    if format == "onnx":
        return onnx(
            ck.model,
            ck.example_input,
            out,
            opset_version=opset_version,
            method=method,
            exporter=exporter,
            **kwargs,
        )
    if format == "torchscript":
        return torchscript(ck.model, ck.example_input, out, method=method, **kwargs)
    if format == "quantized":
        return quantized(ck.model, ck.example_input, out, jit_method=method, **kwargs)
    if format == "onnx_int8":
        quantization = quantization or "dynamic"
        rows = None
        if quantization == "static":
            rows = load_calibration(calibration) if calibration is not None else ck.calibration_input
            if rows is None:
                raise ExportError(
                    f"checkpoint {checkpoint} carries no calibration rows, which static quantization needs. Hint: "
                    "pass --calibration FILE.npz (input rows, e.g. numpy.savez('calib.npz', x_train[:256])), "
                    "re-save the checkpoint with fw.checkpoint.save(..., calibration_input=x_train[:256]), or use "
                    "--quantization dynamic"
                )
        elif calibration is not None:
            raise ExportError(
                "--calibration is only used by --quantization static. Hint: add --quantization static"
            )
        return onnx_int8(
            ck.model,
            ck.example_input,
            out,
            quantization=quantization,
            calibration=rows,
            opset_version=opset_version,
            method=method,
            per_channel=per_channel,
            exporter=exporter,
            **kwargs,
        )
    if format == "aoti":
        return aoti(ck.model, ck.example_input, out, device=device, **kwargs)
    raise ExportError(f"unknown format {format!r}. Hint: use onnx, torchscript, quantized, onnx_int8 or aoti")


def load_calibration(path: str | os.PathLike[str]) -> Any:
    """Calibration rows from an ``.npz`` file (``numpy.savez``; nothing is unpickled).

    One array is the input; several are keyed by input name (``numpy.savez(f, tokens=..., mask=...)``)
    or positional (``arr_0``, ``arr_1``, ... in ``forward()`` order).
    """
    import numpy as np
    import torch

    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except FileNotFoundError as e:
        raise ExportError(f"calibration file {path} does not exist. Hint: check the path") from e
    except (OSError, ValueError) as e:
        raise ExportError(
            f"calibration file {path} is not a numpy .npz archive of plain arrays ({e}). Hint: write it with "
            "numpy.savez('calib.npz', x_train[:256])"
        ) from e
    if not arrays:
        raise ExportError(
            f"calibration file {path} holds no arrays. Hint: numpy.savez('calib.npz', x_train[:256])"
        )
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    if len(tensors) == 1:
        return next(iter(tensors.values()))
    positional = [f"arr_{i}" for i in range(len(tensors))]
    if sorted(tensors) == sorted(positional):
        return tuple(tensors[k] for k in positional)
    return tensors


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fw.export",
        description="Export an fw checkpoint (fw.checkpoint.save) or a torch.export program into one fw model "
        "file. Prints a one-line JSON report on stdout.",
    )
    p.add_argument(
        "checkpoint",
        help="checkpoint written by fw.checkpoint.save (with an example input), or a torch.export.save program "
        "(.pt2, e.g. an MLflow PyTorch model's data/model.pt2) captured with a dynamic batch axis",
    )
    p.add_argument(
        "--format", required=True, choices=("onnx", "torchscript", "quantized", "onnx_int8", "aoti")
    )
    p.add_argument(
        "--out",
        required=True,
        help="output file, e.g. model.onnx, model.ts.pt, model.quant.pt, model.int8.onnx, model.pt2",
    )
    p.add_argument(
        "--opset",
        type=int,
        default=None,
        help=f"ONNX opset (onnx and onnx_int8; default: the exporter's own, torch's choice for dynamo (20 with "
        f"torch 2.13), {DEFAULT_OPSET} for legacy)",
    )
    p.add_argument(
        "--exporter",
        choices=ONNX_EXPORTER_CHOICES,
        default=None,
        help="ONNX exporter (onnx and onnx_int8): auto (default: torch's current dynamo exporter, the legacy "
        "TorchScript-based one when it fails, with the reason), dynamo or legacy",
    )
    p.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="onnx_int8: dynamic (default; activation scales per call) or static (QDQ, calibrated)",
    )
    p.add_argument(
        "--calibration",
        default=None,
        metavar="FILE.npz",
        help="onnx_int8 static: calibration input rows (numpy.savez); default: the rows the checkpoint carries",
    )
    p.add_argument(
        "--per-channel", action="store_true", help="onnx_int8: one weight scale per output channel"
    )
    p.add_argument(
        "--method", choices=METHODS, default=None, help="trace or script (default trace; not for aoti)"
    )
    p.add_argument(
        "--device",
        choices=AOTI_DEVICES,
        default=None,
        help="device the AOTInductor package is compiled for (aoti only; default cpu)",
    )
    p.add_argument("--name", default=None, help="model name (default: checkpoint meta, else the file name)")
    p.add_argument("--version", default=None, help="model version text (default: checkpoint meta, else 1)")
    p.add_argument("--debug", action="store_true", help="print a traceback on errors")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # exits 2 on usage errors
    if args.opset is not None and args.format not in ("onnx", "onnx_int8"):
        parser.error("--opset only applies to --format onnx and onnx_int8")
    if args.exporter is not None and args.format not in ("onnx", "onnx_int8"):
        parser.error("--exporter only applies to --format onnx and onnx_int8")
    if args.format != "onnx_int8" and (args.quantization or args.calibration or args.per_channel):
        parser.error("--quantization, --calibration and --per-channel only apply to --format onnx_int8")
    if args.calibration and args.quantization != "static":
        parser.error("--calibration is only used by --quantization static")
    if args.method is not None and args.format == "aoti":
        parser.error("--method does not apply to --format aoti (it always uses torch.export)")
    if args.device is not None and args.format != "aoti":
        parser.error("--device only applies to --format aoti")
    if args.name is not None and not _md.NAME_RE.fullmatch(args.name):
        parser.error(f"--name {args.name!r} must match [A-Za-z0-9][A-Za-z0-9._-]{{0,127}}")
    from fw.checkpoint import CheckpointError

    try:
        with contextlib.redirect_stdout(sys.stderr), quiet_warnings():
            report = export_checkpoint(
                args.checkpoint,
                args.format,
                args.out,
                opset_version=args.opset,
                method=args.method or "trace",
                name=args.name,
                version=args.version,
                quantization=args.quantization,
                calibration=args.calibration,
                per_channel=args.per_channel,
                device=args.device or "cpu",
                exporter=args.exporter or "auto",
            )
    except (ExportError, CheckpointError, _md.MetadataError) as e:
        if args.debug:
            raise
        print(f"fw.export: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # unexpected: still one line, exit 1
        if args.debug:
            raise
        print(
            f"fw.export: error: {type(e).__name__}: {e}. Hint: rerun with --debug for a traceback",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(report.to_dict(), separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
