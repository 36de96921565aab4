"""Stateful models (Triton's sequence batcher) served by ``fw serve --model-repository``, driven by tritonclient.

Starts the real ``fw`` binary (FW_BIN) on the stateful models of the Triton sample repository that
``make models`` writes (FW_MODELS_DIR/triton, python/fw/triton_samples.py): ``simple_sequence`` and
``simple_dyna_sequence`` (a UINT64 CORRID) as Triton's ONNX samples compute them,
``simple_string_dyna_sequence`` (a STRING CORRID, string sequence IDs, a running sum), and
``simple_sequence_state``, an accumulator whose running sum is implicit state kept by the server. Requests go the ways Triton's
sequence examples send them: HTTP sync, gRPC sync and the gRPC stream (``start_stream`` +
``async_stream_infer`` with ``sequence_id``), and the examples' expected outputs must come out.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
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
MODELS = ["simple_sequence", "simple_dyna_sequence", "simple_string_dyna_sequence", "simple_sequence_state"]

# Triton's examples: two integer sequences and one with a string ID, values [first] + VALUES.
VALUES = [11, 7, 5, 3, 2, 0, 1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    for name in MODELS:
        if not (SAMPLES / name / "config.pbtxt").is_file():
            pytest.skip(f"the stateful sample model {name} is missing in {SAMPLES}: run `make models`")
    root = tmp_path_factory.mktemp("repo") / "models"
    for name in MODELS:
        shutil.copytree(SAMPLES / name, root / name)
    load = [a for name in MODELS for a in ("--load-model", name)]
    srv = FwServer(
        FW_BIN, None, "--model-repository", str(root), "--model-control-mode", "explicit", *load, grpc=True
    )
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


def _request(mod, value: int) -> tuple[list, list]:
    data = np.full((1, 1), value, dtype=np.int32)
    inp = mod.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(data)
    return [inp], [mod.InferRequestedOutput("OUTPUT")]


def _sync(client, mod, model: str, seq_id, values: list[int]) -> list[int]:
    """One sequence, one request at a time (Triton's *_sequence_sync_infer_client.py)."""
    out = []
    for i, v in enumerate(values):
        ins, outs = _request(mod, v)
        r = client.infer(
            model,
            ins,
            outputs=outs,
            sequence_id=seq_id,
            sequence_start=i == 0,
            sequence_end=i == len(values) - 1,
        )
        out.append(int(r.as_numpy("OUTPUT")[0][0]))
    return out


def _stream(
    url: str, sequences: list[tuple[str, object, list[int]]], interleave: bool
) -> dict[object, list[int]]:
    """Sequences sent on one gRPC stream without waiting (Triton's simple_grpc_sequence_stream_infer_client.py):
    one after the other as the example does, or interleaved request by request. Returns each one's outputs,
    in its requests' order (matched by request id)."""
    done: queue.Queue = queue.Queue()
    sends = []
    for model, seq_id, values in sequences:
        sends.append([(model, seq_id, i, v, i == 0, i == len(values) - 1) for i, v in enumerate(values)])
    order = (
        [s for group in zip(*sends, strict=True) for s in group]
        if interleave
        else [s for g in sends for s in g]
    )
    with grpcclient.InferenceServerClient(url) as c:
        c.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), done))
        for model, seq_id, i, v, start, end in order:
            ins, outs = _request(grpcclient, v)
            c.async_stream_infer(
                model, ins, outputs=outs, request_id=f"{seq_id}_{i}", sequence_id=seq_id,
                sequence_start=start, sequence_end=end,
            )  # fmt: skip
        got: dict[object, dict[int, int]] = {seq_id: {} for _, seq_id, _ in sequences}
        for _ in order:
            result, error = done.get(timeout=30)
            assert error is None, error
            rid = result.get_response().id
            seq, i = rid.rsplit("_", 1)
            key = next(k for k in got if str(k) == seq)
            got[key][int(i)] = int(result.as_numpy("OUTPUT")[0][0])
        c.stop_stream()
    return {k: [v[i] for i in sorted(v)] for k, v in got.items()}


