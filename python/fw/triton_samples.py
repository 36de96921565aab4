"""Build a model repository in Triton's layout with Triton's sample models rebuilt as ONNX files.

    python -m fw.triton_samples --out build/models/triton

Triton's client examples and tests expect the sample models of Triton's server repository
(``simple``, ``simple_int8``, ``simple_string``, ``densenet_onnx``, ``simple_sequence``, ...).
Those are TensorFlow, custom-backend or downloaded files; this module writes ONNX graphs with the
same tensor names, datatypes and shapes, and the same ``config.pbtxt``, so the examples run
unchanged against ``fw serve --model-repository``. The stateful ones (Triton's sequence batcher)
are ``simple_sequence`` and ``simple_dyna_sequence``, as Triton's ONNX samples compute them (the
output is the input plus the START flag, plus the correlation ID on the END request for the dyna
one, whose CORRID is UINT64), ``simple_string_dyna_sequence``, whose CORRID is a string (Triton's
``-d`` sequence examples send it a string sequence ID), and ``simple_sequence_state``, an
accumulator whose running sum is implicit state the server keeps between the requests of a
sequence. It also writes the shapes that once broke fw: a model without
a batch axis whose output is shorter than its input (``nobatch``) and a model exported with a
fixed batch of one (``fixed_batch1``). Every graph is built with the ``onnx`` package from fixed
numbers: the output is the same on every machine.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


def _save(model: onnx.ModelProto, path: Path) -> None:
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def _graph(name: str, nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="fw.triton_samples"
    )


def simple(dtype: int) -> onnx.ModelProto:
    """INPUT0, INPUT1 [-1,16] -> OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (Triton's ``simple``)."""
    vi = helper.make_tensor_value_info
    ins = [vi("INPUT0", dtype, ["batch", 16]), vi("INPUT1", dtype, ["batch", 16])]
    outs = [vi("OUTPUT0", dtype, ["batch", 16]), vi("OUTPUT1", dtype, ["batch", 16])]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    return _graph("simple", nodes, ins, outs)


def simple_string() -> onnx.ModelProto:
    """Triton's ``simple_string``: BYTES inputs holding integers; outputs their sum and difference as strings."""
    vi = helper.make_tensor_value_info
    ins = [vi("INPUT0", TensorProto.STRING, ["batch", 16]), vi("INPUT1", TensorProto.STRING, ["batch", 16])]
    outs = [
        vi("OUTPUT0", TensorProto.STRING, ["batch", 16]),
        vi("OUTPUT1", TensorProto.STRING, ["batch", 16]),
    ]
    nodes = [
        helper.make_node("Cast", ["INPUT0"], ["a"], to=TensorProto.INT32),
        helper.make_node("Cast", ["INPUT1"], ["b"], to=TensorProto.INT32),
        helper.make_node("Add", ["a", "b"], ["sum"]),
        helper.make_node("Sub", ["a", "b"], ["diff"]),
        helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=TensorProto.STRING),
        helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=TensorProto.STRING),
    ]
    return _graph("simple_string", nodes, ins, outs)


def identity(dtype: int, name: str) -> onnx.ModelProto:
    """INPUT0 [-1,-1] -> OUTPUT0, the same tensor (Triton's ``simple_identity`` for BYTES)."""
    vi = helper.make_tensor_value_info
    return _graph(
        name,
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        [vi("INPUT0", dtype, ["batch", "n"])],
        [vi("OUTPUT0", dtype, ["batch", "n"])],
    )


