"""Triton's generate extension (``POST /v2/models/{m}/generate`` and ``/generate_stream``) on the real ``fw serve``.

Starts the ``fw`` binary (FW_BIN) on a Triton-layout repository of the sample models ``make models`` writes
(FW_MODELS_DIR/triton): ``simple_identity`` (a BYTES identity), ``simple`` (INT32 sum and difference) and
``simple_sequence_state`` (an accumulator whose running sum is implicit state). Requests are sent as Triton's
generate clients send them (a flat JSON object; ``Accept: text/event-stream`` for the stream),
and the Server-Sent Events are parsed from the raw bytes, so the framing itself is checked.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from fwserve import FwServer

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
SAMPLES = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models") / "triton"
MODELS = ["simple_identity", "simple", "simple_sequence_state"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FwServer]:
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    for name in MODELS:
        if not (SAMPLES / name / "config.pbtxt").is_file():
            pytest.skip(f"the sample model {name} is missing in {SAMPLES}: run `make models`")
    root = tmp_path_factory.mktemp("repo") / "models"
    for name in MODELS:
        shutil.copytree(SAMPLES / name, root / name)
    srv = FwServer(FW_BIN, None, "--model-repository", str(root))
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


class Reply(NamedTuple):
    status_code: int
    headers: Any
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _post(url: str, data: str | None = None, json_body: Any = None, headers: dict | None = None) -> Reply:
    """POST as Triton's generate clients do (a JSON text body); an error status is a reply, not an exception."""
    body = (data if data is not None else json.dumps(json_body)).encode()
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return Reply(r.status, r.headers, r.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, e.headers, e.read())


def _events(body: bytes) -> list[dict]:
    """The data of each Server-Sent Event; every chunk must be ``data: ...`` ended by a blank line."""
    assert body.endswith(b"\n\n"), body
    out = []
    for chunk in body[:-2].split(b"\n\n"):
        assert chunk.startswith(b"data: "), chunk
        out.append(json.loads(chunk[len(b"data: ") :]))
    return out


def test_generate_and_stream(server: FwServer) -> None:
    url = f"http://{server.url}/v2/models/simple_identity"
    r = _post(f"{url}/generate", data=json.dumps({"INPUT0": "hello world", "id": "42", "temperature": 0}))
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json", r.text
    assert r.json() == {
        "OUTPUT0": "hello world",
        "id": "42",
        "model_name": "simple_identity",
        "model_version": "1",
    }

    r = _post(
        f"{url}/generate_stream",
        data=json.dumps({"INPUT0": ["a", "b"], "parameters": {"max_tokens": 4}}),
        headers={"Accept": "text/event-stream"},
    )
    assert r.status_code == 200 and r.headers["Content-Type"] == "text/event-stream; charset=utf-8", r.text
    assert _events(r.content) == [
        {"OUTPUT0": ["a", "b"], "model_name": "simple_identity", "model_version": "1"}
    ]

    # simple: INT32 lists of 16, a batch of one.
    r = _post(
        f"http://{server.url}/v2/models/simple/generate",
        json_body={"INPUT0": list(range(16)), "INPUT1": [2] * 16},
    )
    assert r.status_code == 200, r.text
    assert r.json()["OUTPUT0"] == [i + 2 for i in range(16)] and r.json()["OUTPUT1"] == [
        i - 2 for i in range(16)
    ]


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("{}", "expected 1 inputs but got 0 inputs for model 'simple_identity'"),
        ('{"INPUT0": 123}', "attempt to access JSON non-string as string"),
        ('{"INPUT0": "a", "INPUT0": "b"}', "input 'INPUT0' already exists in request"),
        ('{"INPUT0": "a", "PARAMS": {"P": 1}}', "parameter 'PARAMS' has invalid type"),
        ('{"INPUT0": "a", "parameters": 1}', "Expected JSON object for keyword: 'parameters'"),
        (
            '{"INPUT0": "a", "parameters": {"nested": {"twice": 1}}}',
            "Converting keyword: 'parameters': parameter 'nested' has invalid type.",
        ),
    ],
)
def test_refused_with_tritons_sentences(server: FwServer, route: str, body: str, says: str) -> None:
    """The sentences Triton's own generate tests (qa/L0_http/generate_endpoint_test.py) look for, as JSON."""
    r = _post(f"http://{server.url}/v2/models/simple_identity/{route}", data=body)
    assert r.status_code == 400 and r.headers["Content-Type"] == "application/json", r.text
    assert says in r.json()["error"]


def test_sequence_through_generate(server: FwServer) -> None:
    """sequence_id / sequence_start / sequence_end as generate parameters drive a stateful model, on both routes."""

    def run(seq: int) -> list[int]:
        got = []
        values = [seq, 7, 5, 3]
        for i, v in enumerate(values):
            body = {"INPUT": v, "sequence_id": seq}
            params = {"sequence_start": i == 0, "sequence_end": i == len(values) - 1}
            if i % 2:
                body["parameters"] = params
            else:
                body.update(params)
            route = "generate_stream" if i == 2 else "generate"
            r = _post(f"http://{server.url}/v2/models/simple_sequence_state/{route}", json_body=body)
            assert r.status_code == 200, r.text
            got.append(_events(r.content)[0]["OUTPUT"] if route == "generate_stream" else r.json()["OUTPUT"])
        return got

    with ThreadPoolExecutor(4) as pool:
        for seq, got in zip(range(100, 108), pool.map(run, range(100, 108)), strict=True):
            assert got == [seq, seq + 7, seq + 12, seq + 15]

    r = _post(f"http://{server.url}/v2/models/simple_sequence_state/generate", json_body={"INPUT": 1})
    assert r.status_code == 400 and "sequence" in r.json()["error"], r.text