def _example_sequences(model: str) -> list[tuple[str, object, list[int]]]:
    """The sequences of Triton's examples: without -d, simple_sequence with two integer IDs and a
    UUID; with -d, simple_dyna_sequence with the integer IDs and simple_string_dyna_sequence with
    the string ID "1002" (its CORRID is a string that the model reads as a number)."""
    seqs = [(model, 1000, [0, *VALUES]), (model, 1001, [100, *(-v for v in VALUES)])]
    if model == "simple_sequence":
        seqs.append((model, str(uuid.uuid4()), [20, *(-v for v in VALUES)]))
    else:
        seqs.append(("simple_string_dyna_sequence", "1002", [20, *(-v for v in VALUES)]))
    return seqs


def _expected(model: str, seq_id, values: list[int]) -> list[int]:
    """What Triton's examples check: START adds one; the dyna models add the ID on the END request;
    simple_string_dyna_sequence answers the running sum (START not added)."""
    want = [values[0] + 1, *values[1:]]
    if model == "simple_string_dyna_sequence":
        want = [int(x) for x in np.cumsum(values)]
    if model != "simple_sequence":
        want[-1] += int(seq_id)
    return want


@pytest.mark.parametrize("model", ["simple_sequence", "simple_dyna_sequence"])
@pytest.mark.parametrize("how", ["http", "grpc", "stream", "stream-interleaved"])
def test_triton_examples_expected_outputs(server: FwServer, model: str, how: str) -> None:
    seqs = _example_sequences(model)
    if how.startswith("stream"):
        got = _stream(server.grpc_url, seqs, interleave=how == "stream-interleaved")
    else:
        mod = httpclient if how == "http" else grpcclient
        with mod.InferenceServerClient(server.url if how == "http" else server.grpc_url) as c:
            got = {seq_id: _sync(c, mod, m, seq_id, values) for m, seq_id, values in seqs}
    for m, seq_id, values in seqs:
        assert got[seq_id] == _expected(m, seq_id, values), (how, seq_id)


@pytest.mark.parametrize("how", ["http", "grpc", "stream"])
def test_string_corrid_many_sequences(server: FwServer, how: str) -> None:
    """simple_string_dyna_sequence: many string-ID sequences at once, batched together (the oldest
    strategy), each its own running sum and its own ID added at the end; and the same on
    simple_dyna_sequence (UINT64 CORRID) with IDs above 2**32, which Triton's UINT64 carries."""
    rng = np.random.default_rng(3)
    str_seqs = [
        ("simple_string_dyna_sequence", str(500 + k), [int(x) for x in rng.integers(-50, 50, 6)])
        for k in range(8)
    ]
    big = 1 << 40
    int_seqs = [
        ("simple_dyna_sequence", big + 600 + k, [int(x) for x in rng.integers(-50, 50, 6)]) for k in range(4)
    ]
    if how == "stream":
        got = _stream(server.grpc_url, str_seqs + int_seqs, interleave=True)
    else:
        mod = httpclient if how == "http" else grpcclient
        url = server.url if how == "http" else server.grpc_url

        def one(seq):
            with mod.InferenceServerClient(url) as c:
                return seq[1], _sync(c, mod, seq[0], seq[1], seq[2])

        with ThreadPoolExecutor(6) as pool:
            got = dict(pool.map(one, str_seqs + int_seqs))
    for _, seq_id, values in str_seqs:
        assert got[seq_id] == [*np.cumsum(values)[:-1], int(np.sum(values)) + int(seq_id)], seq_id
    for _, seq_id, values in int_seqs:
        # The model casts CORRID to INT32: the ID's low 32 bits are added.
        assert got[seq_id] == [values[0] + 1, *values[1:-1], values[-1] + (seq_id & 0xFFFFFFFF)], seq_id


