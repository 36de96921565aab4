"""Shared model code for the bench peers: onnxruntime sessions, the same
request/response shapes as `fw serve`, and PIL preprocessing for images.

Environment: FW_PEER_MODEL (model file), FW_PEER_THREADS (intra-op threads,
0 = onnxruntime's default)."""

import io
import os

import numpy as np
import onnxruntime as ort
from PIL import Image

# ImageNet normalisation, as resnet18.onnx's preprocessing metadata.
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


def session(path=None):
    path = path or os.environ["FW_PEER_MODEL"]
    so = ort.SessionOptions()
    n = int(os.environ.get("FW_PEER_THREADS", "0"))
    if n:
        so.intra_op_num_threads = n
    s = ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
    return s, s.get_inputs()[0].name


def rows(payload):
    """{"data": [[64 floats], ...]} -> float32 array (n, 64)."""
    return np.asarray(payload["data"], dtype=np.float32)


def rows_response(logits):
    return {
        "predictions": logits.tolist(),
        "labels": [str(int(i)) for i in logits.argmax(axis=1)],
    }


def image_tensor(data: bytes, size=224):
    """JPEG/PNG bytes -> float32 (3, size, size): decode, RGB, bilinear resize, normalise."""
    img = (
        Image.open(io.BytesIO(data)).convert("RGB").resize((size, size), Image.BILINEAR)
    )
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
