"""The ``fw.json`` document (docs/model-format.md, format version 1).

* :func:`build` assembles and validates the document an exporter embeds;
* :func:`validate` checks a document against the field rules;
* :func:`encode_tensor` / :func:`decode_tensor` convert tensors to and from
  ``{"dtype", "shape", "b64"}`` (little-endian raw bytes, base64);
* :func:`read` takes ``fw.json`` back out of an exported file without running or unpickling it;
* :func:`detect_format` tells an ONNX file from a TorchScript archive, an AOTInductor package or a
  pickle by content.

numpy/torch/onnx are imported inside the functions that need them.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import math
import re
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

FW_FORMAT = 2  # the newest format this reader knows; a document is written with the lowest that fits
STEPS_FORMAT = (
    2  # preprocessing.image.steps: a version-1 reader would ignore them, so it must refuse the file
)
METADATA_KEY = "fw.json"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_VERSION_LEN = 64
TASKS = ("classification", "regression", "other")
FORMATS = ("onnx", "torchscript", "quantized", "onnx_int8", "aoti")
DTYPES = ("float32", "float64", "float16", "int64", "int32", "int8", "uint8", "bool")
RESIZE_MODES = ("bilinear", "nearest")
LAYOUTS = ("NCHW",)

# torch dtype attribute name -> fw dtype name (looked up lazily so torch is not imported here).
_TORCH_DTYPES = {
    "float32": "float32",
    "float64": "float64",
    "float16": "float16",
    "int64": "int64",
    "int32": "int32",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
}


class MetadataError(ValueError):
    """fw.json is missing, malformed or disagrees with the rules of docs/model-format.md."""


def _fail(msg: str, hint: str) -> MetadataError:
    return MetadataError(f"{msg}. Hint: {hint}")


# ---------------------------------------------------------------------------- dtypes and tensors


def dtype_name(dtype: Any) -> str:
    """fw dtype name of a torch.dtype or numpy dtype (``torch.float32`` -> ``"float32"``)."""
    text = str(dtype)
    text = text.removeprefix("torch.")
    if text in ("float", "double", "half", "long", "int"):
        text = {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32"}[
            text
        ]
    if text in _TORCH_DTYPES:
        return _TORCH_DTYPES[text]
    raise _fail(
        f"dtype {dtype} is not supported by fw model files (supported: {', '.join(DTYPES)})",
        "cast the model's inputs/outputs to one of the supported dtypes, e.g. .float() or .long()",
    )


def _np_dtype(name: str) -> Any:
    import numpy as np

    if name not in DTYPES:
        raise _fail(f"unknown dtype {name!r}", f"use one of {', '.join(DTYPES)}")
    return np.dtype(name).newbyteorder("<") if name != "bool" else np.dtype(np.bool_)


def encode_tensor(tensor: Any) -> dict[str, Any]:
    """``{"dtype", "shape", "b64"}`` for a torch tensor or numpy array (little-endian raw bytes)."""
    import numpy as np

    if hasattr(tensor, "detach"):  # torch.Tensor
        tensor = tensor.detach().cpu().contiguous().numpy()
    arr = np.asarray(tensor)
    name = dtype_name(arr.dtype)
    raw = np.ascontiguousarray(arr.astype(_np_dtype(name), copy=False)).tobytes()
    return {"dtype": name, "shape": [int(d) for d in arr.shape], "b64": base64.b64encode(raw).decode("ascii")}


def decode_tensor(obj: Mapping[str, Any]) -> Any:
    """numpy array (native byte order) from ``{"dtype", "shape", "b64"}``."""
    import numpy as np

    try:
        name, shape, b64 = obj["dtype"], obj["shape"], obj["b64"]
    except (KeyError, TypeError) as e:
        raise _fail(
            f"encoded tensor must be an object with dtype, shape and b64; got {_short(obj)}",
            "encode tensors with fw.metadata.encode_tensor()",
        ) from e
    dt = _np_dtype(name)
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise _fail(
            f"encoded tensor shape must be a list of non-negative ints, got {shape!r}", "fix the shape"
        )
    try:
        raw = base64.b64decode(b64, validate=True)
    except (ValueError, TypeError) as e:
        raise _fail(
            "encoded tensor b64 is not valid base64", "encode with fw.metadata.encode_tensor()"
        ) from e
    want = math.prod(shape) * dt.itemsize
    if len(raw) != want:
        raise _fail(
            f"encoded tensor holds {len(raw)} bytes but dtype {name} and shape {shape} need {want}",
            "re-encode the tensor with fw.metadata.encode_tensor()",
        )
    return np.frombuffer(raw, dtype=dt).reshape(shape).astype(dt.newbyteorder("="))


def _short(obj: Any, n: int = 80) -> str:
    text = repr(obj)
    return text if len(text) <= n else text[: n - 3] + "..."


# ---------------------------------------------------------------------------- building


def io_spec(name: str, dtype: Any, shape: Sequence[int], dynamic_batch: bool = True) -> dict[str, Any]:
    """One ``inputs``/``outputs`` entry; the batch axis (axis 0) becomes -1 when ``dynamic_batch``."""
    dims = [int(d) for d in shape]
    if dynamic_batch and dims:
        dims[0] = -1
    return {"name": name, "dtype": dtype if isinstance(dtype, str) else dtype_name(dtype), "shape": dims}


def image_preprocessing(
    height: int,
    width: int,
    channels: int,
    scale: float = 1.0 / 255.0,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    resize: str = "bilinear",
    invert: bool = False,
    layout: str = "NCHW",
    **extra: Any,
) -> dict[str, Any]:
    """``{"image": {...}}`` for ``preprocessing``; extra keys (e.g. ``flatten=True``) are kept."""
    image = {
        "height": int(height),
        "width": int(width),
        "channels": int(channels),
        "layout": layout,
        "resize": resize,
        "scale": float(scale),
        "mean": [float(m) for m in (mean if mean is not None else [0.0] * channels)],
        "std": [float(s) for s in (std if std is not None else [1.0] * channels)],
        "invert": bool(invert),
    }
    image.update(extra)
    return {"image": image}


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def build(
    *,
    name: str,
    format: str,
    inputs: Sequence[Mapping[str, Any]],
    outputs: Sequence[Mapping[str, Any]],
    version: str = "1",
    description: str | None = None,
    task: str | None = None,
    labels: Sequence[str] | None = None,
    preprocessing: Mapping[str, Any] | None = None,
    export: Mapping[str, Any] | None = None,
    metrics: Mapping[str, float] | None = None,
    test_vector: Mapping[str, Any] | None = None,
    torch_version: str | None = None,
    created_at: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Assemble and validate an ``fw.json`` document (field order as in docs/model-format.md).

    ``task`` defaults to ``"classification"`` when ``labels`` are given, else ``"other"``.
    ``torch_version`` defaults to the installed torch's version. Raises :class:`MetadataError`.
    """
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    if task is None:
        task = "classification" if labels else "other"
    doc: dict[str, Any] = {
        "fw_format": format_version(preprocessing),
        "name": name,
        "version": str(version),
    }
    if description is not None:
        doc["description"] = description
    doc["task"] = task
    doc["format"] = format
    doc["inputs"] = [dict(s) for s in inputs]
    doc["outputs"] = [dict(s) for s in outputs]
    if labels is not None:
        doc["labels"] = [str(label) for label in labels]
    if preprocessing is not None:
        doc["preprocessing"] = json.loads(json.dumps(preprocessing))
    if export is not None:
        doc["export"] = dict(export)
    doc["torch_version"] = torch_version
    doc["created_at"] = created_at or utc_now()
    if metrics is not None:
        doc["metrics"] = {str(k): float(v) for k, v in metrics.items()}
    if test_vector is not None:
        doc["test_vector"] = dict(test_vector)
    for k, v in (extra or {}).items():
        doc.setdefault(k, v)
    validate(doc)
    return doc