@pytest.mark.parametrize("proto", ["http", "grpc", "stream"])
def test_corrid_kind_mismatch_refused(server: FwServer, proto: str) -> None:
    """An integer sequence ID to a STRING-CORRID model and a string one to a UINT64-CORRID model:
    Triton's sentence, 400 / INVALID_ARGUMENT, and the sequence was not started."""
    cases = [
        (
            "simple_string_dyna_sequence",
            77,
            "sequence batching control 'CORRID' data-type is 'UINT64', but model "
            "'simple_string_dyna_sequence' expects 'BYTES'; send sequence_id as a string",
        ),
        (
            "simple_dyna_sequence",
            "77",
            "sequence batching control 'CORRID' data-type is 'BYTES', but model "
            "'simple_dyna_sequence' expects 'UINT64'; send sequence_id as an unsigned integer",
        ),
    ]
    if proto == "stream":
        done: queue.Queue = queue.Queue()
        with grpcclient.InferenceServerClient(server.grpc_url) as c:
            c.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), done))
            for model, seq_id, _ in cases:
                ins, _ = _request(grpcclient, 1)
                c.async_stream_infer(model, ins, sequence_id=seq_id, sequence_start=True)
            msgs = sorted(done.get(timeout=30)[1].message() for _ in cases)
            c.stop_stream()
        for (_, _, want), msg in zip(sorted(cases, key=lambda x: x[2]), msgs, strict=True):
            assert msg.startswith(want), msg
        return
    mod = httpclient if proto == "http" else grpcclient
    with mod.InferenceServerClient(server.url if proto == "http" else server.grpc_url) as c:
        for model, seq_id, want in cases:
            ins, _ = _request(mod, 1)
            with pytest.raises(InferenceServerException) as e:
                c.infer(model, ins, sequence_id=seq_id, sequence_start=True)
            assert e.value.message().startswith(want), e.value.message()
            assert e.value.status() == ("400" if proto == "http" else "StatusCode.INVALID_ARGUMENT")
            # Not started: the next request of that ID is refused as an unknown sequence.
            ok_id = str(seq_id) if isinstance(seq_id, int) else int(seq_id)
            with pytest.raises(InferenceServerException, match="must specify the START flag"):
                c.infer(model, ins, sequence_id=ok_id)


def test_implicit_state_many_sequences(server: FwServer) -> None:
    """The accumulator: each sequence its own running sum, over the three ways at once, IDs reused after END."""

    def run(k: int) -> None:
        values = [int(x) for x in np.random.default_rng(k).integers(-50, 50, size=9)]
        want = list(np.cumsum(values))
        for rnd in range(2):  # the same ID again after END starts from the initial (zero) state
            seq_id = 7000 + k if k % 3 else f"acc-{k}"
            if k % 3 == 0:
                got = _stream(server.grpc_url, [("simple_sequence_state", seq_id, values)], interleave=False)[
                    seq_id
                ]
            else:
                mod = httpclient if k % 3 == 1 else grpcclient
                with mod.InferenceServerClient(server.url if mod is httpclient else server.grpc_url) as c:
                    got = _sync(c, mod, "simple_sequence_state", seq_id, values)
            assert got == want, (k, rnd)

    with ThreadPoolExecutor(6) as pool:
        for fut in [pool.submit(run, k) for k in range(12)]:
            fut.result()


def test_stream_interleaved_state(server: FwServer) -> None:
    """Eight sequences sent request by request in turn on one stream: state follows each sequence in order."""
    seqs = [("simple_sequence_state", 9000 + s, [s * 10 + i for i in range(12)]) for s in range(8)]
    got = _stream(server.grpc_url, seqs, interleave=True)
    for _, seq_id, values in seqs:
        assert got[seq_id] == list(np.cumsum(values)), seq_id


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_state_and_controls_are_the_servers(server: FwServer, proto: str) -> None:
    """Clients see INPUT and OUTPUT only: the controls and the state are not theirs to send or read."""
    mod = httpclient if proto == "http" else grpcclient
    c = mod.InferenceServerClient(server.url if proto == "http" else server.grpc_url)
    meta = c.get_model_metadata("simple_sequence_state", **({} if proto == "http" else {"as_json": True}))
    assert [t["name"] for t in meta["inputs"]] == ["INPUT"] and [t["name"] for t in meta["outputs"]] == [
        "OUTPUT"
    ]
    ins, _ = _request(mod, 1)
    r = c.infer("simple_sequence_state", ins, sequence_id=31, sequence_start=True)
    assert [
        o["name"] for o in r.get_response(**({} if proto == "http" else {"as_json": True}))["outputs"]
    ] == ["OUTPUT"]
    with pytest.raises(InferenceServerException) as e:
        c.infer("simple_sequence_state", ins, outputs=[mod.InferRequestedOutput("ACC_OUT")], sequence_id=31)
    assert 'unknown output "ACC_OUT"' in e.value.message()
    assert "unexpected inference output 'ACC_OUT' for model" in e.value.message()  # Triton's sentence
    start = mod.InferInput("START", [1, 1], "BOOL")
    start.set_data_from_numpy(np.ones((1, 1), dtype=bool))
    with pytest.raises(InferenceServerException) as e:
        c.infer("simple_sequence_state", [*ins, start], sequence_id=31, sequence_end=True)
    assert 'unknown input "START"' in e.value.message()
    c.close()


