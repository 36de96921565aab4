"""Training recipes the dashboard can start: ``python -m fw.recipes.<name> --run-id ID --experiment E --params JSON``.

A recipe is a module with a ``RECIPE`` dict (``description`` and ``params``, a list of parameter specs:
``name``, ``type`` (int, float, str or bool), ``default``, optional ``min``/``max`` or ``choices``, and
``description``) and a ``main()`` entry point. The built-in ones train on data that ships with
scikit-learn; users add their own in a TOML or YAML file named by ``FW_RECIPES`` (see docs/tracking.md).
``python -m fw.recipes --list [--file FILE]`` prints the registry as JSON; the dashboard reads it at start.

Only the standard library is imported here; the recipes import torch and scikit-learn themselves.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["BUILTIN", "RecipeError", "load_registry", "validate", "parse_args", "start_run", "job_run_id"]

BUILTIN = ("digits_mlp", "digits_cnn", "diabetes_mlp")
TYPES = ("int", "float", "str", "bool")
_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class RecipeError(ValueError):
    """A recipe file, schema or parameter set is invalid."""


def _check_value(spec: Mapping[str, Any], v: Any) -> Any:
    """``v`` converted to the spec's type and checked against its range or choices."""
    name, typ = spec["name"], spec["type"]
    if typ == "bool":
        if not isinstance(v, bool):
            raise RecipeError(f"param {name}: expected true or false, got {v!r}")
    elif typ == "int":
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise RecipeError(f"param {name}: expected an integer, got {v!r}")
    elif typ == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise RecipeError(f"param {name}: expected a finite number, got {v!r}")
        v = float(v)
    elif not isinstance(v, str):
        raise RecipeError(f"param {name}: expected a string, got {v!r}")
    if spec.get("min") is not None and v < spec["min"]:
        raise RecipeError(f"param {name}: {v!r} is below the minimum {spec['min']}")
    if spec.get("max") is not None and v > spec["max"]:
        raise RecipeError(f"param {name}: {v!r} is above the maximum {spec['max']}")
    if spec.get("choices") and v not in spec["choices"]:
        raise RecipeError(f"param {name}: {v!r} is not one of {spec['choices']}")
    return v


