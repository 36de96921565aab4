#!/usr/bin/env python3
"""Eager PyTorch baseline for the engine benchmarks.

    python bench/engine_eager.py --models build/models --batches 1,8,64 --seconds 1.0 --out eager.json

Loads every ``NAME.ckpt.pt`` in ``--models`` (written by ``python -m fw.reference``) with
fw.checkpoint.load, builds a batch by repeating the checkpoint's example rows, and times
``model(*args, **kwargs)`` under ``torch.inference_mode`` after a warm-up. Each (model, batch) runs for
about ``--seconds`` (at least one call, so a slow configuration overruns by at most one call).
Writes a JSON array of rows::

    {"model", "runtime": "pytorch-eager", "format": "eager", "batch", "p50_us", "p99_us",
     "rows_per_s", "threads", "calls"}

and prints one line per row on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _batch_of(example: Any, batch: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(args, kwargs) with ``batch`` rows, repeating the example's rows."""
    import torch

    def grow(t: Any) -> Any:
        return t[torch.arange(batch) % t.shape[0]].contiguous()

    if isinstance(example, torch.Tensor):
        return (grow(example),), {}
    if isinstance(example, dict):
        return (), {k: grow(v) for k, v in example.items()}
    return tuple(grow(t) for t in example), {}


def _percentile(sorted_ns: list[int], q: float) -> float:
    if not sorted_ns:
        return float("nan")
    k = min(len(sorted_ns) - 1, max(0, round(q / 100.0 * (len(sorted_ns) - 1))))
    return sorted_ns[k] / 1000.0


def bench_one(
    model: Any,
    inputs: tuple[tuple[Any, ...], dict[str, Any]],
    seconds: float,
    warmup_s: float,
) -> dict[str, Any]:
    import torch

    args, kwargs = inputs
    with torch.inference_mode():
        end = time.perf_counter() + warmup_s
        n = 0
        while n < 1 or time.perf_counter() < end:
            model(*args, **kwargs)
            n += 1
        lat: list[int] = []
        start = time.perf_counter_ns()
        deadline = start + int(seconds * 1e9)
        while not lat or time.perf_counter_ns() < deadline:
            t = time.perf_counter_ns()
            model(*args, **kwargs)
            lat.append(time.perf_counter_ns() - t)
        total_s = (time.perf_counter_ns() - start) / 1e9
    lat.sort()
    batch = int(next(iter([*args, *kwargs.values()])).shape[0])
    return {
        "p50_us": round(_percentile(lat, 50), 1),
        "p99_us": round(_percentile(lat, 99), 1),
        "rows_per_s": round(batch * len(lat) / total_s, 1),
        "calls": len(lat),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--models", default="build/models", help="folder with NAME.ckpt.pt files"
    )
    p.add_argument(
        "--batches",
        default="1,8,64",
        help="comma-separated batch sizes (default 1,8,64)",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=1.0,
        help="timed seconds per model and batch (default 1.0)",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=0.2,
        help="warm-up seconds per model and batch (default 0.2)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: available CPUs)",
    )
    p.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="NAME",
        help="benchmark only these models",
    )
    p.add_argument(
        "--out", default=None, help="write the JSON rows here (default: stdout)"
    )
    args = p.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",") if b.strip()]
        if not batches or min(batches) < 1:
            raise ValueError
    except ValueError:
        p.error(
            f"--batches must be positive integers separated by commas, got {args.batches!r}"
        )

    import torch
    from fw import checkpoint

    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    folder = Path(args.models)
    ckpts = sorted(folder.glob("*.ckpt.pt"))
    if args.only:
        ckpts = [c for c in ckpts if c.name.removesuffix(".ckpt.pt") in args.only]
    if not ckpts:
        print(
            f"engine_eager: error: no NAME.ckpt.pt checkpoints in {folder}. Hint: run "
            "python -m fw.reference --out build/models first",
            file=sys.stderr,
        )
        return 1
    rows = []
    for path in ckpts:
        name = path.name.removesuffix(".ckpt.pt")
        ck = checkpoint.load(path)
        if ck.example_input is None:
            print(
                f"engine_eager: skip {name}: checkpoint has no example input",
                file=sys.stderr,
            )
            continue
        for batch in batches:
            res = bench_one(
                ck.model, _batch_of(ck.example_input, batch), args.seconds, args.warmup
            )
            row = {
                "model": name,
                "runtime": "pytorch-eager",
                "format": "eager",
                "batch": batch,
                **res,
                "threads": threads,
            }
            rows.append(row)
            print(
                f"{name:>12} batch {batch:>4}: p50 {row['p50_us']:>10.1f} us  p99 {row['p99_us']:>10.1f} us  "
                f"{row['rows_per_s']:>10.1f} rows/s ({row['calls']} calls, {threads} threads)",
                file=sys.stderr,
                flush=True,
            )
    text = json.dumps(rows, indent=1) + "\n"
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
