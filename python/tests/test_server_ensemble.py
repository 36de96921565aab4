"""Ensembles (Triton's ``platform: "ensemble"``) served by ``fw serve --model-repository``, driven by tritonclient.

Starts the real ``fw`` binary (FW_BIN) in explicit mode on a repository holding Triton's ``simple`` (INT32 sum and
difference) and ``simple_identity`` (BYTES) samples (``make models``) and ensembles written here in Triton's layout
(config.pbtxt and an empty version directory). Checks what Triton users do with ensembles: loading one loads its
models, requests over HTTP (JSON and binary) and gRPC run the steps in order with the right values, steps that do not
depend on each other, an ensemble without a batch axis over a model with one, BYTES tensors, classification with the
ensemble's labels, concurrency, the configuration and metadata reported, and unloading with and without
``unload_dependents``.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
SAMPLES = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models") / "triton"


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version}{maps} }}'


def _tensors(kind: str, specs: list[tuple[str, str, str]], extra: str = "") -> str:
    items = ", ".join(f'{{ name: "{n}" data_type: {t} dims: [ {d} ]{extra} }}' for n, t, d in specs)
    return f"{kind} [ {items} ]\n"


# (a+b) and (a-b), then both again side by side: OUT_A = 2a, OUT_B = 2b, OUT_C = 2a.
ADD_SUB_TWICE = (
    'platform: "ensemble"\nmax_batch_size: 8\n'
    + _tensors("input", [("A", "TYPE_INT32", "16"), ("B", "TYPE_INT32", "16")])
    + _tensors(
        "output",
        [("OUT_A", "TYPE_INT32", "16"), ("OUT_B", "TYPE_INT32", "16"), ("OUT_C", "TYPE_INT32", "16")],
    )
    + "ensemble_scheduling { step [ "
    + ", ".join(
        [
            _step("simple", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "sum", "OUTPUT1": "diff"}),
            _step("simple", {"INPUT0": "sum", "INPUT1": "diff"}, {"OUTPUT0": "OUT_A", "OUTPUT1": "OUT_B"}),
            _step("simple", {"INPUT0": "diff", "INPUT1": "sum"}, {"OUTPUT0": "OUT_C"}, version=1),
        ]
    )
    + " ] }\n"
)

# No batch axis, over simple (which has one): each request is one row of simple.
NOBATCH = (
    'platform: "ensemble"\nmax_batch_size: 0\n'
    + _tensors("input", [("A", "TYPE_INT32", "16"), ("B", "TYPE_INT32", "16")])
    + _tensors("output", [("SUM", "TYPE_INT32", "16")])
    + "ensemble_scheduling { step [ "
    + _step("simple", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "SUM"})
    + " ] }\n"
)

# BYTES through two identity steps.
STRINGS = (
    'platform: "ensemble"\nmax_batch_size: 8\n'
    + _tensors("input", [("TEXT", "TYPE_STRING", "-1")])
    + _tensors("output", [("ECHO", "TYPE_STRING", "-1")])
    + "ensemble_scheduling { step [ "
    + _step("simple_identity", {"INPUT0": "TEXT"}, {"OUTPUT0": "mid"})
    + ", "
    + _step("simple_identity", {"INPUT0": "mid"}, {"OUTPUT0": "ECHO"})
    + " ] }\n"
)

# The sum, classified with the ensemble's own labels.
LABELLED = (
    'platform: "ensemble"\nmax_batch_size: 8\n'
    + _tensors("input", [("A", "TYPE_INT32", "16"), ("B", "TYPE_INT32", "16")])
    + 'output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] label_filename: "labels.txt" } ]\n'
    + "ensemble_scheduling { step [ "
    + _step("simple", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "SUM"})
    + " ] }\n"
)

# Two stateful steps: the implicit-state accumulator keeps the running sum of A, then simple_sequence adds START.
ACCUMULATE = (
    'platform: "ensemble"\nmax_batch_size: 8\n'
    + _tensors("input", [("A", "TYPE_INT32", "1")])
    + _tensors("output", [("OUT", "TYPE_INT32", "1")])
    + "ensemble_scheduling { step [ "
    + _step("simple_sequence_state", {"INPUT": "A"}, {"OUTPUT": "sum"})
    + ", "
    + _step("simple_sequence", {"INPUT": "sum"}, {"OUTPUT": "OUT"})
    + " ] }\n"
)

ENSEMBLES = {
    "add_sub_twice": ADD_SUB_TWICE,
    "nobatch_sum": NOBATCH,
    "echo_twice": STRINGS,
    "labelled_sum": LABELLED,
    "accumulate": ACCUMULATE,
}

STEP_MODELS = ("simple", "simple_identity", "simple_sequence", "simple_sequence_state")


def _write_repo(root: Path) -> None:
    for name in STEP_MODELS:
        shutil.copytree(SAMPLES / name, root / name)
    for name, config in ENSEMBLES.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\n' + config)
    (root / "labelled_sum" / "labels.txt").write_text("".join(f"class{i}\n" for i in range(16)))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    for name in STEP_MODELS:
        if not (SAMPLES / name / "config.pbtxt").is_file():
            pytest.skip(f"the sample model {name} is missing in {SAMPLES}: run `make models`")
    root = tmp_path_factory.mktemp("repo") / "models"
    _write_repo(root)
    srv = FwServer(
        FW_BIN, None, "--model-repository", str(root), "--model-control-mode", "explicit", grpc=True
    )
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


def _client(server: FwServer, proto: str):
    if proto == "grpc":
        return grpcclient, grpcclient.InferenceServerClient(server.grpc_url)
    return httpclient, httpclient.InferenceServerClient(server.url)


def _add_sub_inputs(mod, rows: int, binary: bool = True) -> tuple[np.ndarray, np.ndarray, list]:
    a = np.tile(np.arange(16, dtype=np.int32), (rows, 1)) + np.arange(rows, dtype=np.int32)[:, None]
    b = np.full((rows, 16), 3, dtype=np.int32)
    ins = [mod.InferInput("A", [rows, 16], "INT32"), mod.InferInput("B", [rows, 16], "INT32")]
    for t, v in zip(ins, (a, b), strict=True):
        if mod is httpclient:
            t.set_data_from_numpy(v, binary_data=binary)
        else:
            t.set_data_from_numpy(v)
    return a, b, ins


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_load_runs_the_steps_and_reports_the_ensemble(server: FwServer, proto: str) -> None:
    mod, c = _client(server, proto)
    c.load_model("add_sub_twice")
    assert c.is_model_ready("add_sub_twice") and c.is_model_ready("simple"), "its model loads with it"
    for binary in (True, False) if proto == "http" else (True,):
        a, b, ins = _add_sub_inputs(mod, 3, binary)
        r = c.infer("add_sub_twice", ins)
        np.testing.assert_array_equal(r.as_numpy("OUT_A"), 2 * a)
        np.testing.assert_array_equal(r.as_numpy("OUT_B"), 2 * b)
        np.testing.assert_array_equal(r.as_numpy("OUT_C"), 2 * a)
    # One output asked for: only it comes back.
    a, _, ins = _add_sub_inputs(mod, 1)
    r = c.infer("add_sub_twice", ins, outputs=[mod.InferRequestedOutput("OUT_C")])
    np.testing.assert_array_equal(r.as_numpy("OUT_C"), 2 * a)
    assert r.as_numpy("OUT_A") is None
    if proto == "http":
        meta, cfg = c.get_model_metadata("add_sub_twice"), c.get_model_config("add_sub_twice")
        steps = cfg["ensemble_scheduling"]["step"]
    else:
        meta = c.get_model_metadata("add_sub_twice", as_json=True)
        cfg = c.get_model_config("add_sub_twice", as_json=True)["config"]
        steps = cfg["ensemble_scheduling"]["step"]
    assert meta["platform"] == "ensemble" and cfg["platform"] == "ensemble"
    assert [i["name"] for i in meta["inputs"]] == ["A", "B"] and meta["inputs"][0]["shape"] in (
        [-1, 16],
        ["-1", "16"],
    )
    assert [s["model_name"] for s in steps] == ["simple"] * 3
    assert steps[1]["input_map"] == {"INPUT0": "sum", "INPUT1": "diff"}
    assert int(steps[2]["model_version"]) == 1


def test_concurrent_requests_and_statistics(server: FwServer) -> None:
    _, c = _client(server, "grpc")
    c.load_model("add_sub_twice")
    before = c.get_inference_statistics("add_sub_twice", as_json=True)["model_stats"][0]

    def run(k: int) -> None:
        g = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            for i in range(20):
                a, b, ins = _add_sub_inputs(grpcclient, 1 + (k + i) % 4)
                r = g.infer("add_sub_twice", ins)
                np.testing.assert_array_equal(r.as_numpy("OUT_A"), 2 * a)
                np.testing.assert_array_equal(r.as_numpy("OUT_B"), 2 * b)
        finally:
            g.close()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(run, range(16)))
    after = c.get_inference_statistics("add_sub_twice", as_json=True)["model_stats"][0]
    done = int(after["inference_stats"]["success"]["count"]) - int(
        before["inference_stats"]["success"].get("count", 0)
    )
    assert done == 16 * 20, after


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_ensemble_without_batch_axis_over_a_batched_model(server: FwServer, proto: str) -> None:
    mod, c = _client(server, proto)
    c.load_model("nobatch_sum")
    cfg = (
        c.get_model_config("nobatch_sum")
        if proto == "http"
        else c.get_model_config("nobatch_sum", as_json=True)["config"]
    )
    assert int(cfg.get("max_batch_size", 0)) == 0
    a, b = np.arange(16, dtype=np.int32), np.full(16, 5, dtype=np.int32)
    ins = [mod.InferInput("A", [16], "INT32"), mod.InferInput("B", [16], "INT32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    r = c.infer("nobatch_sum", ins)
    np.testing.assert_array_equal(r.as_numpy("SUM"), a + b)
    assert list(r.as_numpy("SUM").shape) == [16]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_bytes_through_an_ensemble(server: FwServer, proto: str) -> None:
    mod, c = _client(server, proto)
    c.load_model("echo_twice")
    words = np.array([["héllo".encode(), b"", b"three words here"], [b"a", b"b", b"c"]], dtype=np.object_)
    t = mod.InferInput("TEXT", list(words.shape), "BYTES")
    t.set_data_from_numpy(words)
    r = c.infer("echo_twice", [t])
    np.testing.assert_array_equal(r.as_numpy("ECHO"), words)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_classification_with_the_ensembles_labels(server: FwServer, proto: str) -> None:
    mod, c = _client(server, proto)
    c.load_model("labelled_sum")
    _, _, ins = _add_sub_inputs(mod, 2)
    r = c.infer("labelled_sum", ins, outputs=[mod.InferRequestedOutput("SUM", class_count=2)])
    top = r.as_numpy("SUM")
    row0 = [x.decode() if isinstance(x, bytes) else x for x in top[0]]
    # Row 0 sums to 3..18 (A = 0..15, B = 3): the largest are at 15 and 14.
    assert row0 == ["18:15:class15", "17:14:class14"], row0


def test_sequence_flags_through_ensembles(server: FwServer) -> None:
    """Triton's L0_simple_ensemble sequence test, and sequences through stateful steps.

    A stateless ensemble takes sequence_id/sequence_start/sequence_end and answers them back as response parameters,
    in the order the stream sent the requests; an ensemble whose steps are stateful carries each sequence's state from
    request to request, two sequences interleaved on one stream without waiting for answers.
    """
    c = httpclient.InferenceServerClient(server.url)
    for name in ("add_sub_twice", "accumulate"):
        c.load_model(name)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    got: list = []
    done = threading.Event()

    def callback(result, error) -> None:
        got.append(error if error is not None else result)
        if len(got) == expected:
            done.set()

    _, _, ins = _add_sub_inputs(grpcclient, 1)
    expected = 3
    g.start_stream(callback=callback)
    try:
        for i, (start, end) in enumerate([(True, False), (False, False), (False, True)]):
            g.async_stream_infer(
                "add_sub_twice",
                ins,
                request_id=f"r{i}",
                sequence_id=4242,
                sequence_start=start,
                sequence_end=end,
            )
        assert done.wait(30), got
    finally:
        g.stop_stream()
    flags = []
    for r in got:
        assert not isinstance(r, Exception), r
        p = r.get_response().parameters
        flags.append([p["sequence_start"].bool_param, p["sequence_end"].bool_param])
        assert p["sequence_id"].int64_param == 4242
    assert flags == [[True, False], [False, False], [False, True]]

    # Two sequences of the stateful ensemble, interleaved, sent without waiting.
    xs = {7001: [5, 3, 2, 10], "seq-b": [1, 1, 1, 1]}
    got.clear()
    done.clear()
    expected = 8
    g.start_stream(callback=callback)
    try:
        for i in range(4):
            for sid, vals in xs.items():
                t = grpcclient.InferInput("A", [1, 1], "INT32")
                t.set_data_from_numpy(np.array([[vals[i]]], dtype=np.int32))
                g.async_stream_infer(
                    "accumulate",
                    [t],
                    request_id=f"{sid}-{i}",
                    sequence_id=sid,
                    sequence_start=i == 0,
                    sequence_end=i == 3,
                )
        assert done.wait(30), got
    finally:
        g.stop_stream()
    answers: dict[str, list[int]] = {}
    for r in got:
        assert not isinstance(r, Exception), r
        sid, i = r.get_response().id.rsplit("-", 1)
        answers.setdefault(sid, []).append((int(i), int(r.as_numpy("OUT")[0, 0])))
    for sid, vals in xs.items():
        running = np.cumsum(vals).tolist()
        running[0] += 1  # simple_sequence adds START
        assert [v for _, v in sorted(answers[str(sid)])] == running, answers

    # HTTP: the parameters back in the JSON answer; the stateful rules' refusals.
    t = httpclient.InferInput("A", [1, 1], "INT32")
    t.set_data_from_numpy(np.array([[4]], dtype=np.int32))
    r = c.infer("accumulate", [t], sequence_id=99, sequence_start=True)
    assert r.get_response()["parameters"] == {
        "sequence_id": 99,
        "sequence_start": True,
        "sequence_end": False,
    }
    assert r.as_numpy("OUT").tolist() == [[5]]
    r = c.infer("accumulate", [t], sequence_id=99, sequence_end=True)
    assert r.as_numpy("OUT").tolist() == [[8]]
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        c.infer("accumulate", [t], sequence_id=99)
    with pytest.raises(InferenceServerException, match="sequence_id"):
        c.infer("accumulate", [t])
    _, _, ins = _add_sub_inputs(httpclient, 1)
    assert "parameters" not in c.infer("add_sub_twice", ins).get_response()


def test_unload_with_and_without_dependents(server: FwServer) -> None:
    c = httpclient.InferenceServerClient(server.url)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    for name in ENSEMBLES:
        c.unload_model(name)
    c.load_model("labelled_sum")
    c.unload_model("labelled_sum")  # without: its model stays
    assert c.is_model_ready("simple") and not c.is_model_ready("labelled_sum")
    c.load_model("labelled_sum")
    c.unload_model("labelled_sum", unload_dependents=True)
    assert not c.is_model_ready("simple") and not c.is_model_ready("labelled_sum")
    g.load_model("add_sub_twice")
    g.unload_model("add_sub_twice", unload_dependents=True)
    assert not g.is_model_ready("simple")
    # Unloading a model unloads the ensembles that run it, as Triton does.
    g.load_model("nobatch_sum")
    assert g.is_model_ready("nobatch_sum")
    g.unload_model("simple")
    assert not g.is_model_ready("nobatch_sum") and not g.is_model_ready("simple")
    g.load_model("nobatch_sum")
    ins = [grpcclient.InferInput("A", [16], "INT32"), grpcclient.InferInput("B", [16], "INT32")]
    for t in ins:
        t.set_data_from_numpy(np.zeros(16, dtype=np.int32))
    assert g.infer("nobatch_sum", ins).as_numpy("SUM").shape == (16,)


def test_a_broken_pipeline_is_refused_with_the_reason(server: FwServer) -> None:
    c = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException, match="failed to load 'add_sub_twice'") as e:
        c.load_model("add_sub_twice", config='{"platform": "ensemble"}')
    assert "ensemble_scheduling" in str(e.value)
    override = {
        "platform": "ensemble",
        "max_batch_size": 8,
        "input": [
            {"name": "A", "data_type": "TYPE_INT32", "dims": [16]},
            {"name": "B", "data_type": "TYPE_INT32", "dims": [16]},
        ],
        "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [16]}],
        "ensemble_scheduling": {
            "step": [
                {
                    "model_name": "simple",
                    "model_version": -1,
                    "input_map": {"INPUT0": "A", "INPUT1": "nowhere"},
                    "output_map": {"OUTPUT0": "OUT"},
                }
            ]
        },
    }
    with pytest.raises(InferenceServerException, match="nowhere") as e:
        c.load_model("add_sub_twice", config=json.dumps(override))
    assert "neither an input of the ensemble nor written by a step" in str(e.value)
