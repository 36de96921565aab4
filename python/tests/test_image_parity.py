"""/predict/image against the same pipeline in PyTorch and Pillow, on photo-like images.

fw's image path (docs/model-format.md, preprocessing.image) has two forms. The simple form
decodes, converts to RGB or luminance, resizes with PyTorch's ``F.interpolate`` (bilinear,
``align_corners=False``, no antialiasing) or ``mode="nearest"``, then scales and normalises.
The steps form is the model's torchvision eval transform (Resize, CenterCrop, Grayscale,
ToTensor / ToImage + ToDtype, Normalize), which fw reproduces step by step: Pillow's
resampling on PIL images, PyTorch's uint8 kernels on uint8 tensors. Here both run in Pillow
and torchvision on generated photo-like pictures (smooth gradients, texture, edges and noise)
of several sizes and aspect ratios (upscaled and downscaled, odd sizes), PNG and JPEG, RGB,
grayscale and RGBA:

* per pixel: an identity model (its output is its input, flattened) served by the real
  ``fw serve`` with ``?raw=true`` gives back exactly the tensor fw fed the model;
* per score: the real ResNet-18 reference model (exported with torchvision's ImageNet eval
  transform) through ``/predict/image?scores=true`` against Pillow + the transform +
  onnxruntime and a softmax.
"""

from __future__ import annotations

import io
import json

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from openapi_check import FW_BIN, MODELS, REPO, FwProcess, OpenAPIDoc, launch
from PIL import Image

import fw.export
import fw.metadata
import fw.transforms

DOC = OpenAPIDoc(REPO / "httpapi" / "openapi.json", "urn:fw:openapi")
RESNET = MODELS / "resnet18.onnx"

# (width, height) of the source pictures: downscaled, upscaled, non-square either way, odd.
SIZES = [(640, 480), (480, 640), (37, 53), (301, 97), (224, 224), (13, 11)]


def photo(w: int, h: int, seed: int) -> np.ndarray:
    """A photo-like RGB picture: gradients, a texture, hard edges and sensor-like noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    u, v = x / max(w - 1, 1), y / max(h - 1, 1)
    r = 255 * (0.6 * u + 0.3 * np.sin(6 * v + seed))
    g = 255 * (0.5 * v + 0.25 * np.cos(9 * u * v + seed))
    b = 255 * (0.4 + 0.3 * np.sin(17 * u) * np.cos(13 * v))
    img = np.stack([r, g, b], axis=-1)
    img[(x - w / 3) ** 2 + (y - h / 2) ** 2 < (min(w, h) / 4) ** 2] = [230, 40, 30]  # a disc
    img[:, int(w * 0.7) : int(w * 0.7) + max(1, w // 20)] = [20, 20, 20]  # a dark bar
    img += rng.normal(0, 6, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def encode(a: np.ndarray, fmt: str, mode: str) -> bytes:
    im = Image.fromarray(a, "RGB")
    if mode == "L":
        im = im.convert("L")
    elif mode == "RGBA":
        alpha = np.full(a.shape[:2], 255, np.uint8)
        alpha[: a.shape[0] // 3] = 128  # a partly transparent band
        im = Image.fromarray(np.dstack([a, alpha]), "RGBA")
    buf = io.BytesIO()
    im.save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def reference(data: bytes, recipe: dict) -> torch.Tensor:
    """The documented pipeline in Pillow and PyTorch: [C, H, W] float32."""
    im = Image.open(io.BytesIO(data))
    im.load()
    if im.mode == "RGBA":  # composited over black, as fw documents (Go's premultiplied alpha)
        a = np.asarray(im, np.float64)
        rgb = np.rint(a[..., :3] * a[..., 3:4] / 255.0).astype(np.uint8)
        im = Image.fromarray(rgb, "RGB")
    if recipe["channels"] == 1:
        arr = np.asarray(im.convert("L"), np.float32)[None]  # Pillow's ITU-R 601-2 luma, as fw's
    else:
        arr = np.asarray(im.convert("RGB"), np.float32).transpose(2, 0, 1)
    x = torch.from_numpy(np.ascontiguousarray(arr))[None]
    size = (recipe["height"], recipe["width"])
    if tuple(x.shape[2:]) != size:
        if recipe.get("resize", "bilinear") == "nearest":
            x = F.interpolate(x, size=size, mode="nearest")
        else:
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=False)
    x = x[0] * recipe.get("scale", 1 / 255)
    mean = torch.tensor(recipe.get("mean") or [0.0] * recipe["channels"]).view(-1, 1, 1)
    std = torch.tensor(recipe.get("std") or [1.0] * recipe["channels"]).view(-1, 1, 1)
    return ((x - mean) / std).float()


class Identity(torch.nn.Module):
    """Output = input, flattened: what fw serves back with ?raw=true is the preprocessed image."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) * 1.0


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """fw serve on identity models, one per recipe: {name: (server, recipe)}."""
    if not FW_BIN.exists():
        pytest.skip(f"{FW_BIN} is missing: build it with `go build -o bin/fw ./cmd/fw` (or set FW_BIN)")
    recipes = {
        "rgb_imagenet": fw.metadata.image_preprocessing(
            32, 32, 3, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]
        ),
        "rgb_wide_nearest": fw.metadata.image_preprocessing(24, 40, 3, resize="nearest"),
        "gray_tall": fw.metadata.image_preprocessing(40, 24, 1, mean=[0.5], std=[0.25]),
    }
    out, started = {}, []
    d = tmp_path_factory.mktemp("identity")
    for name, pre in recipes.items():
        img = pre["image"]
        path = d / f"{name}.onnx"
        example = torch.rand(2, img["channels"], img["height"], img["width"])
        fw.export.onnx(Identity().eval(), example, path, preprocessing=pre)
        s = FwProcess(*launch(["serve", "--model", str(path), "--host", "127.0.0.1", "--port", "0"]), DOC)
        started.append(s)
        out[name] = (s, img)
    yield out
    for s in started:
        s.stop()