def dumps(doc: Mapping[str, Any]) -> str:
    """Compact JSON text of a document (what is embedded in files)."""
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


# ---------------------------------------------------------------------------- validation


def validate_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise _fail(
            f"model name {name!r} is invalid: it must match [A-Za-z0-9][A-Za-z0-9._-]{{0,127}}",
            "pass name= with letters, digits, '.', '_' or '-' (e.g. name='digits_mlp')",
        )
    return name


def _check_shape(where: str, shape: Any) -> list[int]:
    if (
        not isinstance(shape, list)
        or not shape
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= -1 for d in shape)
    ):
        raise _fail(
            f"{where}.shape must be a non-empty list of ints (-1 = dynamic), got {_short(shape)}",
            "write the shape with the batch axis first, e.g. [-1, 64]",
        )
    if shape[0] != -1:
        raise _fail(
            f"{where}.shape[0] is {shape[0]} but the batch axis (axis 0) must be dynamic (-1)",
            "export with a dynamic batch axis (fw.export does this) and write -1 first",
        )
    return shape


def _check_io(kind: str, specs: Any) -> list[dict[str, Any]]:
    if not isinstance(specs, list) or not specs:
        raise _fail(f"{kind} must be a non-empty list", f"list every model {kind[:-1]} in positional order")
    seen: set[str] = set()
    for i, spec in enumerate(specs):
        where = f"{kind}[{i}]"
        if not isinstance(spec, dict):
            raise _fail(f"{where} must be an object", "use {'name': ..., 'dtype': ..., 'shape': [...]}")
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise _fail(f"{where}.name must be a non-empty string", "name every input and output")
        if name in seen:
            raise _fail(f"{where}.name {name!r} is repeated", "give every input and output a distinct name")
        seen.add(name)
        if spec.get("dtype") not in DTYPES:
            raise _fail(
                f"{where}.dtype {spec.get('dtype')!r} is not one of {', '.join(DTYPES)}",
                "use a supported dtype name such as 'float32' or 'int64'",
            )
        _check_shape(where, spec.get("shape"))
    return specs


