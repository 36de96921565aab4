#!/usr/bin/env python3
"""The models `make gpu-check` serves, exported where it runs (scripts/gpu-check.sh).

    PYTHONPATH=python python3 scripts/gpu-export.py --out DIR --device cuda

Writes into DIR, each with its fw.json (test vector included) through fw.export:

- ``resnet18.ts.pt``: fw.models.ResNet18 with seeded random weights (the reference model's
  architecture and seed; its predictions mean nothing), ImageNet eval preprocessing, so
  ``/predict/image`` works; TorchScript runs on whichever device it is loaded on;
- ``resnet18.<device>.pt2``: the same model as an AOTInductor package compiled for ``--device``
  (batch 1 to 64), unless ``--no-aoti``;
- ``digits_mlp.ts.pt`` and ``digits_cnn.ts.pt``: the digits architectures with seeded random
  weights (``/predict`` rows of 64 floats; engine.test's TestCUDA loads digits_cnn);
- ``samples/rgb_224.jpg``: the synthetic picture the image requests send;
- ``manifest.json``: what was written and how long each export took.

Nothing is trained and nothing is downloaded: the machine a GPU check runs on reaches nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SEED = 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument(
        "--device",
        default="cuda",
        choices=("cpu", "cuda"),
        help="what the .pt2 is compiled for",
    )
    ap.add_argument(
        "--no-aoti", action="store_true", help="skip the AOTInductor package"
    )
    args = ap.parse_args(argv)

    import torch
    from fw import export
    from fw.models import DigitsCNN, DigitsMLP, ResNet18
    from fw.reference import imagenet_eval_preprocessing, synthetic_rgb

    out: Path = args.out
    (out / "samples").mkdir(parents=True, exist_ok=True)
    manifest: dict[str, object] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else None,
        "files": {},
    }

    def step(name: str, fn) -> None:  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        rep = fn()
        secs = time.perf_counter() - t0
        manifest["files"][name] = {
            "seconds": round(secs, 2),
            "bytes": (out / name).stat().st_size,
        }  # type: ignore[index]
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        err = getattr(rep, "max_abs_error", None)
        print(
            f"gpu-export: {name} in {secs:.1f}s (max abs error {err})",
            file=sys.stderr,
            flush=True,
        )

    synthetic_rgb(224, 224).save(out / "samples" / "rgb_224.jpg", quality=90)

    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    mlp = DigitsMLP().eval()
    step(
        "digits_mlp.ts.pt",
        lambda: export.torchscript(
            mlp, torch.rand(4, 64, generator=gen), out / "digits_mlp.ts.pt"
        ),
    )
    cnn = DigitsCNN().eval()
    step(
        "digits_cnn.ts.pt",
        lambda: export.torchscript(
            cnn, torch.rand(4, 1, 8, 8, generator=gen), out / "digits_cnn.ts.pt"
        ),
    )

    torch.manual_seed(SEED)
    resnet = ResNet18(num_classes=1000).eval()
    example = torch.randn(2, 3, 224, 224, generator=gen)
    meta = {
        "labels": [f"class_{i}" for i in range(1000)],
        "preprocessing": imagenet_eval_preprocessing(),
        "task": "classification",
        "description": "ResNet-18 with random (seeded) weights, for the GPU check; its predictions mean nothing",
    }
    step(
        "resnet18.ts.pt",
        lambda: export.torchscript(resnet, example, out / "resnet18.ts.pt", **meta),
    )
    if not args.no_aoti:
        name = f"resnet18.{args.device}.pt2"
        step(
            name,
            lambda: export.aoti(
                resnet, example, out / name, device=args.device, max_batch=64, **meta
            ),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
