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
    if fmt in ("onnx", "onnx_int8"):
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


# ---------------------------------------------------------------------------- int8 ONNX


def _digits(hidden: int = 32, epochs: int = 8):
    """A DigitsMLP trained briefly on scikit-learn's digits, its training rows and held-out test set."""
    from sklearn.datasets import load_digits

    from fw.models import DigitsMLP

    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    tr, te = perm[:1400], perm[1400:]
    torch.manual_seed(0)
    model = DigitsMLP(hidden=hidden)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(epochs):
        for i in range(0, len(tr), 128):
            b = tr[i : i + 128]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[b]), y[b]).backward()
            opt.step()
    return model.eval(), x[tr], x[te], y[te]


@pytest.fixture(scope="module")
def digits_model():
    return _digits()


@pytest.mark.parametrize("quantization", ["dynamic", "static"])
def test_onnx_int8_round_trip_and_accuracy(tmp_path, digits_model, quantization):
    """Both methods: fw.json records the method and settings, the test vector replays in onnxruntime,
    the file is smaller than float, and the accuracy on held-out digits stays within one point."""
    model, x_train, x_test, y_test = digits_model
    path = tmp_path / "d.int8.onnx"
    kw = {"calibration": x_train[:256]} if quantization == "static" else {}
    rep = export.onnx_int8(
        model,
        x_test[:6],
        path,
        quantization=quantization,
        name="digits",
        labels=LABELS,
        metrics={"test_accuracy": 0.5, "epochs": 8},
        eval_data=(x_test, y_test),
        **kw,
    )
    assert rep.format == "onnx_int8" and rep.quantization == quantization
    assert (rep.atol, rep.rtol) == export.TOLERANCES["onnx_int8"]["parity"] == (0.25, 0.1)
    assert rep.max_abs_error <= 0.25 and [c["batch"] for c in rep.checks] == [6, 1, 7]
    want_input = "random batch 1" if quantization == "dynamic" else "calibration rows batch 1"
    assert rep.checks[1]["input"] == want_input
    assert rep.accuracy_delta >= -0.01 and rep.eager_accuracy > 0.9
    doc = _check_file(path, "onnx_int8", model, x_test[:6])
    ex = doc["export"]
    assert ex["quantization"] == quantization and ex["method"] == "trace"
    # The float export is torch's current (dynamo) exporter at its own default opset.
    assert ex["exporter"] == f"{export.DYNAMO_EXPORTER} + onnxruntime.quantization.quantize_{quantization}"
    assert ex["weight_dtype"] == "int8" and ex["per_channel"] is False
    assert ex["quantizer_version"] == ort.__version__ and ex["dynamic_batch"] is True
    # fw.json's accuracy is the int8 file's on eval_data; the float model's sits beside it.
    assert doc["metrics"] == {
        "test_accuracy": rep.accuracy,
        "float_test_accuracy": rep.eager_accuracy,
        "epochs": 8.0,
    }
    assert (doc["test_vector"]["atol"], doc["test_vector"]["rtol"]) == (1e-2, 1e-2)
    proto = onnx.load(str(path))
    ops = {n.op_type for n in proto.graph.node}
    assert {o.domain for o in proto.opset_import} == {""} and proto.opset_import[0].version == ex[
        "opset_version"
    ] >= 18
    if quantization == "dynamic":
        assert ex["quantized_ops"] == ["MatMulInteger"] and ex["quantized_nodes"] == 3
        assert ex["activation_dtype"] == "uint8" and ex["quant_format"] == "QOperator"
        assert ex["calibration"] is None and "DynamicQuantizeLinear" in ops
    else:
        assert ex["quantized_ops"] == ["Gemm"] and ex["quantized_nodes"] == 3
        assert ex["activation_dtype"] == "int8" and ex["quant_format"] == "QDQ"
        assert ex["calibration"] == {"method": "minmax", "rows": 256, "batch": export.CALIBRATION_BATCH}
        assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    float_path = tmp_path / "d.onnx"
    export.onnx(model, x_test[:6], float_path)
    assert path.stat().st_size < float_path.stat().st_size
    assert not list(tmp_path.glob(".fw-export-*")), "temporary folder left behind"