def _shape_matches(declared: list[int], got: list[int]) -> bool:
    return len(declared) == len(got) and all(d == -1 or d == g for d, g in zip(declared, got, strict=True))


def _check_image(image: Any, first_input: dict[str, Any] | None) -> None:
    hint = (
        "see preprocessing.image in docs/model-format.md, or build it with fw.metadata.image_preprocessing()"
    )
    if not isinstance(image, dict):
        raise _fail("preprocessing.image must be an object", hint)
    if "steps" in image:
        _check_steps_form(image)
    for key in ("height", "width", "channels"):
        v = image.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise _fail(f"preprocessing.image.{key} must be a positive int, got {v!r}", hint)
    c = image["channels"]
    if c not in (1, 3):
        raise _fail(f"preprocessing.image.channels must be 1 or 3, got {c}", hint)
    if image.get("layout", "NCHW") not in LAYOUTS:
        raise _fail(f"preprocessing.image.layout must be one of {LAYOUTS}, got {image.get('layout')!r}", hint)
    if image.get("resize", "bilinear") not in RESIZE_MODES:
        raise _fail(
            f"preprocessing.image.resize must be one of {RESIZE_MODES}, got {image['resize']!r}", hint
        )
    scale = image.get("scale", 1.0 / 255.0)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale):
        raise _fail(f"preprocessing.image.scale must be a finite number, got {scale!r}", hint)
    for key, default in (("mean", 0.0), ("std", 1.0)):
        v = image.get(key, [default] * c)
        if not isinstance(v, list) or len(v) != c or not all(isinstance(x, (int, float)) for x in v):
            raise _fail(
                f"preprocessing.image.{key} must be a list of {c} numbers (one per channel), got {v!r}", hint
            )
        if key == "std" and any(x == 0 for x in v):
            raise _fail("preprocessing.image.std must not contain 0", hint)
    if not isinstance(image.get("invert", False), bool):
        raise _fail("preprocessing.image.invert must be true or false", hint)
    flatten = image.get("flatten", False)
    if not isinstance(flatten, bool):
        raise _fail("preprocessing.image.flatten must be true or false", hint)
    if first_input is not None:
        h, w = image["height"], image["width"]
        want = [-1, c * h * w] if flatten else [-1, c, h, w]
        if not _shape_matches(first_input["shape"], want) and not _shape_matches(want, first_input["shape"]):
            raise _fail(
                f"preprocessing.image produces {want} (NCHW{', flattened' if flatten else ''}) but the first "
                f"input {first_input['name']!r} has shape {first_input['shape']}",
                "make height/width/channels (and flatten) agree with the model's first input",
            )
        if not first_input["dtype"].startswith("float"):
            raise _fail(
                f"preprocessing.image needs a floating-point first input, got {first_input['dtype']}",
                "drop preprocessing.image for models whose first input is not an image",
            )