@pytest.mark.parametrize("proto", ["http", "grpc", "stream"])
def test_refusals_with_tritons_sentences(server: FwServer, proto: str) -> None:
    """An unknown sequence, and a request without a sequence ID to a stateful model: Triton's words, 400."""
    unknown = "inference request for sequence 4242 to model 'simple_sequence_state' must specify the START flag on the first request of the sequence"
    no_id = "inference request to model 'simple_sequence_state' must specify a non-zero or non-empty correlation ID"
    if proto == "stream":
        done: queue.Queue = queue.Queue()
        with grpcclient.InferenceServerClient(server.grpc_url) as c:
            c.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), done))
            ins, _ = _request(grpcclient, 1)
            c.async_stream_infer("simple_sequence_state", ins, sequence_id=4242)
            c.async_stream_infer("simple_sequence_state", ins)
            msgs = sorted(done.get(timeout=30)[1].message() for _ in range(2))
            c.stop_stream()
        assert msgs == sorted([unknown, no_id])
        return
    mod = httpclient if proto == "http" else grpcclient
    with mod.InferenceServerClient(server.url if proto == "http" else server.grpc_url) as c:
        ins, _ = _request(mod, 1)
        for kwargs, want in [({"sequence_id": 4242}, unknown), ({}, no_id)]:
            with pytest.raises(InferenceServerException) as e:
                c.infer("simple_sequence_state", ins, **kwargs)
            assert e.value.message() == want
            assert e.value.status() == ("400" if proto == "http" else "StatusCode.INVALID_ARGUMENT")


def _state_config(idle_us: int) -> str:
    """simple_sequence_state's configuration in Triton's JSON (a load request's override)."""
    return json.dumps(
        {
            "name": "simple_sequence_state",
            "platform": "onnxruntime_onnx",
            "max_batch_size": 1,
            "sequence_batching": {
                "max_sequence_idle_microseconds": idle_us,
                "control_input": [
                    {
                        "name": "START",
                        "control": [{"kind": "CONTROL_SEQUENCE_START", "bool_false_true": [False, True]}],
                    },
                    {
                        "name": "READY",
                        "control": [{"kind": "CONTROL_SEQUENCE_READY", "fp32_false_true": [0, 1]}],
                    },
                ],
                "state": [
                    {
                        "input_name": "ACC_IN",
                        "output_name": "ACC_OUT",
                        "data_type": "TYPE_INT32",
                        "dims": [1],
                        "initial_state": [
                            {"data_type": "TYPE_INT32", "dims": [1], "zero_data": True, "name": "zero"}
                        ],
                    }
                ],
            },  # fmt: skip
            "input": [{"name": "INPUT", "data_type": "TYPE_INT32", "dims": [1]}],
            "output": [{"name": "OUTPUT", "data_type": "TYPE_INT32", "dims": [1]}],
        }
    )