def fw_tensor(server: FwProcess, data: bytes, ctype: str) -> np.ndarray:
    r = server.call("POST", "/predict/image?raw=true", data, {"Content-Type": ctype}, expect=200)
    return np.asarray(r.json()["predictions"][0], np.float32)


CASES = [
    (w, h, fmt, mode)
    for (w, h) in SIZES
    for fmt, mode in [("PNG", "RGB"), ("PNG", "L"), ("PNG", "RGBA"), ("JPEG", "RGB")]
]


@pytest.mark.parametrize("recipe", ["rgb_imagenet", "rgb_wide_nearest", "gray_tall"])
def test_preprocessed_tensor_matches_pytorch_per_pixel(served, recipe):
    server, img = served[recipe]
    worst: dict[str, float] = {}
    for i, (w, h, fmt, mode) in enumerate(CASES):
        data = encode(photo(w, h, i), fmt, mode)
        got = fw_tensor(server, data, "image/png" if fmt == "PNG" else "image/jpeg")
        want = reference(data, img).numpy().ravel()
        assert got.shape == want.shape, (w, h, fmt, mode)
        # In units of one 8-bit level after normalisation (std scales it).
        level = (img.get("scale", 1 / 255)) / min(img.get("std") or [1.0])
        err = float(np.abs(got - want).max())
        key = f"{fmt} {mode}"
        worst[key] = max(worst.get(key, 0.0), err / level)
        if fmt == "PNG":
            # Same decoded pixels: only float32 rounding of the resize and normalisation.
            assert err <= 1e-5 + 1e-6 * float(np.abs(want).max()), f"{w}x{h} {key}: max abs error {err}"
        else:
            # fw upsamples chroma and converts colour as libjpeg does; what is left is the
            # inverse DCT (Go's and libjpeg-turbo's integer IDCTs round differently): at most
            # 2 levels on a few pixels (2.26 seen after a bilinear resize), a mean of about
            # 0.03-0.1 level. (Before fw matched libjpeg's chroma upsampling: up to 60 levels
            # at colour edges, a mean of up to 12.)
            assert err <= 2.5 * level, f"{w}x{h} {key}: max error {err / level:.2f} levels"
            assert float(np.abs(got - want).mean()) <= 0.15 * level
    print(
        f"\n{recipe}: worst error in 8-bit levels: {json.dumps({k: round(v, 4) for k, v in worst.items()})}"
    )


