"""fw.transforms: torchvision eval transforms as preprocessing.image.steps, and their checks.

The per-pixel comparison of fw's Go implementation with torchvision is in test_image_parity.py
(against a real ``fw serve``) and imageprep/steps_test.go (golden data made by Pillow and
torchvision); these tests cover the Python side: what is accepted and how it is written, what is
refused and how, and fw.json's rules for the steps form.
"""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch
import torchvision.transforms as T
import torchvision.transforms.v2 as v2
from PIL import Image

import fw.export
import fw.metadata
import fw.transforms as ft

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
CONVERT = {"op": "convert", "mode": "RGB"}


def imagenet_steps():
    return [
        CONVERT,
        {"op": "resize", "size": [256], "interpolation": "bilinear", "antialias": True},
        {"op": "center_crop", "size": [224, 224]},
        {"op": "to_tensor"},
        {"op": "normalize", "mean": MEAN, "std": STD},
    ]


def test_v1_imagenet_eval_transform():
    pre = ft.image_preprocessing_from(
        T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])
    )
    assert pre == {
        "image": {"height": 224, "width": 224, "channels": 3, "layout": "NCHW", "steps": imagenet_steps()}
    }


def test_v2_transform_with_uint8_tensor_steps():
    pre = ft.image_preprocessing_from(
        v2.Compose(
            [
                v2.ToImage(),
                v2.Resize(256, interpolation=v2.InterpolationMode.BICUBIC, antialias=False, max_size=300),
                v2.CenterCrop([200, 220]),
                v2.Grayscale(1),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize([0.5], [0.2]),
            ]
        )
    )
    assert pre["image"]["steps"] == [
        CONVERT,
        {"op": "to_image"},
        {"op": "resize", "size": [256], "interpolation": "bicubic", "antialias": False, "max_size": 300},
        {"op": "center_crop", "size": [200, 220]},
        {"op": "grayscale", "channels": 1},
        {"op": "to_dtype", "dtype": "float32", "scale": True},
        {"op": "normalize", "mean": [0.5], "std": [0.2]},
    ]
    assert (pre["image"]["channels"], pre["image"]["height"], pre["image"]["width"]) == (1, 200, 220)


def test_pil_resize_is_always_antialiased_and_nearest_exact_is_nearest():
    pre = ft.image_preprocessing_from(
        T.Compose(
            [
                T.Resize((30, 40), antialias=False),
                T.Resize((20, 20), interpolation=T.InterpolationMode.NEAREST_EXACT),
                T.ToTensor(),
            ]
        )
    )
    steps = pre["image"]["steps"]
    assert steps[1]["antialias"] is True and steps[2] == {
        "op": "resize",
        "size": [20, 20],
        "interpolation": "nearest",
        "antialias": False,
    }


@pytest.mark.parametrize(
    ("transform", "named"),
    [
        (T.Compose([T.RandomResizedCrop(224), T.ToTensor()]), "RandomResizedCrop"),
        (T.Compose([T.Resize(256), T.ColorJitter(0.1), T.CenterCrop(224), T.ToTensor()]), "ColorJitter"),
        (T.Compose([T.Lambda(lambda x: x), T.CenterCrop(8), T.ToTensor()]), "Lambda"),
        (
            v2.Compose([v2.ToImage(), v2.Pad(2), v2.CenterCrop(8), v2.ToDtype(torch.float32, scale=True)]),
            "Pad",
        ),
    ],
)
def test_other_transforms_are_refused_by_name(transform, named):
    with pytest.raises(ft.TransformError) as e:
        ft.image_preprocessing_from(transform)
    assert named in str(e.value) and "Resize" in str(e.value) and "Normalize" in str(e.value)


@pytest.mark.parametrize(
    ("transform", "says"),
    [
        (T.Compose([T.ToTensor(), T.Resize(8), T.CenterCrop(8)]), "float tensor"),
        (v2.Compose([v2.CenterCrop(8), v2.ToDtype(torch.float32, scale=True)]), "before ToImage"),
        (v2.Compose([v2.ToImage(), v2.ToDtype(torch.float16, scale=True)]), "float32"),
        (T.Compose([T.Resize(8), T.ToTensor()]), "aspect ratio"),
        (T.Compose([T.CenterCrop(8), T.Normalize(MEAN, STD)]), "float tensor"),
        (
            v2.Compose(
                [v2.ToImage(), v2.Resize(8, interpolation=v2.InterpolationMode.LANCZOS), v2.CenterCrop(8)]
            ),
            "uint8",
        ),
    ],
)
def test_unsupported_orders_are_refused(transform, says):
    with pytest.raises(ft.TransformError, match=says):
        ft.image_preprocessing_from(transform)


def picture(w, h, seed):
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB").save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize(
    "transform",
    [
        T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(), T.Normalize(MEAN, STD)]),
        T.Compose(
            [T.Grayscale(3), T.Resize((20, 30), interpolation=T.InterpolationMode.HAMMING), T.ToTensor()]
        ),
        v2.Compose(
            [
                v2.ToImage(),
                v2.Resize(25, max_size=31),
                v2.CenterCrop(24),
                v2.ToDtype(torch.float32, scale=True),
            ]
        ),
    ],
)
def test_steps_rebuild_the_same_transform(transform):
    image = ft.image_preprocessing_from(transform)["image"]
    rebuilt = ft.to_torchvision(image)
    for i, (w, h) in enumerate([(64, 48), (17, 33), (300, 41)]):
        data = picture(w, h, i)
        want = transform(ft.load(data)).float()
        assert torch.equal(ft.preprocess(data, image), want)
        assert torch.equal(rebuilt(ft.load(data)).float(), want)


