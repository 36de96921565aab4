from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from fw import export, metadata
from fw.models import DigitsCNN, TextClassifier

from helpers import BatchDependent, TwoInput

LABELS = [str(i) for i in range(10)]


def _check_file(path, fmt, model, example):
    doc = metadata.read(path)
    assert doc["format"] == fmt
    assert doc["inputs"][0]["shape"][0] == -1
    tv = doc["test_vector"]
    x = torch.from_numpy(metadata.decode_tensor(tv["inputs"][doc["inputs"][0]["name"]]))
    want = metadata.decode_tensor(tv["outputs"][doc["outputs"][0]["name"]])
    if fmt == "onnx":
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = sess.run(None, {doc["inputs"][0]["name"]: x.numpy()})[0]
    else:
        with export.quiet_warnings():
            got = torch.jit.load(str(path))(x).detach().numpy()
    assert np.allclose(got, want, atol=tv["atol"], rtol=tv["rtol"])
    return doc


@pytest.mark.parametrize(
    "fmt, fn, kw",
    [
        ("torchscript", export.torchscript, {"method": "trace"}),
        ("torchscript", export.torchscript, {"method": "script"}),
        ("onnx", export.onnx, {"opset_version": 14}),
        ("quantized", export.quantized, {}),
    ],
)
def test_export_round_trip(tmp_path, mlp, digits_x, fmt, fn, kw):
    path = tmp_path / f"m.{fmt}"
    rep = fn(
        mlp, digits_x, path, name="mlp", version="7", labels=LABELS, metrics={"test_accuracy": 0.5}, **kw
    )
    assert rep.format == fmt and rep.path == str(path) and rep.size_bytes == path.stat().st_size
    assert rep.max_abs_error <= (0.25 if fmt == "quantized" else 1e-4)
    assert [c["batch"] for c in rep.checks] == [6, 1, 7]
    doc = _check_file(path, fmt, mlp, digits_x)
    assert doc["name"] == "mlp" and doc["version"] == "7" and doc["labels"] == LABELS
    assert doc["inputs"] == [{"name": "input", "dtype": "float32", "shape": [-1, 64]}]
    assert doc["outputs"] == [{"name": "logits", "dtype": "float32", "shape": [-1, 10]}]
    assert doc["test_vector"]["inputs"]["input"]["shape"] == [4, 64]
    assert doc["export"]["dynamic_batch"] is True
    if fmt == "onnx":
        assert doc["export"]["opset_version"] == 14
        proto = onnx.load(str(path))
        assert proto.opset_import[0].version == 14
        assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
        assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    if fmt == "quantized":
        assert doc["export"]["quantization"] == "dynamic"
        assert doc["export"]["quantized_modules"] == ["nn.Linear"]
    assert not list(tmp_path.glob(".fw-export-*")), "temporary folder left behind"


def test_multi_input_dict_and_int_inputs(tmp_path):
    torch.manual_seed(0)
    model = TwoInput(vocab=50).eval()
    example = {"tokens": torch.randint(0, 50, (5, 6)), "features": torch.rand(5, 4)}
    for fn, p in ((export.onnx, "two.onnx"), (export.torchscript, "two.ts.pt")):
        export_report = fn(model, example, tmp_path / p)
        doc = metadata.read(tmp_path / p)
        assert [i["name"] for i in doc["inputs"]] == ["features", "tokens"]
        assert [i["dtype"] for i in doc["inputs"]] == ["float32", "int64"]
        assert [o["name"] for o in doc["outputs"]] == ["output_0", "output_1"]
        assert doc["name"] == "two" and doc["task"] == "other"
        assert export_report.max_abs_error < 1e-4


def test_cnn_and_lstm_quantized_accuracy(tmp_path):
    torch.manual_seed(0)
    cnn = DigitsCNN().eval()
    x = torch.rand(20, 1, 8, 8)
    y = cnn(x).argmax(-1)
    rep = export.quantized(cnn, x[:4], tmp_path / "cnn.quant.pt", eval_data=(x, y))
    assert rep.eager_accuracy == 1.0 and rep.accuracy_delta == pytest.approx(rep.accuracy - 1.0)
    txt = TextClassifier(vocab=100, dim=8, hidden=8).eval()
    rep = export.quantized(
        txt, torch.randint(0, 100, (3, 32)), tmp_path / "txt.quant.pt", jit_method="script"
    )
    doc = metadata.read(tmp_path / "txt.quant.pt")
    assert doc["export"]["quantized_modules"] == ["nn.LSTM", "nn.Linear"]
    assert rep.max_abs_error < 0.25
    assert doc["inputs"][0] == {
        "name": "tokens",
        "dtype": "int64",
        "shape": [-1, 32],
    }


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_trace_of_batch_dependent_model_fails_parity(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "bd.ts.pt"
    with pytest.raises(export.ParityError, match=r"random batch 1.*Hint: .*method='script'"):
        export.torchscript(BatchDependent(), torch.rand(4, 4), path)
    assert not path.exists(), "a file failing parity must not be left behind"
    rep = export.torchscript(BatchDependent(), torch.rand(4, 4), path, method="script")
    assert rep.max_abs_error == 0.0


def test_export_errors(tmp_path, mlp, digits_x):
    with pytest.raises(metadata.MetadataError, match="labels given"):
        export.onnx(mlp, digits_x, tmp_path / "a.onnx", labels=["a", "b"])
    with pytest.raises(export.ExportError, match="cannot derive a model name"):
        export.torchscript(mlp, digits_x, tmp_path / "bad name.ts.pt")
    with pytest.raises(export.ExportError, match="example_input must be"):
        export.torchscript(mlp, "x", tmp_path / "a.ts.pt")
    with pytest.raises(export.ExportError, match="method must be"):
        export.torchscript(mlp, digits_x, tmp_path / "a.ts.pt", method="compile")
    with pytest.raises(export.ExportError, match="no nn.Linear or nn.LSTM"):
        export.quantized(torch.nn.ReLU(), digits_x, tmp_path / "a.quant.pt")