def test_resnet18_scores_match_pytorch_pipeline_and_onnxruntime():
    """The real ResNet-18 file: fw serve's scores against Pillow + torchvision's transform +
    onnxruntime, on PNG (the same decoded pixels: within 1e-4, measured ~1e-7) and JPEG (the
    inverse DCT differs; bound below)."""
    if not FW_BIN.exists() or not RESNET.exists():
        pytest.skip(f"{FW_BIN} or {RESNET} is missing (make build models)")
    recipe = fw.metadata.read(RESNET)["preprocessing"]["image"]
    assert "steps" in recipe, "resnet18.onnx should carry torchvision's eval transform (make models)"
    sess = ort.InferenceSession(str(RESNET), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    server = FwProcess(*launch(["serve", "--model", str(RESNET), "--host", "127.0.0.1", "--port", "0"]), DOC)
    try:
        # /model shows the steps (and validates against httpapi/openapi.json's ImageStep)
        info = server.call("GET", "/model", expect=200).json()
        assert info["preprocessing"]["image"]["steps"] == recipe["steps"]
        worst = {"PNG": 0.0, "JPEG": 0.0}
        for i, (w, h) in enumerate(SIZES):
            for fmt in ("PNG", "JPEG"):
                data = encode(photo(w, h, 100 + i), fmt, "RGB")
                ctype = "image/png" if fmt == "PNG" else "image/jpeg"
                r = server.call(
                    "POST", "/predict/image?scores=true&top_k=5", data, {"Content-Type": ctype}, expect=200
                )
                got = np.asarray(r.json()["predictions"][0]["scores"], np.float64)
                x = fw.transforms.preprocess(data, recipe)[None].numpy()
                logits = sess.run(None, {name: x})[0][0].astype(np.float64)
                want = np.exp(logits - logits.max())
                want /= want.sum()
                err = float(np.abs(got - want).max())
                worst[fmt] = max(worst[fmt], err)
                # PNG: the same pixels, so only float32 rounding in the engine. JPEG: Go's and
                # libjpeg-turbo's inverse DCTs round differently (a level or two on a few pixels).
                assert err <= (1e-4 if fmt == "PNG" else 5e-4), f"{w}x{h} {fmt}: scores differ by {err}"
                if fmt == "PNG":
                    top = [p["index"] for p in r.json()["predictions"][0]["top_k"]]
                    assert top[0] == int(np.argmax(want)), (
                        f"{w}x{h}: top-1 {top[0]} vs {int(np.argmax(want))}"
                    )
        print(f"\nresnet18: largest score difference {json.dumps({k: f'{v:.2e}' for k, v in worst.items()})}")
    finally:
        server.stop()


# ----------------------------------------------------------------------------- the steps form

IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def eval_transforms() -> dict:
    """torchvision eval transforms of every kind fw reproduces (small outputs keep answers short)."""
    import torchvision.transforms as T
    import torchvision.transforms.v2 as v2

    mode = T.InterpolationMode
    return {
        # torchvision's ImageNet recipe, scaled down: Resize(shorter side) on the PIL image.
        "v1_imagenet": T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(), T.Normalize(*IMAGENET)]),
        "v1_bicubic_max_size": T.Compose(
            [T.Resize(30, interpolation=mode.BICUBIC, max_size=45), T.CenterCrop((28, 40)), T.ToTensor()]
        ),
        "v1_gray_lanczos": T.Compose(
            [
                T.Grayscale(),
                T.Resize((24, 36), interpolation=mode.LANCZOS),
                T.ToTensor(),
                T.Normalize([0.5], [0.25]),
            ]
        ),
        # Resize to 20 then crop 48: the crop pads with zeros where the picture is smaller.
        "v1_nearest_pad": T.Compose(
            [T.Resize(20, interpolation=mode.NEAREST), T.CenterCrop(48), T.ToTensor()]
        ),
        # v2 after ToImage: PyTorch's uint8 kernels, not Pillow's.
        "v2_uint8_imagenet": v2.Compose(
            [
                v2.ToImage(),
                v2.Resize(36, antialias=True),
                v2.CenterCrop(32),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(*IMAGENET),
            ]
        ),
        "v2_uint8_gray_bicubic": v2.Compose(
            [
                v2.ToImage(),
                v2.Grayscale(3),
                v2.Resize([20, 30], interpolation=mode.BICUBIC, antialias=False),
                v2.ToDtype(torch.float32, scale=True),
            ]
        ),
        "v2_pil_box": v2.Compose(
            [v2.Resize((26, 22), interpolation=mode.BOX), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
        ),
    }


