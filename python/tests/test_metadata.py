from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from fw import metadata as md


def _doc(**over):
    doc = md.build(
        name="digits_mlp",
        format="onnx",
        inputs=[md.io_spec("input", "float32", [4, 64])],
        outputs=[md.io_spec("logits", "float32", [4, 10])],
        labels=[str(i) for i in range(10)],
        preprocessing=md.image_preprocessing(8, 8, 1, flatten=True),
        metrics={"test_accuracy": 0.97},
        test_vector={
            "inputs": {"input": md.encode_tensor(torch.zeros(2, 64))},
            "outputs": {"logits": md.encode_tensor(torch.zeros(2, 10))},
            "atol": 1e-4,
            "rtol": 1e-4,
        },
        torch_version="2.13.0",
    )
    doc.update(over)
    return doc


def test_import_is_light():
    code = "import sys, fw; assert 'torch' not in sys.modules and 'numpy' not in sys.modules; fw.metadata"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_build_fields_and_defaults():
    doc = _doc()
    assert doc["fw_format"] == 1
    assert doc["task"] == "classification"
    assert doc["inputs"] == [{"name": "input", "dtype": "float32", "shape": [-1, 64]}]
    assert doc["created_at"].endswith("Z")
    assert json.loads(md.dumps(doc)) == doc


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.float64,
        torch.float16,
        torch.int64,
        torch.int32,
        torch.int8,
        torch.uint8,
        torch.bool,
    ],
)
def test_tensor_round_trip(dtype):
    t = (torch.arange(24).reshape(2, 3, 4) % 5).to(dtype)
    enc = md.encode_tensor(t)
    assert enc["dtype"] == md.dtype_name(dtype)
    assert enc["shape"] == [2, 3, 4]
    np.testing.assert_array_equal(md.decode_tensor(enc), t.numpy())


def test_encoding_is_little_endian():
    enc = md.encode_tensor(torch.tensor([1], dtype=torch.int32))
    import base64

    assert base64.b64decode(enc["b64"]) == b"\x01\x00\x00\x00"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(name="bad name!"), "model name"),
        (lambda d: d.update(name=""), "model name"),
        (lambda d: d.update(version="x" * 65), "version"),
        (lambda d: d.update(fw_format=3), "newer than this reader"),
        (lambda d: d.update(task="ranking"), "task must be"),
        (lambda d: d.update(format="tflite"), "format must be"),
        (lambda d: d["inputs"][0].update(dtype="complex64"), "dtype"),
        (lambda d: d["inputs"][0].update(shape=[4, 64]), "batch axis"),
        (lambda d: d["inputs"].append(dict(d["inputs"][0])), "repeated"),
        (lambda d: d.update(labels=["a", "b"]), "labels given"),
        (lambda d: d.update(task="regression"), "only allowed for task"),
        (lambda d: d["preprocessing"]["image"].update(channels=3), "preprocessing.image"),
        (lambda d: d["preprocessing"]["image"].update(flatten=False), "produces"),
        (lambda d: d["test_vector"]["inputs"].pop("input"), "test_vector.inputs"),
        (lambda d: d["test_vector"]["inputs"]["input"].update(shape=[2, 63]), "bytes"),
        (lambda d: d["test_vector"].update(atol=-1), "atol"),
    ],
)
def test_validation_errors(mutate, message):
    doc = copy.deepcopy(_doc())
    mutate(doc)
    with pytest.raises(md.MetadataError, match=message) as info:
        md.validate(doc)
    assert "Hint:" in str(info.value)


def test_unknown_fields_kept():
    doc = _doc(future_field={"x": 1})
    assert md.validate(doc)["future_field"] == {"x": 1}


def test_read_refuses_pickles_without_unpickling(tmp_path, mlp):
    p = tmp_path / "state.pt"
    torch.save(mlp.state_dict(), p)
    assert md.detect_format(p) == "pickle"
    with pytest.raises(md.MetadataError, match="python -m fw.export"):
        md.read(p)
    p2 = tmp_path / "legacy.pt"
    torch.save(mlp.state_dict(), p2, _use_new_zipfile_serialization=False)
    assert md.detect_format(p2) == "pickle"


def test_read_plain_files_without_fw_json(tmp_path, mlp, digits_x):
    from fw.export import quiet_warnings

    ts = tmp_path / "plain.ts.pt"
    with quiet_warnings():
        torch.jit.save(torch.jit.trace(mlp, (digits_x,)), str(ts))
    assert md.detect_format(ts) == "torchscript"
    assert md.read(ts, required=False) is None
    with pytest.raises(md.MetadataError, match="carries no fw.json"):
        md.read(ts)
