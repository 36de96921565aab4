"""Regenerate golden.json: what Pillow and torchvision make of small pictures, per pixel.

    $FW_VENV/bin/python imageprep/testdata/golden.py > imageprep/testdata/golden.json

Each case names a source picture (PNG, base64, in sources), a preprocessing.image.steps list ending in
to_tensor / to_dtype, and the 8-bit picture torchvision hands that last step (HWC, row-major),
so TestStepsGolden checks fw's resampling, cropping and colour conversion bit for bit
without Python. Pillow 12.3, torch 2.13, torchvision 0.28 (x86-64 with AVX2) made the file.
"""

import base64
import io
import json

import numpy as np
import torch
from fw import transforms
from PIL import Image
from torchvision.transforms import v2

rng = np.random.default_rng(7)


def picture(w, h, mode):
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack(
        [x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x * 37 + y * 91) % 256],
        -1,
    )
    a = np.clip(a + rng.integers(-40, 40, a.shape), 0, 255).astype(np.uint8)
    im = Image.fromarray(a, "RGB")
    if mode == "L":
        im = im.convert("L")
    elif mode == "RGBA":
        alpha = rng.integers(0, 256, (h, w), dtype=np.uint8)
        im = Image.fromarray(np.dstack([a, alpha]), "RGBA")
    elif mode == "P":
        im = im.quantize(colors=16)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def resize(size, interp, aa, max_size=None):
    s = {"op": "resize", "size": size, "interpolation": interp, "antialias": aa}
    if max_size is not None:
        s["max_size"] = max_size
    return s


CONVERT = {"op": "convert", "mode": "RGB"}
TO_TENSOR = {"op": "to_tensor"}
TO_IMAGE = {"op": "to_image"}
TO_DTYPE = {"op": "to_dtype", "dtype": "float32", "scale": True}

recipes = {}
for interp in ("nearest", "bilinear", "bicubic", "box", "hamming", "lanczos"):
    aa = interp != "nearest"
    recipes[f"pil {interp} down"] = [CONVERT, resize([7, 5], interp, aa), TO_TENSOR]
    recipes[f"pil {interp} up"] = [CONVERT, resize([21, 26], interp, aa), TO_TENSOR]
    recipes[f"pil {interp} short side + crop"] = [
        CONVERT,
        resize([12], interp, aa),
        {"op": "center_crop", "size": [9, 10]},
        TO_TENSOR,
    ]
for interp in ("nearest", "nearest-exact", "bilinear", "bicubic"):
    for aa in (True, False) if not interp.startswith("nearest") else (False,):
        recipes[f"torch {interp} aa={aa} down"] = [
            CONVERT,
            TO_IMAGE,
            resize([7, 5], interp, aa),
            TO_DTYPE,
        ]
        recipes[f"torch {interp} aa={aa} up"] = [
            CONVERT,
            TO_IMAGE,
            resize([21, 26], interp, aa),
            TO_DTYPE,
        ]
recipes["crop with padding"] = [
    CONVERT,
    {"op": "center_crop", "size": [30, 8]},
    TO_TENSOR,
]
recipes["crop odd, half to even"] = [
    CONVERT,
    {"op": "center_crop", "size": [4, 6]},
    TO_TENSOR,
]
recipes["max_size"] = [
    CONVERT,
    resize([10], "bilinear", True, 14),
    {"op": "center_crop", "size": [8, 8]},
    TO_TENSOR,
]
recipes["pil grayscale 1"] = [
    CONVERT,
    {"op": "grayscale", "channels": 1},
    resize([6, 6], "bicubic", True),
    TO_TENSOR,
]
recipes["pil grayscale 3 after resize"] = [
    CONVERT,
    resize([6, 6], "bilinear", True),
    {"op": "grayscale", "channels": 3},
    TO_TENSOR,
]
recipes["torch grayscale 1"] = [
    CONVERT,
    TO_IMAGE,
    {"op": "grayscale", "channels": 1},
    {"op": "center_crop", "size": [8, 8]},
    TO_DTYPE,
]
recipes["torch grayscale 3, crop"] = [
    CONVERT,
    TO_IMAGE,
    {"op": "center_crop", "size": [20, 3]},
    {"op": "grayscale", "channels": 3},
    TO_DTYPE,
]
recipes["convert L"] = [
    {"op": "convert", "mode": "L"},
    resize([5], "bilinear", True),
    {"op": "center_crop", "size": [5, 5]},
    TO_TENSOR,
]

sources = {
    "rgb 23x17": picture(23, 17, "RGB"),
    "rgb 9x31": picture(9, 31, "RGB"),
    "gray 16x16": picture(16, 16, "L"),
    "rgba 13x11": picture(13, 11, "RGBA"),
    "palette 15x12": picture(15, 12, "P"),
}

cases = []
for sname, png in sources.items():
    for rname, steps in recipes.items():
        image = {"steps": steps}
        c, h, w = transforms.check_steps(steps)
        t = transforms.to_torchvision({"steps": steps})
        # Everything but the float conversion: the 8-bit picture fw must reproduce exactly.
        body = v2.Compose(t.transforms[:-1])
        im = transforms.load(png, steps[0]["mode"])
        out = body(im)
        arr = (
            np.asarray(out)
            if isinstance(out, Image.Image)
            else out.permute(1, 2, 0).numpy()
        )
        if arr.ndim == 2:
            arr = arr[..., None]
        assert arr.shape == (h, w, c), (sname, rname, arr.shape)
        cases.append(
            {
                "source": sname,
                "name": rname,
                "recipe": {
                    "height": h,
                    "width": w,
                    "channels": c,
                    "layout": "NCHW",
                    "steps": steps,
                },
                "want_hwc": base64.b64encode(arr.astype(np.uint8).tobytes()).decode(),
            }
        )
srcs = {k: base64.b64encode(v).decode() for k, v in sources.items()}
print(
    json.dumps(
        {"torch": torch.__version__, "sources": srcs, "cases": cases},
        separators=(",", ":"),
    )
)