@pytest.fixture(scope="module")
def served_steps(tmp_path_factory):
    """fw serve on identity models exported with a torchvision transform: {name: (server, transform)}."""
    if not FW_BIN.exists():
        pytest.skip(f"{FW_BIN} is missing: build it with `go build -o bin/fw ./cmd/fw` (or set FW_BIN)")
    out, started = {}, []
    d = tmp_path_factory.mktemp("identity_steps")
    try:
        for name, transform in eval_transforms().items():
            pre = fw.transforms.image_preprocessing_from(transform)["image"]
            path = d / f"{name}.onnx"
            example = torch.rand(2, pre["channels"], pre["height"], pre["width"])
            fw.export.onnx(Identity().eval(), example, path, preprocessing=transform)
            assert fw.metadata.read(path)["preprocessing"]["image"]["steps"] == pre["steps"]
            s = FwProcess(*launch(["serve", "--model", str(path), "--host", "127.0.0.1", "--port", "0"]), DOC)
            started.append(s)
            out[name] = (s, transform)
        yield out
    finally:
        for s in started:
            s.stop()


@pytest.mark.parametrize("name", list(eval_transforms()))
def test_steps_tensor_matches_torchvision_per_pixel(served_steps, name):
    """fw's tensor against the user's pipeline (``Image.open(f).convert("RGB")`` + the transform):
    PNG equal to 1e-5 (measured: 0, bit for bit, resampling included); JPEG within the decoders'
    difference (Go's inverse DCT against libjpeg-turbo's), at most 3 levels on a few values."""
    server, transform = served_steps[name]
    worst: dict[str, float] = {}
    std = min(
        [v for t in getattr(transform, "transforms", []) if type(t).__name__ == "Normalize" for v in t.std]
        or [1.0]
    )
    level = 1 / 255 / std  # one 8-bit level after normalisation
    for i, (w, h, fmt, mode) in enumerate(CASES):
        data = encode(photo(w, h, i), fmt, mode)
        got = fw_tensor(server, data, "image/png" if fmt == "PNG" else "image/jpeg")
        want = transform(fw.transforms.load(data)).float().numpy().ravel()
        assert got.shape == want.shape, (w, h, fmt, mode)
        err = float(np.abs(got - want).max())
        key = f"{fmt} {mode}"
        worst[key] = max(worst.get(key, 0.0), err / level)
        if fmt == "PNG":
            assert err <= 1e-5, f"{w}x{h} {key}: max abs error {err}"
        else:
            assert err <= 3.5 * level, f"{w}x{h} {key}: max error {err / level:.2f} levels"
            assert float(np.abs(got - want).mean()) <= 0.15 * level
    print(f"\n{name}: worst error in 8-bit levels: {json.dumps({k: round(v, 4) for k, v in worst.items()})}")


def test_steps_other_picture_types(served_steps):
    """Palette PNGs take the palette's colour and 16-bit grayscale PNGs clip to 255, as Pillow's
    convert("RGB") does (what torchvision's loader hands the transform)."""
    from PIL import Image

    server, transform = served_steps["v1_imagenet"]
    a = photo(57, 43, 3)
    pictures = {
        "palette": Image.fromarray(a, "RGB").quantize(colors=64),
        "gray16": Image.fromarray(a[..., 0].astype(np.uint16) * 3),
        "la": Image.fromarray(np.dstack([a[..., 1], a[..., 2]]), "LA"),
    }
    for kind, im in pictures.items():
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        data = buf.getvalue()
        got = fw_tensor(server, data, "image/png")
        want = transform(fw.transforms.load(data)).float().numpy().ravel()
        err = float(np.abs(got - want).max())
        assert err <= 1e-5, f"{kind}: max abs error {err}"


def test_steps_refuse_per_request_overrides(served_steps):
    server, _ = served_steps["v1_imagenet"]
    data = encode(photo(40, 30, 1), "PNG", "RGB")
    r = server.call("POST", "/predict/image?height=16", data, {"Content-Type": "image/png"}, expect=400)
    err = r.json()["error"]
    assert err["details"]["parameter"] == "height" and "torchvision transform" in err["message"]