def check_schema(name: str, params: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Validate a parameter schema (its defaults included) and return it as plain dicts."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, p in enumerate(params):
        if not isinstance(p, Mapping):
            raise RecipeError(f"recipe {name}: params[{i}] must be a table")
        pname = p.get("name")
        if not isinstance(pname, str) or not _NAME_RE.fullmatch(pname) or pname in seen:
            raise RecipeError(f"recipe {name}: params[{i}] needs a unique name of a-z, 0-9 and _")
        seen.add(pname)
        if p.get("type") not in TYPES:
            raise RecipeError(f"recipe {name}: param {pname}: type must be one of {', '.join(TYPES)}")
        spec = {
            "name": pname,
            "type": p["type"],
            "default": p.get("default"),
            "description": str(p.get("description", "")),
        }
        for k in ("min", "max"):
            if p.get(k) is not None:
                if p["type"] not in ("int", "float") or isinstance(p[k], bool):
                    raise RecipeError(f"recipe {name}: param {pname}: {k} needs a numeric type")
                spec[k] = p[k]
        if p.get("choices") is not None:
            if not isinstance(p["choices"], list) or not p["choices"]:
                raise RecipeError(f"recipe {name}: param {pname}: choices must be a non-empty list")
            spec["choices"] = list(p["choices"])
        if spec["default"] is None:
            raise RecipeError(f"recipe {name}: param {pname} needs a default")
        try:
            spec["default"] = _check_value(spec, spec["default"])
        except RecipeError as e:
            raise RecipeError(f"recipe {name}: default of {e}") from None
        out.append(spec)
    return out


def validate(schema: Sequence[Mapping[str, Any]], params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Params checked against ``schema`` (unknown names, types, ranges, choices), defaults filled in."""
    params = dict(params or {})
    by_name = {p["name"]: p for p in schema}
    unknown = sorted(set(params) - set(by_name))
    if unknown:
        raise RecipeError(
            f"unknown param {', '.join(unknown)}; the recipe takes {', '.join(by_name) or 'none'}"
        )
    return {n: _check_value(s, params[n]) if n in params else s["default"] for n, s in by_name.items()}


def _builtin(name: str) -> dict[str, Any]:
    mod = importlib.import_module(f"fw.recipes.{name}")
    r = mod.RECIPE
    return {
        "name": name,
        "description": r["description"],
        "module": f"fw.recipes.{name}",
        "builtin": True,
        "params": check_schema(name, r["params"]),
    }


def _read_file(path: Path) -> Any:
    """The recipes file as data: YAML for ``.yaml``/``.yml`` (safe_load: plain data only), else TOML."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RecipeError(f"recipes file {path}: {e}. Hint: see docs/tracking.md (Training jobs)") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise RecipeError(
                f"recipes file {path}: reading YAML needs PyYAML (pip install pyyaml), or write the file as TOML"
            ) from None
        try:
            return yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise RecipeError(
                f"recipes file {path}: {e}. Hint: see docs/tracking.md (Training jobs)"
            ) from None
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        return tomllib.loads(text)
    except ValueError as e:
        raise RecipeError(f"recipes file {path}: {e}. Hint: see docs/tracking.md (Training jobs)") from None


def _load_file(path: Path) -> list[dict[str, Any]]:
    data = _read_file(path)
    if not isinstance(data, Mapping) or not isinstance(data.get("recipes") or {}, Mapping):
        raise RecipeError(f"recipes file {path}: expected a top-level 'recipes' table of name -> recipe")
    out = []
    for name, r in (data.get("recipes") or {}).items():
        if not _NAME_RE.fullmatch(name):
            raise RecipeError(f"recipes file {path}: recipe name {name!r} must be a-z, 0-9 and _")
        if (
            not isinstance(r, Mapping)
            or not isinstance(r.get("module"), str)
            or not _MODULE_RE.fullmatch(r["module"])
        ):
            raise RecipeError(
                f"recipes file {path}: recipe {name} needs module = 'package.module' (run as python -m)"
            )
        out.append(
            {
                "name": name,
                "description": str(r.get("description", "")),
                "module": r["module"],
                "builtin": False,
                "params": check_schema(name, r.get("params") or []),
            }
        )
    return out


def load_registry(file: str | os.PathLike | None = None) -> dict[str, dict[str, Any]]:
    """Built-in recipes plus those of ``file`` (default ``$FW_RECIPES``); a user recipe may not shadow a built-in."""
    reg = {n: _builtin(n) for n in BUILTIN}
    if file is None:
        file = os.environ.get("FW_RECIPES") or None
    if file:
        for r in _load_file(Path(file)):
            if r["name"] in reg:
                raise RecipeError(f"recipes file {file}: {r['name']} is a built-in recipe; pick another name")
            reg[r["name"]] = r
    return reg


def parse_args(name: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The common command line of a recipe; ``params`` comes back validated with defaults filled in."""
    ap = argparse.ArgumentParser(prog=f"python -m fw.recipes.{name}")
    ap.add_argument("--run-id", default=None)
    ap.add_argument("--experiment", default=name)
    ap.add_argument("--name", default=None)
    ap.add_argument("--params", default="{}", help="JSON object of parameters")
    ap.add_argument("--resume-from", default=None, help="checkpoint to continue from")
    args = ap.parse_args(argv)
    try:
        raw = json.loads(args.params)
    except ValueError as e:
        ap.error(f"--params is not JSON: {e}")
    if not isinstance(raw, dict):
        ap.error("--params must be a JSON object")
    if name in BUILTIN or os.environ.get("FW_RECIPES"):
        try:
            args.params = validate(
                load_registry()[name]["params"] if name not in BUILTIN else _builtin(name)["params"], raw
            )
        except (RecipeError, KeyError) as e:
            ap.error(str(e))
    else:
        args.params = raw
    return args


def job_run_id() -> str | None:
    """The run ID when the dashboard started this process (it created the run and captures the output)."""
    return os.environ.get("FW_JOB_RUN_ID") or None


def start_run(args: argparse.Namespace, recipe: str) -> Any:
    """``fw.track.run`` for a recipe. Under the dashboard (``FW_JOB_RUN_ID`` equals ``--run-id``) the run already
    exists with its params, and the dashboard captures stdout/stderr itself, so the SDK neither re-sends params
    nor tees the output (no duplicated log lines)."""
    from fw import track

    under_job = args.run_id is not None and job_run_id() == args.run_id
    return track.run(
        args.experiment,
        params=None if under_job else {**args.params, "recipe": recipe},
        name=args.name,
        run_id=args.run_id,
        capture_output=not under_job,
    )
