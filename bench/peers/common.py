"""Shared model code for the bench peers: onnxruntime sessions, the same
request/response shapes as `fw serve`, and PIL preprocessing for images.

Environment: FW_PEER_MODEL (model file), FW_PEER_THREADS (intra-op threads,
0 or unset = onnxruntime's default, the physical cores), FW_BENCH_ORT_SPIN
("0": ONNX Runtime's intra- and inter-op threads do not busy-wait between
calls, as `fw serve` runs them by default; "1": they spin, onnxruntime's own
default; unset: nothing is set, so onnxruntime's default, spinning on).
bench/serve.sh sets both to fw's values for the headline rows. The settings
in force are printed to stderr once per session, so every peer's log says
what it ran with."""

import io
import os
import sys

import numpy as np
import onnxruntime as ort
from PIL import Image

# ImageNet normalisation, as resnet18.onnx's preprocessing steps.
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


def session(path=None):
    path = path or os.environ["FW_PEER_MODEL"]
    so = ort.SessionOptions()
    n = int(os.environ.get("FW_PEER_THREADS", "0") or "0")
    if n:
        so.intra_op_num_threads = n
    spin = os.environ.get("FW_BENCH_ORT_SPIN", "")
    if spin:
        if spin not in ("0", "1"):
            raise ValueError(f"FW_BENCH_ORT_SPIN must be 0 or 1, not {spin!r}")
        # the same two keys engine/ort.go sets (onnxruntime's default for both is "1")
        for key in (
            "session.intra_op.allow_spinning",
            "session.inter_op.allow_spinning",
        ):
            so.add_session_config_entry(key, spin)
    s = ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
    print(
        f"bench peer onnxruntime {ort.__version__}: {os.path.basename(path)}, "
        f"intra_op_num_threads={n or 'default'}, allow_spinning={spin or 'default (1)'}",
        file=sys.stderr,
        flush=True,
    )
    return s, s.get_inputs()[0].name


def rows(payload):
    """{"data": [[64 floats], ...]} -> float32 array (n, 64)."""
    return np.asarray(payload["data"], dtype=np.float32)


def rows_response(logits):
    return {
        "predictions": logits.tolist(),
        "labels": [str(int(i)) for i in logits.argmax(axis=1)],
    }


def image_tensor(data: bytes, size=224, resize=256):
    """JPEG/PNG bytes -> float32 (3, size, size): torchvision's ImageNet eval transform
    (resnet18.onnx's preprocessing steps) in PIL and numpy: decode, RGB, shorter side to
    `resize` (bilinear, Pillow antialiases), center crop `size`, scale, normalise."""
    img = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = img.size
    if w <= h:
        nw, nh = resize, int(resize * h / w)
    else:
        nw, nh = int(resize * w / h), resize
    if (nw, nh) != (w, h):
        img = img.resize((nw, nh), Image.BILINEAR)
    # Python's round: half to even, as torchvision's center_crop
    top, left = round((nh - size) / 2.0), round((nw - size) / 2.0)
    img = img.crop((left, top, left + size, top + size))
    x = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return (x - MEAN) / STD


def topk_response(logits, k=5):
    out = []
    for row in logits:
        e = np.exp(row - row.max())
        p = e / e.sum()
        idx = np.argsort(-p)[:k]
        out.append(
            {
                "top_k": [
                    {"label": f"class_{i}", "index": int(i), "score": float(p[i])}
                    for i in idx
                ]
            }
        )
    return {"predictions": out}