def nobatch() -> onnx.ModelProto:
    """x [4] -> y [2] = x @ W: no batch axis, and an output shorter than the input."""
    w = np.array([[1, 0], [0, 1], [1, 1], [2, -1]], dtype=np.float32)
    vi = helper.make_tensor_value_info
    return _graph(
        "nobatch",
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        [vi("x", TensorProto.FLOAT, [4])],
        [vi("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(w, "W")],
    )


def fixed_batch1() -> onnx.ModelProto:
    """x [1,16] -> y = 2x: exported with a fixed batch of one, so rows must never be joined."""
    vi = helper.make_tensor_value_info
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    return _graph(
        "fixed_batch1",
        [helper.make_node("Mul", ["x", "two"], ["y"])],
        [vi("x", TensorProto.FLOAT, [1, 16])],
        [vi("y", TensorProto.FLOAT, [1, 16])],
        [two],
    )


def densenet() -> onnx.ModelProto:
    """A small stand-in for Triton's ``densenet_onnx``: data_0 [1,3,224,224] -> fc6_1 [1,1000,1,1].

    The channels' means go through a fixed 1x1 convolution to 1,000 class scores: not a trained
    network, but the same names, shapes and configuration as the model Triton's image examples use.
    """
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1000, 3, 1, 1)).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32) * 0.1
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("GlobalAveragePool", ["data_0"], ["pooled"]),
        helper.make_node("Conv", ["pooled", "W", "B"], ["fc6_1"]),
    ]
    return _graph(
        "densenet_onnx",
        nodes,
        [vi("data_0", TensorProto.FLOAT, [1, 3, 224, 224])],
        [vi("fc6_1", TensorProto.FLOAT, [1, 1000, 1, 1])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )


def simple_sequence() -> onnx.ModelProto:
    """Triton's ``simple_sequence``: OUTPUT = READY * (INPUT + START), all INT32 [-1,1].

    The server fills START and READY (its sequence batcher's control inputs): the first request of
    a sequence answers its input plus one, the later ones their input, as Triton's examples expect.
    """
    vi = helper.make_tensor_value_info
    ins = [vi(n, TensorProto.INT32, ["batch", 1]) for n in ("INPUT", "START", "READY")]
    nodes = [
        helper.make_node("Add", ["INPUT", "START"], ["sum"]),
        helper.make_node("Mul", ["READY", "sum"], ["OUTPUT"]),
    ]
    return _graph("simple_sequence", nodes, ins, [vi("OUTPUT", TensorProto.INT32, ["batch", 1])])


def simple_dyna_sequence() -> onnx.ModelProto:
    """Triton's ``simple_dyna_sequence``: OUTPUT = READY * (INPUT + START + END * CORRID).

    CORRID is UINT64, as Triton's; the correlation ID, cast to INT32, is added on the last request.
    """
    vi = helper.make_tensor_value_info
    ins = [vi(n, TensorProto.INT32, ["batch", 1]) for n in ("INPUT", "START", "END", "READY")]
    ins.append(vi("CORRID", TensorProto.UINT64, ["batch", 1]))
    nodes = [
        helper.make_node("Cast", ["CORRID"], ["corrid"], to=TensorProto.INT32),
        helper.make_node("Add", ["INPUT", "START"], ["a"]),
        helper.make_node("Mul", ["END", "corrid"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["sum"]),
        helper.make_node("Mul", ["READY", "sum"], ["OUTPUT"]),
    ]
    return _graph("simple_dyna_sequence", nodes, ins, [vi("OUTPUT", TensorProto.INT32, ["batch", 1])])


def simple_string_dyna_sequence() -> onnx.ModelProto:
    """Triton's ``simple_string_dyna_sequence``: a STRING CORRID, and a running sum.

    Triton serves it with its C++ ``dyna_sequence`` test backend, which accumulates INPUT over the
    sequence (START resets the sum) and adds the correlation ID, a string of digits, on the END
    request. Here the sum is implicit state (ACC_IN, ACC_OUT): OUTPUT = READY * (ACC_OUT + END *
    int32(CORRID)), ACC_OUT = START ? INPUT : ACC_IN + INPUT (kept when READY is 0).
    """
    vi = helper.make_tensor_value_info
    ins = [vi(n, TensorProto.INT32, ["batch", 1]) for n in ("INPUT", "START", "END", "READY")]
    ins += [vi("CORRID", TensorProto.STRING, ["batch", 1]), vi("ACC_IN", TensorProto.INT32, ["batch", 1])]
    outs = [vi("OUTPUT", TensorProto.INT32, ["batch", 1]), vi("ACC_OUT", TensorProto.INT32, ["batch", 1])]
    nodes = [
        helper.make_node("Cast", ["CORRID"], ["corrid"], to=TensorProto.INT32),
        helper.make_node("Cast", ["START"], ["start"], to=TensorProto.BOOL),
        helper.make_node("Cast", ["READY"], ["ready"], to=TensorProto.BOOL),
        helper.make_node("Add", ["ACC_IN", "INPUT"], ["sum"]),
        helper.make_node("Where", ["start", "INPUT", "sum"], ["acc"]),
        helper.make_node("Where", ["ready", "acc", "ACC_IN"], ["ACC_OUT"]),
        helper.make_node("Mul", ["END", "corrid"], ["b"]),
        helper.make_node("Add", ["ACC_OUT", "b"], ["out"]),
        helper.make_node("Mul", ["READY", "out"], ["OUTPUT"]),
    ]
    return _graph("simple_string_dyna_sequence", nodes, ins, outs)


def simple_sequence_state() -> onnx.ModelProto:
    """An accumulator with implicit state: OUTPUT = ACC_OUT = START ? INPUT : ACC_IN + INPUT.

    ACC_IN and ACC_OUT are the sequence's state, which the server feeds back from one request to
    the next and never returns. START is BOOL and READY FP32 (a row that is not ready keeps its
    state), so the three kinds of control values are all exercised.
    """
    vi = helper.make_tensor_value_info
    ins = [
        vi("INPUT", TensorProto.INT32, ["batch", 1]),
        vi("START", TensorProto.BOOL, ["batch", 1]),
        vi("READY", TensorProto.FLOAT, ["batch", 1]),
        vi("ACC_IN", TensorProto.INT32, ["batch", 1]),
    ]
    outs = [vi("OUTPUT", TensorProto.INT32, ["batch", 1]), vi("ACC_OUT", TensorProto.INT32, ["batch", 1])]
    half = numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half")
    nodes = [
        helper.make_node("Add", ["ACC_IN", "INPUT"], ["sum"]),
        helper.make_node("Where", ["START", "INPUT", "sum"], ["acc"]),
        helper.make_node("Greater", ["READY", "half"], ["ready"]),
        helper.make_node("Where", ["ready", "acc", "ACC_IN"], ["ACC_OUT"]),
        helper.make_node("Identity", ["ACC_OUT"], ["OUTPUT"]),
    ]
    return _graph("simple_sequence_state", nodes, ins, outs, [half])


def _simple_config(name: str, typ: str) -> str:
    tensors = lambda kind, names: ",\n".join(  # noqa: E731
        f'  {{\n    name: "{n}"\n    data_type: {typ}\n    dims: [ 16 ]\n  }}' for n in names
    )
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        f"input [\n{tensors('input', ['INPUT0', 'INPUT1'])}\n]\n"
        f"output [\n{tensors('output', ['OUTPUT0', 'OUTPUT1'])}\n]\n"
    )


CONFIGS = {
    "simple": _simple_config("simple", "TYPE_INT32"),
    "simple_int8": _simple_config("simple_int8", "TYPE_INT8"),
    "simple_string": _simple_config("simple_string", "TYPE_STRING"),
    "simple_identity": """name: "simple_identity"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }
]
""",
    # Triton's QA model of its C++ identity backend, which its client's
    # memory_growth_test.py calls: [1, 16] INT32 in, the same out.
    "custom_identity_int32": """name: "custom_identity_int32"
platform: "onnxruntime_onnx"
max_batch_size: 1024
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
""",
    "nobatch": """name: "nobatch"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 2 ] } ]
""",
    # Triton's own (docs/examples/model_repository/simple_sequence): the direct strategy.
    "simple_sequence": """name: "simple_sequence"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  control_input [
    {
      name: "START"
      control [
        {
          kind: CONTROL_SEQUENCE_START
          int32_false_true: [ 0, 1 ]
        }
      ]
    },
    {
      name: "READY"
      control [
        {
          kind: CONTROL_SEQUENCE_READY
          int32_false_true: [ 0, 1 ]
        }
      ]
    }
  ]
}
input [
  {
    name: "INPUT"
    data_type: TYPE_INT32
    dims: [ 1 ]
  }
]
output [
  {
    name: "OUTPUT"
    data_type: TYPE_INT32
    dims: [ 1 ]
  }
]
instance_group [
  {
    kind: KIND_CPU
  }
]
""",
    # Triton's, the oldest strategy.
    "simple_dyna_sequence": """name: "simple_dyna_sequence"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  oldest {
    max_candidate_sequences: 1024
    max_queue_delay_microseconds: 10000
  }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
""",
    # As Triton's L0_http/L0_grpc make it from simple_dyna_sequence's (CORRID TYPE_STRING), with
    # the running sum its dyna_sequence backend keeps as implicit state.
    "simple_string_dyna_sequence": """name: "simple_string_dyna_sequence"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  oldest {
    max_candidate_sequences: 1024
    max_queue_delay_microseconds: 10000
  }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
  state [
    {
      input_name: "ACC_IN"
      output_name: "ACC_OUT"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" }
    }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
""",
    "simple_sequence_state": """name: "simple_sequence_state"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START bool_false_true: [ false, true ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } ] }
  ]
  state [
    {
      input_name: "ACC_IN"
      output_name: "ACC_OUT"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" }
    }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
""",
    # fixed_batch1 has no config.pbtxt: its configuration is completed from the file.
    "densenet_onnx": """name: "densenet_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [
  {
    name: "data_0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
    reshape { shape: [ 1, 3, 224, 224 ] }
  }
]
output [
  {
    name: "fc6_1"
    data_type: TYPE_FP32
    dims: [ 1000 ]
    reshape { shape: [ 1, 1000, 1, 1 ] }
    label_filename: "densenet_labels.txt"
  }
]
""",
}


def build(out: Path) -> list[str]:
    """Write the repository into out (replacing what an earlier run left there); returns the model names."""
    models = {
        "simple": simple(TensorProto.INT32),
        "simple_int8": simple(TensorProto.INT8),
        "simple_string": simple_string(),
        "simple_identity": identity(TensorProto.STRING, "simple_identity"),
        "custom_identity_int32": identity(TensorProto.INT32, "custom_identity_int32"),
        "nobatch": nobatch(),
        "fixed_batch1": fixed_batch1(),
        "densenet_onnx": densenet(),
        "simple_sequence": simple_sequence(),
        "simple_dyna_sequence": simple_dyna_sequence(),
        "simple_string_dyna_sequence": simple_string_dyna_sequence(),
        "simple_sequence_state": simple_sequence_state(),
    }
    if out.exists():
        shutil.rmtree(out)
    for name, model in models.items():
        _save(model, out / name / "1" / "model.onnx")
        if name in CONFIGS:
            (out / name / "config.pbtxt").write_text(CONFIGS[name])
    (out / "densenet_onnx" / "densenet_labels.txt").write_text(
        "".join(f"CLASS_{i:04d}\n" for i in range(1000))
    )
    return sorted(models)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fw.triton_samples", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the repository directory to write (replaced)")
    args = p.parse_args(argv)
    names = build(args.out)
    print(f"fw.triton_samples: {len(names)} models in {args.out}: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