def test_onnx_int8_lstm_cnn_and_options(tmp_path):
    """LSTM quantizes dynamically (DynamicQuantizeLSTM), stays float in static QDQ; convolutions quantize both
    ways; per_channel and the other calibration methods are recorded."""
    torch.manual_seed(0)
    txt = TextClassifier(vocab=100, dim=8, hidden=8).eval()
    tokens = torch.randint(0, 100, (40, 32))
    export.onnx_int8(txt, tokens[:3], tmp_path / "t.onnx", method="script")
    doc = metadata.read(tmp_path / "t.onnx")
    assert doc["export"]["quantized_ops"] == ["DynamicQuantizeLSTM", "Gather", "MatMulInteger"]
    assert doc["export"]["method"] == "script" and doc["inputs"][0]["dtype"] == "int64"
    export.onnx_int8(txt, tokens[:3], tmp_path / "ts.onnx", quantization="static", calibration=tokens)
    ex = metadata.read(tmp_path / "ts.onnx")["export"]
    assert ex["quantized_ops"] == ["Gather", "Gemm"], "LSTM has no QDQ kernel: it stays float"
    cnn = DigitsCNN().eval()
    images = torch.rand(48, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    export.onnx_int8(cnn, images[:4], tmp_path / "c.onnx", per_channel=True)
    ex = metadata.read(tmp_path / "c.onnx")["export"]
    assert ex["quantized_ops"] == ["ConvInteger", "MatMulInteger"] and ex["per_channel"] is True
    export.onnx_int8(
        cnn,
        images[:4],
        tmp_path / "p.onnx",
        quantization="static",
        calibration=images,
        calibration_method="percentile",
    )
    ex = metadata.read(tmp_path / "p.onnx")["export"]
    assert ex["quantized_ops"] == ["Conv", "Gemm"] and ex["calibration"]["method"] == "percentile"


def test_onnx_int8_accuracy_gate(tmp_path):
    """An export losing more accuracy than max_accuracy_drop is refused and leaves no file."""
    torch.manual_seed(0)
    from fw.models import DigitsMLP

    model = DigitsMLP(hidden=16).eval()  # untrained: near-tied logits, so int8 rounding flips some argmaxes
    x = torch.rand(2000, 64, generator=torch.Generator().manual_seed(0))
    y = model(x).argmax(-1)
    path = tmp_path / "g.onnx"
    with pytest.raises(
        export.ParityError, match=r"loses .* points of accuracy .* max_accuracy_drop=0.*Hint:"
    ):
        export.onnx_int8(model, x[:4], path, eval_data=(x, y), max_accuracy_drop=0.0)
    assert not path.exists()
    rep = export.onnx_int8(model, x[:4], path, eval_data=(x, y), max_accuracy_drop=None)
    assert rep.eager_accuracy == 1.0 and rep.accuracy < 1.0
    assert metadata.read(path)["metrics"]["test_accuracy"] == rep.accuracy


def test_onnx_int8_refusals(tmp_path, mlp, digits_x):
    p = tmp_path / "r.onnx"
    cases = [
        ({"quantization": "qat"}, "quantization must be 'dynamic' or 'static'"),
        ({"calibration": digits_x}, "only used by static quantization"),
        ({"calibration_method": "entropy"}, "only used by static quantization"),
        ({"quantization": "static"}, "static quantization needs a calibration set"),
        (
            {"quantization": "static", "calibration": digits_x, "calibration_method": "kl"},
            "calibration_method must",
        ),
        ({"max_accuracy_drop": 5}, "max_accuracy_drop must be between 0 and 1"),
        (
            {"quantization": "static", "calibration": torch.rand(8, 32)},
            r"calibration input 'input' is float32 \[8, 32\]",
        ),
        ({"quantization": "static", "calibration": digits_x.double()}, "float64"),
        ({"quantization": "static", "calibration": {"pixels": digits_x}}, "calibration: example_input keys"),
        ({"quantization": "static", "calibration": (digits_x, digits_x)}, "calibration gives 2 inputs"),
        ({"quantization": "static", "calibration": digits_x * float("nan")}, "NaN or Inf"),
    ]
    for kw, msg in cases:
        with pytest.raises(export.ExportError, match=msg) as info:
            export.onnx_int8(mlp, digits_x, p, **kw)
        assert "Hint:" in str(info.value), kw
        assert not p.exists()
    with pytest.raises(
        export.ExportError, match="found nothing to quantize.*Hint: export it with fw.export.onnx"
    ):
        export.onnx_int8(torch.nn.Softmax(dim=-1), digits_x, p)
    assert not p.exists()
