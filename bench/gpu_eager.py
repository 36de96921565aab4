#!/usr/bin/env python3
"""Raw PyTorch on the same device: the ceiling `make gpu-check` holds fw serve against.

    python3 bench/gpu_eager.py --device cuda --batches 1,8,32,64 --seconds 1 \
        --out eager.json MODEL_FILE...

Each MODEL_FILE is a TorchScript archive (``*.ts.pt``, torch.jit.load) or an AOTInductor package
(``*.pt2``, torch._inductor.aoti_load_package): the very files fw serves, so both sides run the
same graph. Input shapes come from the file's fw.json (fw.metadata), batch axis first. Every call
starts from a host tensor and ends with the output back on the host (``x.to(device)``, forward,
``.cpu()``), as a server's call does; the same batch with the input already on the device and no
copy back is timed too (``resident``), the engine's own ceiling. Writes a JSON array of rows::

    {"model": file name, "batch", "mode": "host"|"resident", "p50_us", "p99_us", "rows_per_s", "calls"}
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def _load(path: Path, device: str) -> Any:
    import torch

    if path.suffix == ".pt2":
        import torch._inductor

        return torch._inductor.aoti_load_package(str(path))
    m = torch.jit.load(str(path), map_location=device)
    m.eval()
    return m


def _input_shape(path: Path) -> list[int]:
    from fw import metadata

    md = metadata.read(path)
    shape = md["inputs"][0]["shape"]
    return [d if isinstance(d, int) and d > 0 else 1 for d in shape[1:]]


def _time(fn: Any, seconds: float, sync: Any) -> tuple[list[int], int]:
    for _ in range(3):
        fn()
    sync()
    lat: list[int] = []
    end = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter_ns()
        fn()
        sync()
        lat.append(time.perf_counter_ns() - t0)
        if time.perf_counter() >= end:
            break
    lat.sort()
    return lat, len(lat)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    import torch

    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    rows: list[dict[str, Any]] = []
    for path in args.models:
        model = _load(path, args.device)
        shape = _input_shape(path)
        for batch in (int(b) for b in args.batches.split(",")):
            host = torch.rand(batch, *shape)
            dev = host.to(args.device)
            with torch.inference_mode():
                for mode, fn in (
                    ("host", lambda m=model, x=host: m(x.to(args.device)).cpu()),
                    ("resident", lambda m=model, x=dev: m(x)),
                ):
                    lat, calls = _time(fn, args.seconds, sync)
                    p50 = lat[len(lat) // 2] / 1e3
                    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] / 1e3
                    rps = batch * calls / (sum(lat) / 1e9)
                    rows.append(
                        {
                            "model": path.name,
                            "batch": batch,
                            "mode": mode,
                            "p50_us": round(p50, 1),
                            "p99_us": round(p99, 1),
                            "rows_per_s": round(rps, 1),
                            "calls": calls,
                        }
                    )
                    print(
                        f"gpu_eager: {path.name} batch {batch} {mode}: {rps:,.0f} rows/s, p50 {p50:.0f} us",
                        file=sys.stderr,
                        flush=True,
                    )
    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