class Flat(torch.nn.Module):
    def forward(self, x):
        return x[:, :10] * 2.0


class Img(torch.nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3))


def test_export_writes_steps_format_2_and_an_image_case(tmp_path):
    transform = T.Compose([T.Resize(20), T.CenterCrop(16), T.ToTensor(), T.Normalize(MEAN, STD)])
    path = tmp_path / "m.onnx"
    rep = fw.export.onnx(Img().eval(), torch.rand(2, 3, 16, 16), path, preprocessing=transform)
    assert any(c["input"] == "sample picture" for c in rep.checks)
    doc = fw.metadata.read(path)
    assert doc["fw_format"] == 2
    case = doc["test_vector"]["image"]
    x = fw.metadata.decode_tensor(case["input"])
    want = transform(ft.load(ft.sample_png()))
    assert x.shape == (1, 3, 16, 16) and np.array_equal(x[0], want.numpy())
    assert case["input_atol"] == 1e-5
    out = fw.metadata.decode_tensor(case["outputs"]["output"])
    assert np.allclose(out, want.mean(dim=(1, 2)).numpy()[None], atol=1e-6)


def test_export_flattens_for_a_vector_input_and_keeps_simple_form_at_format_1(tmp_path):
    path = tmp_path / "flat.onnx"
    fw.export.onnx(
        Flat().eval(),
        torch.rand(2, 64),
        path,
        preprocessing=T.Compose([T.Grayscale(), T.Resize((8, 8)), T.ToTensor()]),
    )
    doc = fw.metadata.read(path)
    assert doc["preprocessing"]["image"]["flatten"] is True
    assert doc["test_vector"]["image"]["input"]["shape"] == [1, 64]
    simple = tmp_path / "simple.onnx"
    fw.export.onnx(
        Flat().eval(),
        torch.rand(2, 64),
        simple,
        preprocessing=fw.metadata.image_preprocessing(8, 8, 1, flatten=True),
    )
    doc = fw.metadata.read(simple)
    assert doc["fw_format"] == 1 and doc["test_vector"]["image"]["input_atol"] == 1e-4


def test_export_refuses_an_unsupported_transform(tmp_path):
    with pytest.raises(fw.export.ExportError, match="RandomHorizontalFlip"):
        fw.export.onnx(
            Img().eval(),
            torch.rand(2, 3, 8, 8),
            tmp_path / "m.onnx",
            preprocessing=T.Compose([T.RandomHorizontalFlip(), T.CenterCrop(8), T.ToTensor()]),
        )
    assert not (tmp_path / "m.onnx").exists()


def doc_with(steps, fmt=2, **image):
    c, h, w = 3, 224, 224
    return {
        "fw_format": fmt,
        "name": "m",
        "version": "1",
        "task": "other",
        "format": "onnx",
        "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, c, h, w]}],
        "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 3]}],
        "preprocessing": {"image": {"height": h, "width": w, "channels": c, "steps": steps, **image}},
    }


def test_metadata_rules_for_steps():
    fw.metadata.validate(doc_with(imagenet_steps()))
    bad = {
        "format 1": doc_with(imagenet_steps(), fmt=1),
        "mixed forms": doc_with(imagenet_steps(), mean=[0.5, 0.5, 0.5]),
        "unknown op": doc_with(imagenet_steps()[:-1] + [{"op": "sharpen"}]),
        "unknown field": doc_with([CONVERT, {**imagenet_steps()[1], "sharpness": 1}, *imagenet_steps()[2:]]),
        "size disagrees": doc_with(
            [CONVERT, imagenet_steps()[1], {"op": "center_crop", "size": [200, 224]}, *imagenet_steps()[3:]]
        ),
        "no float": doc_with(imagenet_steps()[:3]),
        "no convert": doc_with(imagenet_steps()[1:]),
    }
    for what, doc in bad.items():
        with pytest.raises(fw.metadata.MetadataError):
            fw.metadata.validate(doc)
            pytest.fail(what)


def test_metadata_rules_for_the_image_case(tmp_path):
    path = tmp_path / "m.onnx"
    fw.export.onnx(
        Img().eval(), torch.rand(2, 3, 8, 8), path, preprocessing=T.Compose([T.CenterCrop(8), T.ToTensor()])
    )
    doc = fw.metadata.read(path)
    fw.metadata.validate(doc)
    for change in (
        lambda d: d["test_vector"]["image"].pop("outputs"),
        lambda d: d["test_vector"]["image"].update(input_atol=-1),
        lambda d: d["test_vector"]["image"].update(input=fw.metadata.encode_tensor(torch.zeros(2, 3, 8, 8))),
        lambda d: d.pop("preprocessing"),
    ):
        bad = copy.deepcopy(doc)
        change(bad)
        with pytest.raises(fw.metadata.MetadataError):
            fw.metadata.validate(bad)