def _check_test_vector(tv: Any, inputs: list[dict], outputs: list[dict]) -> None:
    hint = "build the test vector with fw.metadata.encode_tensor() for every input and output"
    if not isinstance(tv, dict):
        raise _fail("test_vector must be an object", hint)
    for kind, specs in (("inputs", inputs), ("outputs", outputs)):
        tensors = tv.get(kind)
        if not isinstance(tensors, dict):
            raise _fail(f"test_vector.{kind} must be an object keyed by {kind[:-1]} name", hint)
        names = [s["name"] for s in specs]
        if sorted(tensors) != sorted(names):
            raise _fail(f"test_vector.{kind} has {sorted(tensors)} but the model's {kind} are {names}", hint)
        for spec in specs:
            enc = tensors[spec["name"]]
            arr = decode_tensor(enc)
            if enc["dtype"] != spec["dtype"]:
                raise _fail(
                    f"test_vector.{kind}.{spec['name']} has dtype {enc['dtype']} but {kind} declares "
                    f"{spec['dtype']}",
                    hint,
                )
            if not _shape_matches(spec["shape"], list(arr.shape)):
                raise _fail(
                    f"test_vector.{kind}.{spec['name']} has shape {list(arr.shape)} which does not fit the "
                    f"declared shape {spec['shape']}",
                    hint,
                )
    for key in ("atol", "rtol"):
        v = tv.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not (v >= 0 and math.isfinite(v)):
            raise _fail(f"test_vector.{key} must be a finite number >= 0, got {v!r}", "e.g. 1e-4")
    if "image" in tv:
        _check_image_case(tv["image"], inputs, outputs)


def format_version(preprocessing: Any) -> int:
    """The lowest fw_format that holds ``preprocessing``: 2 with image steps, else 1."""
    image = preprocessing.get("image") if isinstance(preprocessing, Mapping) else None
    return STEPS_FORMAT if isinstance(image, Mapping) and "steps" in image else 1


def _check_steps_form(image: dict[str, Any]) -> None:
    from fw import transforms

    hint = "build the steps form with fw.transforms.image_preprocessing_from(transform)"
    mixed = sorted(k for k in ("resize", "scale", "mean", "std", "invert") if k in image)
    if mixed:
        raise _fail(
            f"preprocessing.image has steps and also the simple form's {mixed}", f"keep one form; {hint}"
        )
    try:
        c, h, w = transforms.check_steps(image["steps"])
    except transforms.TransformError as e:
        raise MetadataError(str(e)) from e
    got = (image.get("channels"), image.get("height"), image.get("width"))
    if got != (c, h, w):
        raise _fail(
            f"preprocessing.image.steps produce {c} channel(s) of {h}x{w} but channels/height/width say {got}",
            hint,
        )


def _check_image_case(case: Any, inputs: list[dict], outputs: list[dict]) -> None:
    hint = "the exporter writes test_vector.image; re-export the model with fw.export"
    if not isinstance(case, dict):
        raise _fail("test_vector.image must be an object", hint)
    b64 = case.get("image_b64")
    if not isinstance(b64, str) or not b64 or len(b64) > 8 << 20:
        raise _fail("test_vector.image.image_b64 must be a base64 picture of at most 8 MiB of text", hint)
    x = decode_tensor(case.get("input"))
    first = inputs[0]
    if x.shape[:1] != (1,) or not _shape_matches(first["shape"], list(x.shape)):
        raise _fail(
            f"test_vector.image.input has shape {list(x.shape)}, not one row of the first input {first['shape']}",
            hint,
        )
    atol = case.get("input_atol")
    if (
        not isinstance(atol, (int, float))
        or isinstance(atol, bool)
        or not (atol >= 0 and math.isfinite(atol))
    ):
        raise _fail(f"test_vector.image.input_atol must be a finite number >= 0, got {atol!r}", hint)
    outs = case.get("outputs")
    names = [o["name"] for o in outputs]
    if not isinstance(outs, dict) or sorted(outs) != sorted(names):
        raise _fail(f"test_vector.image.outputs must hold the model's outputs {names}", hint)
    for v in outs.values():
        decode_tensor(v)


