"""Build the reference model files, checkpoints and test fixtures.

    python -m fw.reference --out build/models [--only NAME ...] [--threads N]

Steps (``--only`` picks some): ``digits_mlp``, ``digits_cnn``, ``textcls``, ``resnet18``,
``samples``, ``bad``, and ``resnet18_pt2`` (only when named). Each model is written as ``NAME.onnx``,
``NAME.ts.pt``, ``NAME.pt2`` (AOTInductor; for resnet18 only by the ``resnet18_pt2`` step, which
``make bench-engine`` runs) and, where dynamic quantization applies, ``NAME.quant.pt``; int8 ONNX as
``NAME.int8-dynamic.onnx`` and ``NAME.int8-static.onnx`` (calibrated on the model's training rows),
plus ``NAME.ckpt.pt`` (fw.checkpoint, with those calibration rows). ``manifest.json``
lists every file; entries of steps not run this time are kept from an earlier manifest.
Outputs are overwritten; the run is deterministic up to float non-associativity across machines.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

STEPS = ("digits_mlp", "digits_cnn", "textcls", "resnet18", "resnet18_pt2", "samples", "bad")
# Steps run without --only: compiling ResNet-18 with AOTInductor is left to `make bench-engine`.
DEFAULT_STEPS = tuple(s for s in STEPS if s != "resnet18_pt2")
SEED = 0
DIGIT_LABELS = [str(i) for i in range(10)]
TEXT_LABELS = ["negative", "positive"]
TEXT_VOCAB, TEXT_LEN = 1000, 32
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
RESNET_CALIBRATION_ROWS = 16
QUANT_SKIP_RESNET = (
    "dynamic int8 quantization covers nn.Linear and nn.LSTM only; ResNet-18's compute is convolutions, so only "
    "the final fc layer would change (no speed or size benefit). Convolutions need static quantization with "
    "calibration data: see resnet18.int8-static.onnx."
)
INT8_DYNAMIC_SKIP_RESNET = (
    "dynamic quantization turns convolutions into ConvInteger, which ONNX Runtime's CPU kernels run slower than "
    "float convolutions (digits_cnn.int8-dynamic.onnx shows it in make bench-engine); ResNet-18 gets static "
    "(QDQ) quantization only."
)
AOTI_SKIP_RESNET = (
    "compiling ResNet-18 with AOTInductor adds about a minute (2 cores) and a 52 MB file to every `make models`; "
    "`make bench-engine` builds it (python -m fw.reference --only resnet18_pt2)"
)


class _Log:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f}s] {msg}", flush=True)


class Builder:
    def __init__(self, out: Path, log: _Log) -> None:
        self.out = out
        self.log = log
        self.files: list[dict[str, Any]] = []
        self.skipped: list[dict[str, Any]] = []
        self.sample_entries: list[dict[str, Any]] = []
        self.bad_entries: list[dict[str, Any]] = []
        self._digits: Any = None
        self.trained: dict[str, Any] = {}

    # ------------------------------------------------------------------ data

    def digits(self) -> Any:
        """(x_train, y_train, x_test, y_test, images_test): X/16 float32, stratified 80/20 split."""
        if self._digits is None:
            import numpy as np
            import torch
            from sklearn.datasets import load_digits
            from sklearn.model_selection import train_test_split

            d = load_digits()
            idx = np.arange(len(d.target))
            tr, te = train_test_split(idx, test_size=0.2, stratify=d.target, random_state=SEED)
            x = torch.tensor(d.data / 16.0, dtype=torch.float32)
            y = torch.tensor(d.target, dtype=torch.int64)
            self._digits = (x[tr], y[tr], x[te], y[te], d.images[te].astype(np.uint8))
        return self._digits

    # ------------------------------------------------------------------ helpers

    def _train(
        self, model: Any, x: Any, y: Any, epochs: int, lr: float, batch: int = 64, tag: str = ""
    ) -> float:
        import torch

        gen = torch.Generator().manual_seed(SEED)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        loss_fn = torch.nn.CrossEntropyLoss()
        t = time.perf_counter()
        model.train()
        for _ in range(epochs):
            perm = torch.randperm(len(x), generator=gen)
            for i in range(0, len(x), batch):
                b = perm[i : i + batch]
                opt.zero_grad()
                loss = loss_fn(model(x[b]), y[b])
                loss.backward()
                opt.step()
        model.eval()
        self.log(f"{tag}: trained {epochs} epochs on {len(x)} rows in {time.perf_counter() - t:.1f}s")
        return float(loss.detach())

    @staticmethod
    def _accuracy(model: Any, x: Any, y: Any) -> float:
        import torch

        with torch.no_grad():
            return round(float((model(x).argmax(-1) == y).double().mean()), 6)

    def _record(self, model: str, rel: str, fmt: str, **extra: Any) -> None:
        path = self.out / rel
        entry = {
            "file": rel,
            "model": model,
            "format": fmt,
            "size_bytes": path.stat().st_size,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        }
        entry.update({k: v for k, v in extra.items() if v is not None})
        self.files.append(entry)

    def _export_all(
        self,
        name: str,
        model: Any,
        example: Any,
        meta: dict[str, Any],
        eval_data: tuple[Any, Any] | None,
        quantize: bool,
        calibration: Any,
        int8: Sequence[str] = ("dynamic", "static"),
        aoti: bool = True,
    ) -> None:
        from fw import checkpoint
        from fw import export as fx

        acc = meta.get("metrics", {}).get("test_accuracy")
        common = {k: meta.get(k) for k in ("labels", "preprocessing", "task", "description")}
        jobs: list[tuple[str, str, Callable[..., Any], dict[str, Any]]] = [
            (f"{name}.onnx", "onnx", fx.onnx, {"opset_version": 14}),
            (f"{name}.ts.pt", "torchscript", fx.torchscript, {"method": "trace"}),
        ]
        if aoti:
            jobs.append((f"{name}.pt2", "aoti", fx.aoti, {}))
        else:
            self.skipped.append(
                {"model": name, "format": "aoti", "file": f"{name}.pt2", "reason": meta["skip_aoti"]}
            )
        if quantize:
            jobs.append((f"{name}.quant.pt", "quantized", fx.quantized, {}))
        else:
            self.skipped.append(
                {"model": name, "format": "quantized", "file": f"{name}.quant.pt", "reason": meta["skip"]}
            )
        for q in ("dynamic", "static"):
            rel = f"{name}.int8-{q}.onnx"
            if q not in int8:
                self.skipped.append(
                    {"model": name, "format": "onnx_int8", "file": rel, "reason": meta[f"skip_int8_{q}"]}
                )
                continue
            kw = {"quantization": q, "opset_version": 14}
            if q == "static":
                kw["calibration"] = calibration
            jobs.append((rel, "onnx_int8", fx.onnx_int8, kw))
        for rel, fmt, fn, kw in jobs:
            metrics = dict(meta.get("metrics") or {})
            if fmt == "quantized" and eval_data is not None:
                q_acc = _quantized_accuracy(model, *eval_data)
                metrics = {"test_accuracy": q_acc, "float_test_accuracy": acc}
            rep = fn(
                model,
                example,
                self.out / rel,
                name=name,
                version=meta.get("version", "1"),
                metrics=metrics or None,
                eval_data=eval_data,
                **common,
                **kw,
            )
            self.log(
                f"{name}: wrote {rel} ({rep.size_bytes / 1e6:.2f} MB) in {rep.seconds:.1f}s, "
                f"max |file - eager| {rep.max_abs_error:.2e}"
                + (
                    f", accuracy {rep.accuracy:.4f} (delta {rep.accuracy_delta:+.4f})"
                    if rep.accuracy is not None
                    else ""
                )
            )
            self._record(
                name,
                rel,
                fmt,
                test_accuracy=rep.accuracy,
                accuracy_delta=rep.accuracy_delta if fmt in ("quantized", "onnx_int8") else None,
                quantization=rep.quantization,
                max_abs_error=rep.max_abs_error,
                parity_atol=rep.atol,
                parity_rtol=rep.rtol,
            )
        rel = f"{name}.ckpt.pt"
        t = time.perf_counter()
        checkpoint.save(
            model,
            self.out / rel,
            example_input=example,
            calibration_input=calibration,
            **{k: v for k, v in meta.items() if not k.startswith("skip")},
        )
        self.log(f"{name}: wrote {rel} in {time.perf_counter() - t:.1f}s")
        self._record(name, rel, "checkpoint", test_accuracy=acc)

    # ------------------------------------------------------------------ steps

    def digits_mlp(self) -> None:
        import torch

        from fw import metadata
        from fw.models import DigitsMLP

        x, y, xt, yt, _ = self.digits()
        torch.manual_seed(SEED)
        model = DigitsMLP(hidden=256)
        self._train(model, x, y, epochs=30, lr=1e-3, tag="digits_mlp")
        acc = self._accuracy(model, xt, yt)
        self.log(f"digits_mlp: test accuracy {acc:.4f} on {len(xt)} held-out digits")
        self.trained["digits_mlp"] = model
        meta = {
            "name": "digits_mlp",
            "version": "1",
            "description": "MLP on scikit-learn's 8x8 digits (input: 64 pixels scaled to 0..1, white on black)",
            "task": "classification",
            "labels": DIGIT_LABELS,
            "preprocessing": metadata.image_preprocessing(
                8, 8, 1, scale=1 / 255, resize="nearest", flatten=True
            ),
            "metrics": {"test_accuracy": acc},
        }
        self._export_all("digits_mlp", model, xt[:8].clone(), meta, (xt, yt), True, _calibration(x))

    def digits_cnn(self) -> None:
        import torch

        from fw import metadata
        from fw.models import DigitsCNN

        x, y, xt, yt, _ = self.digits()
        x, xt = x.reshape(-1, 1, 8, 8), xt.reshape(-1, 1, 8, 8)
        torch.manual_seed(SEED)
        model = DigitsCNN()
        self._train(model, x, y, epochs=25, lr=2e-3, tag="digits_cnn")
        acc = self._accuracy(model, xt, yt)
        self.log(f"digits_cnn: test accuracy {acc:.4f} on {len(xt)} held-out digits")
        self.trained["digits_cnn"] = model
        meta = {
            "name": "digits_cnn",
            "version": "1",
            "description": "Small CNN on scikit-learn's 8x8 digits (input: 1x8x8 scaled to 0..1, white on black)",
            "task": "classification",
            "labels": DIGIT_LABELS,
            "preprocessing": metadata.image_preprocessing(8, 8, 1, scale=1 / 255, resize="nearest"),
            "metrics": {"test_accuracy": acc},
        }
        self._export_all("digits_cnn", model, xt[:8].clone(), meta, (xt, yt), True, _calibration(x))

    def textcls(self) -> None:
        import torch

        from fw.models import TextClassifier

        x, y = text_data(4000, seed=SEED)
        xt, yt = text_data(1000, seed=SEED + 1)
        torch.manual_seed(SEED)
        model = TextClassifier(vocab=TEXT_VOCAB, dim=32, hidden=64, classes=2)
        self._train(model, x, y, epochs=10, lr=5e-3, tag="textcls")
        acc = self._accuracy(model, xt, yt)
        self.log(f"textcls: test accuracy {acc:.4f} on {len(xt)} generated sequences")
        meta = {
            "name": "textcls",
            "version": "1",
            "description": (
                f"Embedding+LSTM classifier on generated int64 token sequences (length {TEXT_LEN}, vocab "
                f"{TEXT_VOCAB}); positive when tokens below {TEXT_VOCAB // 2} outnumber the rest"
            ),
            "task": "classification",
            "labels": TEXT_LABELS,
            "metrics": {"test_accuracy": acc},
        }
        self._export_all("textcls", model, xt[:8].clone(), meta, (xt, yt), True, _calibration(x))

    def resnet18(self) -> None:
        import torch

        from fw.models import ResNet18

        torch.manual_seed(SEED)
        model = ResNet18(num_classes=1000).eval()
        gen = torch.Generator().manual_seed(SEED)
        example = torch.randn(2, 3, 224, 224, generator=gen)
        meta = {
            "name": "resnet18",
            "version": "1",
            "description": "ResNet-18 with random (seeded) weights, for benchmarks; its predictions mean nothing",
            "task": "classification",
            "labels": [f"class_{i}" for i in range(1000)],
            # torchvision's ImageNet eval transform, which fw serve reproduces step by step
            "preprocessing": imagenet_eval_preprocessing(),
            "skip": QUANT_SKIP_RESNET,
            "skip_int8_dynamic": INT8_DYNAMIC_SKIP_RESNET,
            "skip_aoti": AOTI_SKIP_RESNET,
        }
        self.trained["resnet18"] = model
        # Random weights and no data set: calibrate on seeded random images (the example's distribution).
        calibration = torch.randn(RESNET_CALIBRATION_ROWS, 3, 224, 224, generator=gen)
        self._export_all(
            "resnet18", model, example, meta, None, False, calibration, int8=("static",), aoti=False
        )

    def resnet18_pt2(self) -> None:
        """resnet18.pt2 (AOTInductor) from resnet18.ckpt.pt, the model the resnet18 step wrote."""
        from fw import checkpoint
        from fw import export as fx

        ckpt = self.out / "resnet18.ckpt.pt"
        if not ckpt.exists():
            raise RuntimeError(f"{ckpt} is missing: run the resnet18 step first (python -m fw.reference)")
        ck = checkpoint.load(ckpt)
        keys = ("name", "version", "labels", "preprocessing", "task", "description")
        rep = fx.aoti(
            ck.model, ck.example_input, self.out / "resnet18.pt2", **{k: ck.meta.get(k) for k in keys}
        )
        self.log(
            f"resnet18: wrote resnet18.pt2 ({rep.size_bytes / 1e6:.2f} MB) in {rep.seconds:.1f}s, "
            f"max |file - eager| {rep.max_abs_error:.2e}"
        )
        self._record(
            "resnet18",
            "resnet18.pt2",
            "aoti",
            max_abs_error=rep.max_abs_error,
            parity_atol=rep.atol,
            parity_rtol=rep.rtol,
        )

    def samples(self) -> None:
        """Real test-set digits as 32x32 PNGs (one per class) and one 224x224 RGB JPEG."""
        import numpy as np
        import torch
        from PIL import Image

        from fw import checkpoint

        d = self.out / "samples"
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("digit_*.png"):
            old.unlink()
        _, _, xt, yt, images = self.digits()
        models = {}
        for name in ("digits_mlp", "digits_cnn"):
            if name in self.trained:
                models[name] = self.trained[name]
            elif (self.out / f"{name}.ckpt.pt").exists():
                models[name] = checkpoint.load(self.out / f"{name}.ckpt.pt").model
        with torch.no_grad():
            preds = {
                "digits_mlp": models["digits_mlp"](xt).argmax(-1) if "digits_mlp" in models else None,
                "digits_cnn": models["digits_cnn"](xt.reshape(-1, 1, 8, 8)).argmax(-1)
                if "digits_cnn" in models
                else None,
            }
        self.sample_entries = []
        for label in range(10):
            ok = [
                i
                for i in range(len(yt))
                if int(yt[i]) == label and all(p is None or int(p[i]) == label for p in preds.values())
            ]
            i = ok[0] if ok else int((yt == label).nonzero()[0])
            pixels = np.round(images[i].astype(np.float64) * 255.0 / 16.0).astype(np.uint8)
            img = Image.fromarray(pixels, mode="L").resize((32, 32), Image.Resampling.NEAREST)
            rel = f"samples/digit_{label}_{i}.png"
            img.save(self.out / rel, optimize=True)
            self.sample_entries.append(
                {
                    "file": rel,
                    "label": str(label),
                    "test_index": i,
                    "predictions": {k: str(int(p[i])) for k, p in preds.items() if p is not None},
                    "note": "8x8 digit (0..16) * 255/16, white on black, upscaled 4x nearest; resizing back to 8x8 "
                    "with nearest (or half-pixel bilinear) gives the training input exactly",
                }
            )
        self.log(f"samples: wrote {len(self.sample_entries)} digit PNGs (32x32 grayscale) to {d}")
        rel = "samples/rgb_224.jpg"
        jpeg = synthetic_rgb(224, 224)
        jpeg.save(self.out / rel, quality=95)
        entry: dict[str, Any] = {
            "file": rel,
            "note": "synthetic 224x224 RGB picture for resnet18 (random weights)",
        }
        model = self.trained.get("resnet18")
        if model is None and (self.out / "resnet18.ckpt.pt").exists():
            model = checkpoint.load(self.out / "resnet18.ckpt.pt").model
        if model is not None:
            from fw import transforms

            x = transforms.preprocess((self.out / rel).read_bytes(), imagenet_eval_preprocessing()["image"])
            with torch.no_grad():
                logits = model(x.unsqueeze(0))[0]
            top = torch.topk(logits, 5)
            entry["predictions"] = {
                "resnet18": {
                    "top5": [f"class_{int(i)}" for i in top.indices],
                    "top5_logits": [round(float(v), 4) for v in top.values],
                    "note": "as decoded by Pillow; another JPEG decoder may shift logits slightly",
                }
            }
        self.sample_entries.append(entry)
        self.log(f"samples: wrote {rel}")

    def bad(self) -> None:
        """Files the engine must refuse or handle without fw.json."""
        import io

        import onnx
        import torch

        from fw import metadata
        from fw.export import quiet_warnings
        from fw.models import DigitsMLP

        d = self.out / "bad"
        d.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(SEED)
        model = DigitsMLP(hidden=32).eval()
        x = torch.rand(4, 64, generator=torch.Generator().manual_seed(SEED))
        self.bad_entries = []

        def note(rel: str, expect: str) -> None:
            self.bad_entries.append(
                {"file": rel, "size_bytes": (self.out / rel).stat().st_size, "expect": expect}
            )

        torch.save(model.state_dict(), d / "state_dict.pt")
        note("bad/state_dict.pt", "refused: torch.save of a state_dict (zip with data.pkl), never unpickled")
        torch.save(model, d / "pickled_model.pt")
        note("bad/pickled_model.pt", "refused: torch.save of a whole nn.Module, never unpickled")
        torch.save(model.state_dict(), d / "legacy_pickle.pt", _use_new_zipfile_serialization=False)
        note("bad/legacy_pickle.pt", "refused: legacy (non-zip) torch.save pickle stream, never unpickled")

        def plain_onnx() -> bytes:
            buf = io.BytesIO()
            with quiet_warnings():
                torch.onnx.export(
                    model,
                    (x,),
                    buf,
                    dynamo=False,
                    opset_version=14,
                    input_names=["input"],
                    output_names=["logits"],
                    dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                )
            return buf.getvalue()

        raw = plain_onnx()
        (d / "plain.onnx").write_bytes(raw)
        note(
            "bad/plain.onnx",
            "loads without fw.json: input 'input' float32 [batch, 64], output 'logits' [batch, 10]",
        )
        with quiet_warnings():
            torch.jit.save(torch.jit.trace(model, (x,), check_trace=False), str(d / "plain.ts.pt"))
        note("bad/plain.ts.pt", "loads without fw.json (TorchScript; names from the schema, no labels)")

        proto = onnx.load_model_from_string(raw)
        gen = torch.Generator().manual_seed(SEED + 1)
        doc = metadata.build(
            name="shape_mismatch",
            format="onnx",
            inputs=[metadata.io_spec("input", "float32", [-1, 32])],
            outputs=[metadata.io_spec("logits", "float32", [-1, 10])],
            task="classification",
            labels=DIGIT_LABELS,
            export={"method": "trace", "opset_version": 14, "quantization": None, "dynamic_batch": True},
            test_vector={
                "inputs": {"input": metadata.encode_tensor(torch.rand(4, 32, generator=gen))},
                "outputs": {"logits": metadata.encode_tensor(torch.zeros(4, 10))},
                "atol": 1e-4,
                "rtol": 1e-3,
            },
            description="fw.json declares input [-1, 32] but the graph takes [batch, 64]",
        )
        entry = proto.metadata_props.add()
        entry.key, entry.value = metadata.METADATA_KEY, metadata.dumps(doc)
        onnx.save_model(proto, str(d / "shape_mismatch.onnx"))
        note(
            "bad/shape_mismatch.onnx",
            "refused at load: fw.json input 'input' shape [-1, 32] disagrees with the graph's [batch, 64] "
            "(fw.json is self-consistent, so only a graph check catches it)",
        )
        self.log(f"bad: wrote {len(self.bad_entries)} fixtures to {d}")


def _calibration(x_train: Any) -> Any:
    """The first DEFAULT_CALIBRATION_ROWS rows of a (shuffled) training set, for static int8 calibration."""
    from fw.export import DEFAULT_CALIBRATION_ROWS

    return x_train[:DEFAULT_CALIBRATION_ROWS].clone()


def _quantized_accuracy(model: Any, x: Any, y: Any) -> float:
    import copy

    import torch

    from fw.export import quiet_warnings

    with quiet_warnings():
        from torch.ao.quantization import quantize_dynamic

        q = quantize_dynamic(copy.deepcopy(model).eval(), {torch.nn.Linear, torch.nn.LSTM}, dtype=torch.qint8)
    with torch.no_grad():
        return round(float((q(x).argmax(-1) == y).double().mean()), 6)


def text_data(n: int, seed: int) -> tuple[Any, Any]:
    """Token sequences; label 1 ("positive") when tokens below vocab/2 outnumber the others."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    p = torch.rand(n, 1, generator=gen)  # per-sequence share of "positive" tokens
    positive = torch.rand(n, TEXT_LEN, generator=gen) < p
    half = TEXT_VOCAB // 2
    low = torch.randint(0, half, (n, TEXT_LEN), generator=gen)
    high = torch.randint(half, TEXT_VOCAB, (n, TEXT_LEN), generator=gen)
    tokens = torch.where(positive, low, high)
    labels = (positive.sum(1) > TEXT_LEN // 2).long()
    return tokens, labels


def imagenet_eval_preprocessing() -> dict[str, Any]:
    """preprocessing for ImageNet classifiers: torchvision's standard eval transform (Resize(256),
    CenterCrop(224), ToTensor, Normalize(ImageNet mean and std)) as fw.json's steps."""
    import torchvision.transforms as T

    from fw import transforms

    return transforms.image_preprocessing_from(
        T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    )


def synthetic_rgb(width: int, height: int) -> Any:
    """A deterministic colourful picture: gradients, a disc and a square."""
    import numpy as np
    from PIL import Image, ImageDraw

    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    rgb = np.stack([xx / width * 255, yy / height * 255, (1 - xx / width) * 180 + 40], axis=-1)
    img = Image.fromarray(rgb.clip(0, 255).astype(np.uint8), mode="RGB")
    draw = ImageDraw.Draw(img)
    draw.ellipse((40, 50, 140, 150), fill=(240, 200, 30))
    draw.rectangle((120, 110, 200, 190), fill=(20, 90, 200))
    return img


def _merge_manifest(path: Path, b: Builder, ran: Sequence[str]) -> dict[str, Any]:
    import torch

    old: dict[str, Any] = {}
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except ValueError:
            old = {}
    ran_models = {s for s in ran if s not in ("samples", "bad", "resnet18_pt2")}
    ran_files = {"resnet18.pt2"} if "resnet18_pt2" in ran else set()

    def replaced(entry: dict[str, Any]) -> bool:
        return entry.get("model") in ran_models or entry.get("file") in ran_files

    files = [f for f in old.get("files", []) if not replaced(f)] + b.files
    skipped = [s for s in old.get("skipped", []) if not replaced(s)] + b.skipped
    order = {s: i for i, s in enumerate(STEPS)}
    files.sort(key=lambda f: (order.get(f.get("model"), 99), f["file"]))
    return {
        "generated_by": "python -m fw.reference",
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "torch_version": torch.__version__,
        "files": files,
        "skipped": skipped,
        "samples": b.sample_entries if "samples" in ran else old.get("samples", []),
        "bad": b.bad_entries if "bad" in ran else old.get("bad", []),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fw.reference", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="build/models", help="output folder (default build/models)")
    p.add_argument(
        "--only",
        nargs="+",
        choices=STEPS,
        metavar="NAME",
        help=f"steps to run: {', '.join(STEPS)} (default: all but resnet18_pt2)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: available CPUs)")
    args = p.parse_args(argv)

    log = _Log()
    import torch

    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    torch.manual_seed(SEED)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = [s for s in STEPS if (s in args.only if args.only else s in DEFAULT_STEPS)]
    log(f"fw.reference: torch {torch.__version__}, {threads} threads, steps {', '.join(steps)} -> {out}")
    b = Builder(out, log)
    try:
        for step in steps:
            t = time.perf_counter()
            getattr(b, step)()
            log(f"{step}: done in {time.perf_counter() - t:.1f}s")
    except Exception as e:
        print(f"fw.reference: error in step {step}: {e}", file=sys.stderr)
        return 1
    manifest = _merge_manifest(out / "manifest.json", b, steps)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    log(f"wrote {out / 'manifest.json'} ({len(manifest['files'])} files, {len(manifest['skipped'])} skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