def test_idle_sequence_freed(server: FwServer) -> None:
    """max_sequence_idle_microseconds (here 200 ms, one slot, loaded with a config override): an idle
    sequence is freed, its slot goes to the next sequence and its later requests are refused."""
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        c.load_model("simple_sequence_state", config=_state_config(200_000))
        cfg = c.get_model_config("simple_sequence_state", as_json=True)["config"]
        assert int(cfg["sequence_batching"]["max_sequence_idle_microseconds"]) == 200_000
        ins, _ = _request(grpcclient, 5)
        c.infer("simple_sequence_state", ins, sequence_id=1, sequence_start=True)
        t0 = time.monotonic()
        c.infer("simple_sequence_state", ins, sequence_id=2, sequence_start=True)  # waits for the only slot
        assert time.monotonic() - t0 >= 0.15
        with pytest.raises(InferenceServerException) as e:
            c.infer("simple_sequence_state", ins, sequence_id=1)
        assert "sequence 1 to model 'simple_sequence_state' must specify the START flag" in e.value.message()
    finally:
        c.load_model("simple_sequence_state")  # back to its config.pbtxt for the other tests
        c.close()


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_backlog_timeout(server: FwServer, proto: str) -> None:
    """A request's ``timeout`` bounds its sequence's wait for a slot (one slot, held by sequence 1): past it,
    Triton's UNAVAILABLE (HTTP 503) with its sentence, and the sequence is forgotten; the slotted sequence goes on."""
    g = grpcclient.InferenceServerClient(server.grpc_url)
    mod = httpclient if proto == "http" else grpcclient
    c = mod.InferenceServerClient(server.url if proto == "http" else server.grpc_url)
    try:
        g.load_model("simple_sequence_state", config=_state_config(60_000_000))
        ins, _ = _request(mod, 5)
        c.infer("simple_sequence_state", ins, sequence_id=1, sequence_start=True)
        with pytest.raises(InferenceServerException) as e:
            c.infer("simple_sequence_state", ins, sequence_id=2, sequence_start=True, timeout=100_000)
        assert e.value.message() == "timeout of the corresponding sequence has been expired"
        assert e.value.status() == ("503" if proto == "http" else "StatusCode.UNAVAILABLE")
        with pytest.raises(InferenceServerException) as e:
            c.infer("simple_sequence_state", ins, sequence_id=2, sequence_end=True)
        assert "must specify the START flag" in e.value.message()
        r = c.infer("simple_sequence_state", ins, sequence_id=1, sequence_end=True)
        assert r.as_numpy("OUTPUT").ravel().tolist() == [10]
        r = c.infer(
            "simple_sequence_state",
            ins,
            sequence_id=2,
            sequence_start=True,
            sequence_end=True,
            timeout=100_000,
        )
        assert r.as_numpy("OUTPUT").ravel().tolist() == [5]
    finally:
        g.load_model("simple_sequence_state")
        g.close()
        c.close()


def test_configuration_reported(server: FwServer) -> None:
    """Triton's configuration extension: sequence_batching with Triton's defaults, the same over HTTP and gRPC."""
    h = httpclient.InferenceServerClient(server.url)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    for model, strategy in [
        ("simple_sequence", "direct"),
        ("simple_dyna_sequence", "oldest"),
        ("simple_string_dyna_sequence", "oldest"),
    ]:
        hc = h.get_model_config(model)
        gc = g.get_model_config(model, as_json=True)["config"]
        sb = hc["sequence_batching"]
        assert strategy in sb and "dynamic_batching" not in hc
        assert [ci["name"] for ci in sb["control_input"]] == [
            ci["name"] for ci in gc["sequence_batching"]["control_input"]
        ]
        assert (
            int(gc["sequence_batching"]["max_sequence_idle_microseconds"])
            == sb["max_sequence_idle_microseconds"]
        )
        assert [i["name"] for i in hc["input"]] == ["INPUT"]
    assert (
        h.get_model_config("simple_sequence")["sequence_batching"]["max_sequence_idle_microseconds"]
        == 1_000_000
    )
    assert (
        h.get_model_config("simple_dyna_sequence")["sequence_batching"]["oldest"]["max_candidate_sequences"]
        == 1024
    )
    for model, corrid in [
        ("simple_dyna_sequence", "TYPE_UINT64"),
        ("simple_string_dyna_sequence", "TYPE_STRING"),
    ]:
        for sb in (
            h.get_model_config(model)["sequence_batching"],
            g.get_model_config(model, as_json=True)["config"]["sequence_batching"],
        ):
            ctl = next(ci for ci in sb["control_input"] if ci["name"] == "CORRID")["control"][0]
            assert (ctl["kind"], ctl["data_type"]) == ("CONTROL_SEQUENCE_CORRID", corrid), model
    h.close()
    g.close()