def validate(doc: Any) -> dict[str, Any]:
    """Check a document against docs/model-format.md; return it unchanged or raise MetadataError.

    Unknown fields are kept and ignored (newer writers stay readable).
    """
    if not isinstance(doc, dict):
        raise _fail("fw.json must be a JSON object", "write the document built by fw.metadata.build()")
    fmt = doc.get("fw_format")
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 1:
        raise _fail(f"fw_format must be a positive integer, got {fmt!r}", f"set fw_format to {FW_FORMAT}")
    if fmt > FW_FORMAT:
        raise _fail(
            f"fw_format {fmt} is newer than this reader knows ({FW_FORMAT})",
            "upgrade the fw package, or re-export the model with this version",
        )
    validate_name(doc.get("name"))
    version = doc.get("version")
    if not isinstance(version, str) or len(version) > MAX_VERSION_LEN:
        raise _fail(
            f"version must be a string of at most {MAX_VERSION_LEN} characters, got {_short(version)}",
            "pass version= as short text, e.g. '1' or '2026-11-22'",
        )
    if "description" in doc and not isinstance(doc["description"], str):
        raise _fail("description must be a string", "pass description= as text")
    task = doc.get("task")
    if task not in TASKS:
        raise _fail(
            f"task must be one of {', '.join(TASKS)}, got {task!r}", "pass task='classification' or similar"
        )
    if doc.get("format") not in FORMATS:
        raise _fail(
            f"format must be one of {', '.join(FORMATS)}, got {doc.get('format')!r}", "fix the format"
        )
    inputs = _check_io("inputs", doc.get("inputs"))
    outputs = _check_io("outputs", doc.get("outputs"))
    labels = doc.get("labels")
    if labels is not None:
        if task != "classification":
            raise _fail(
                f"labels are only allowed for task 'classification' (task is {task!r})", "drop labels="
            )
        if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
            raise _fail("labels must be a non-empty list of strings", "pass labels=['cat', 'dog', ...]")
        classes = outputs[0]["shape"][-1]
        if len(outputs[0]["shape"]) < 2 or (classes != -1 and classes != len(labels)):
            raise _fail(
                f"{len(labels)} labels given but the first output {outputs[0]['name']!r} has shape "
                f"{outputs[0]['shape']} (one label per class on its last axis)",
                "pass exactly one label per output class, in index order",
            )
    pre = doc.get("preprocessing")
    if (
        fmt < STEPS_FORMAT
        and isinstance(pre, dict)
        and isinstance(pre.get("image"), dict)
        and "steps" in pre["image"]
    ):
        raise _fail(
            f"preprocessing.image.steps needs fw_format {STEPS_FORMAT} (a version-1 reader would ignore them)",
            f"set fw_format to {STEPS_FORMAT}",
        )
    if "test_vector" in doc and isinstance(doc["test_vector"], dict) and "image" in doc["test_vector"]:
        if not isinstance(pre, dict) or "image" not in pre:
            raise _fail("test_vector.image needs preprocessing.image", "drop test_vector.image")
    if pre is not None:
        if not isinstance(pre, dict):
            raise _fail("preprocessing must be an object", "use {'image': {...}} or leave it out")
        if "image" in pre:
            _check_image(pre["image"], inputs[0])
    export = doc.get("export")
    if export is not None and not isinstance(export, dict):
        raise _fail("export must be an object", "describe the exporter as an object or leave it out")
    metrics = doc.get("metrics")
    if metrics is not None and (
        not isinstance(metrics, dict)
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in metrics.values())
    ):
        raise _fail("metrics must map names to numbers", "pass metrics={'test_accuracy': 0.97}")
    if "test_vector" in doc:
        _check_test_vector(doc["test_vector"], inputs, outputs)
    return doc


# ---------------------------------------------------------------------------- reading files


def detect_format(path: str | Path) -> str:
    """``"torchscript"``, ``"aoti"``, ``"pickle"``, ``"onnx"`` or ``"unknown"``, from the file's content only.

    Mirrors docs/model-format.md: a zip holding ``code/`` or ``constants.pkl`` is TorchScript, a zip
    holding ``data/aotinductor/`` is an AOTInductor package, a zip holding ``data.pkl`` without them
    (what torch.save writes) or a raw pickle stream is a pickle, a protobuf that parses as an ONNX
    ModelProto with a graph is ONNX. Nothing is unpickled.
    """
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(4)
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
        except zipfile.BadZipFile:
            return "unknown"
        parts = [n.split("/", 2) for n in names]
        if any(len(p) >= 2 and (p[1] == "code" or p[1] == "constants.pkl") for p in parts):
            return "torchscript"
        if any(len(p) == 3 and p[1] == "data" and p[2].startswith("aotinductor/") for p in parts):
            return "aoti"
        if any(len(p) >= 2 and p[1] == "data.pkl" for p in parts):
            return "pickle"
        return "unknown"
    if head[:1] == b"\x80":  # pickle protocol 2+ opcode
        return "pickle"
    try:
        import onnx

        model = onnx.load_model(str(path), load_external_data=False)
    except Exception:
        return "unknown"
    return "onnx" if model.HasField("graph") else "unknown"


def _parse(text: str | bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise _fail(
            f"fw.json in {where} is not valid JSON ({e})", "re-export the model with fw.export"
        ) from e
    return validate(doc)


def read_onnx(path: str | Path) -> dict[str, Any] | None:
    import onnx

    model = onnx.load_model(str(path), load_external_data=False)
    for prop in model.metadata_props:
        if prop.key == METADATA_KEY:
            return _parse(prop.value, str(path))
    return None


def read_torchscript(path: str | Path) -> dict[str, Any] | None:
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            parts = name.split("/")
            if len(parts) == 3 and parts[1] == "extra" and parts[2] == METADATA_KEY:
                return _parse(zf.read(name), str(path))
    return None


def read_aoti_metadata(path: str | Path) -> dict[str, str]:
    """AOTInductor's package metadata (what ``AOTIModelPackageLoader::get_metadata()`` returns).

    It is the JSON object of strings next to the compiled model,
    ``<archive>/data/aotinductor/model/<name>.wrapper_metadata.json``; fw.json is its ``fw.json`` entry.
    """
    with zipfile.ZipFile(path) as zf:
        names = [
            n
            for n in zf.namelist()
            if n.split("/", 1)[-1].startswith("data/aotinductor/model/") and n.endswith("_metadata.json")
        ]
        names.sort(key=lambda n: not n.endswith(".wrapper_metadata.json"))
        if not names:
            raise _fail(f"{path} has no AOTInductor metadata", "export it with fw.export.aoti")
        try:
            doc = json.loads(zf.read(names[0]))
        except (ValueError, UnicodeDecodeError) as e:
            raise _fail(
                f"the AOTInductor metadata in {path} is not valid JSON ({e})", "export it again"
            ) from e
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise _fail(f"the AOTInductor metadata in {path} is not an object of strings", "export it again")
    return doc


def read_aoti(path: str | Path) -> dict[str, Any] | None:
    text = read_aoti_metadata(path).get(METADATA_KEY)
    return None if text is None else _parse(text, str(path))


def read(path: str | Path, required: bool = True) -> dict[str, Any] | None:
    """Return the validated ``fw.json`` of an exported ONNX, TorchScript or AOTInductor file.

    Nothing is unpickled: TorchScript archives are read with zipfile (``<archive>/extra/fw.json``),
    AOTInductor packages too (the ``fw.json`` entry of the package metadata, see
    :func:`read_aoti_metadata`), ONNX files with ``onnx.load`` (``metadata_props``). With ``required=False`` a file without
    fw.json gives ``None``; pickles and unknown files always raise :class:`MetadataError`.
    """
    path = Path(path)
    if not path.is_file():
        raise _fail(f"{path} does not exist or is not a file", "check the path")
    kind = detect_format(path)
    if kind == "onnx":
        doc = read_onnx(path)
    elif kind == "torchscript":
        doc = read_torchscript(path)
    elif kind == "aoti":
        doc = read_aoti(path)
    elif kind == "pickle":
        raise _fail(
            f"{path} is a pickled checkpoint or state_dict, not an exported model (it is not unpickled)",
            f"export it first: python -m fw.export {path} --format onnx --out model.onnx",
        )
    else:
        raise _fail(
            f"{path} is neither an ONNX model, a TorchScript archive nor an AOTInductor package",
            "export it with fw.export",
        )
    if doc is None and required:
        raise _fail(f"{path} ({kind}) carries no fw.json", "export it with fw.export to embed the metadata")
    return doc
