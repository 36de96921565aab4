"""A Triton-layout model repository served by ``fw serve --model-repository``, driven by tritonclient.

Starts the real ``fw`` binary (FW_BIN) on a copy of the Triton sample repository that ``make models``
writes (FW_MODELS_DIR/triton: Triton's sample models rebuilt as ONNX by fw.triton_samples) and checks
Triton's repository extension (index, load with a config override, unload), many models side by
side, Triton's error sentences and the per-model metrics, over HTTP, gRPC and asyncio HTTP.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
import tritonclient.http.aio as aiohttpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
SAMPLES = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models") / "triton"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    if not (SAMPLES / "simple" / "config.pbtxt").is_file():
        pytest.skip(f"Triton sample repository missing in {SAMPLES}: run `make models`")
    dst = tmp_path_factory.mktemp("repo") / "models"
    shutil.copytree(SAMPLES, dst)
    return dst


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[FwServer]:
    srv = FwServer(
        FW_BIN, None, "--model-repository", str(repo), "--model-control-mode", "explicit",
        "--load-model", "simple", "--load-model", "nobatch", grpc=True,
    )  # fmt: skip
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


def _simple_inputs(mod, dtype: str = "INT32") -> tuple[list, np.ndarray, np.ndarray]:
    np_dtype = np.int32 if dtype == "INT32" else np.int8
    a = np.arange(16, dtype=np_dtype).reshape(1, 16)
    b = np.ones((1, 16), dtype=np_dtype)
    ins = [mod.InferInput("INPUT0", [1, 16], dtype), mod.InferInput("INPUT1", [1, 16], dtype)]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins, a, b


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_index_load_unload_with_config_override(server: FwServer, proto: str) -> None:
    mod = httpclient if proto == "http" else grpcclient
    c = mod.InferenceServerClient(server.url if proto == "http" else server.grpc_url)
    index = (
        c.get_model_repository_index()
        if proto == "http"
        else c.get_model_repository_index(as_json=True)["models"]
    )
    states = {m["name"]: m.get("state", "") for m in index}
    assert states["simple"] == "READY" and states["nobatch"] == "READY"
    assert {"simple_int8", "simple_string", "densenet_onnx", "fixed_batch1"} <= set(states)

    c.load_model("simple_int8")
    assert c.is_model_ready("simple_int8")
    ins, a, b = _simple_inputs(mod, "INT8")
    res = c.infer("simple_int8", ins)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
    c.unload_model("simple_int8")
    assert not c.is_model_ready("simple_int8")
    ready = (
        c.get_model_repository_index()
        if proto == "http"
        else c.get_model_repository_index(as_json=True)["models"]
    )
    (int8,) = [m for m in ready if m["name"] == "simple_int8"]
    assert int8["state"] == "UNAVAILABLE" and int8["reason"] == "unloaded"

    # Triton's simple_*_model_control example: override max_batch_size 8 -> 16 (after a plain
    # reload, which reads config.pbtxt again).
    c.load_model("simple")
    cfg = (
        c.get_model_config("simple")
        if proto == "http"
        else c.get_model_config("simple", as_json=True)["config"]
    )
    assert int(cfg["max_batch_size"]) == 8
    cfg["max_batch_size"] = 16
    c.load_model("simple", config=json.dumps(cfg))
    cfg = (
        c.get_model_config("simple")
        if proto == "http"
        else c.get_model_config("simple", as_json=True)["config"]
    )
    assert int(cfg["max_batch_size"]) == 16
    ins, a, b = _simple_inputs(mod)
    np.testing.assert_array_equal(c.infer("simple", ins).as_numpy("OUTPUT0"), a + b)

    # Clients match Triton's sentences.
    with pytest.raises(InferenceServerException, match="failed to load"):
        c.load_model("simple", config='{"max_batch_size": "lots"}')
    with pytest.raises(InferenceServerException, match="failed to load"):
        c.load_model("no_such_model")
    with pytest.raises(InferenceServerException, match="Request for unknown model"):
        c.get_model_metadata("no_such_model")
    with pytest.raises(InferenceServerException, match="Request for unknown model"):
        c.infer("simple_string_not_there", ins)
    # The failed override left the model serving.
    np.testing.assert_array_equal(c.infer("simple", ins).as_numpy("OUTPUT1"), a - b)


def test_models_side_by_side_with_their_own_statistics_and_metrics(server: FwServer) -> None:
    ins, a, b = _simple_inputs(httpclient)
    x = httpclient.InferInput("x", [4], "FP32")
    x.set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.float32))

    def worker(k: int) -> None:
        c = httpclient.InferenceServerClient(server.url)  # a client per thread: it is not thread-safe
        for i in range(25):
            if (i + k) % 2:
                np.testing.assert_array_equal(c.infer("simple", ins).as_numpy("OUTPUT0"), a + b)
            else:
                np.testing.assert_allclose(c.infer("nobatch", [x]).as_numpy("y"), [1 + 3 + 8, 2 + 3 - 4])

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(worker, range(8)))
    c = httpclient.InferenceServerClient(server.url)
    stats = {s["name"]: s for s in c.get_inference_statistics()["model_stats"]}
    assert stats["simple"]["inference_count"] >= 100 and stats["nobatch"]["inference_count"] >= 100
    nb = c.get_inference_statistics("nobatch")["model_stats"]
    assert len(nb) == 1 and nb[0]["name"] == "nobatch"
    with urllib.request.urlopen(f"http://{server.url}/metrics") as r:
        text = r.read().decode()
    assert 'fw_batch_errors_total{model="nobatch",version="1"} 0' in text
    assert 'fw_rows_total{model="simple",version="1"}' in text
    assert 'fw_model_info{device="cpu",format="onnx",name="nobatch",version="1"} 1' in text


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_custom_identity_int32_as_memory_growth_test_calls_it(server: FwServer, proto: str) -> None:
    # Triton's client example memory_growth_test.py: load nothing by hand,
    # send [1, 16] INT32 to custom_identity_int32, get the same back.
    mod = httpclient if proto == "http" else grpcclient
    c = mod.InferenceServerClient(server.url if proto == "http" else server.grpc_url)
    c.load_model("custom_identity_int32")
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    inp = mod.InferInput("INPUT0", [1, 16], "INT32")
    inp.set_data_from_numpy(x)
    out = c.infer("custom_identity_int32", [inp], outputs=[mod.InferRequestedOutput("OUTPUT0")])
    np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), x)


def test_unprefixed_routes_take_a_model_by_name(server: FwServer) -> None:
    body = json.dumps({"data": [[1, 2, 3, 4]]}).encode()
    req = urllib.request.Request(f"http://{server.url}/predict", body, {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == 400 and "?model=NAME" in json.loads(e.value.read())["error"]["message"]
    with urllib.request.urlopen(f"http://{server.url}/model?model=simple") as r:
        assert json.loads(r.read())["name"] == "simple"
    with urllib.request.urlopen(f"http://{server.url}/health/ready") as r:
        assert json.loads(r.read())["status"] == "ok"


def test_aio_client(server: FwServer) -> None:
    async def run() -> None:
        c = aiohttpclient.InferenceServerClient(server.url)
        try:
            assert await c.is_model_ready("simple")
            index = await c.get_model_repository_index()
            assert any(m["name"] == "densenet_onnx" for m in index)
            ins, a, b = _simple_inputs(aiohttpclient)
            res = await c.infer("simple", ins)
            np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
        finally:
            await c.close()

    asyncio.run(run())


def test_none_mode_refuses_control(repo: Path) -> None:
    # A repository of the models that load: none mode loads every one at start.
    only = repo.parent / "none_repo"
    only.mkdir(exist_ok=True)
    for name in ("simple", "nobatch"):
        if not (only / name).exists():
            shutil.copytree(repo / name, only / name)
    srv = FwServer(FW_BIN, None, "--model-repository", str(only), grpc=True)
    try:
        srv.wait_ready()
        c = httpclient.InferenceServerClient(srv.url)
        with pytest.raises(InferenceServerException, match="explicit model load / unload is not allowed"):
            c.unload_model("simple")
        g = grpcclient.InferenceServerClient(srv.grpc_url)
        # Triton's status and sentence, as its python_grpc_aio_test matches them.
        for call in (g.load_model, g.unload_model):
            with pytest.raises(
                InferenceServerException,
                match=r"\[StatusCode\.UNAVAILABLE\] explicit model load / unload is not allowed",
            ):
                call("simple")
        assert c.is_model_ready("simple") and c.is_model_ready("nobatch")
    finally:
        assert srv.stop() == 0, srv.log()


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_logging_extension(server: FwServer, proto: str) -> None:
    c = (
        httpclient.InferenceServerClient(server.url)
        if proto == "http"
        else grpcclient.InferenceServerClient(server.grpc_url)
    )

    def settings() -> dict:
        s = c.get_log_settings() if proto == "http" else c.get_log_settings(as_json=True)["settings"]
        if proto == "grpc":  # {"log_info": {"boolParam": true}, ...}
            s = {k: next(iter(v.values())) for k, v in s.items()}
        return s

    assert settings()["log_info"] is True
    c.update_log_settings({"log_verbose_level": 1})
    assert int(settings()["log_verbose_level"]) == 1
    c.update_log_settings({"log_verbose_level": 0, "log_info": False})
    s = settings()
    assert s["log_info"] is False and s["log_warning"] is True
    with pytest.raises(
        InferenceServerException, match="log file location can not be updated through network protocol"
    ):
        c.update_log_settings({"log_file": "/tmp/elsewhere.log"})
    c.update_log_settings({"log_info": True})
    assert settings()["log_info"] is True


def test_restricted_apis(repo: Path) -> None:
    """tritonserver's --http-restricted-api and --grpc-restricted-protocol, read unchanged."""
    srv = FwServer(
        FW_BIN, None, "--model-repository", str(repo), "--model-control-mode", "explicit", "--load-model", "simple",
        "--http-restricted-api", "model-repository:admin-key=admin-value",
        "--http-restricted-api", "inference,metadata:infer-key=infer-value",
        "--grpc-restricted-protocol", "model-repository:admin-key=admin-value",
        "--grpc-restricted-protocol", "inference,health:infer-key=infer-value",
        grpc=True,
    )  # fmt: skip
    try:
        srv.wait_ready()
        h = httpclient.InferenceServerClient(srv.url)
        h.get_inference_statistics("simple")  # not restricted
        with pytest.raises(
            InferenceServerException, match="This API is restricted, expecting header 'infer-key'"
        ):
            h.get_server_metadata()
        assert h.get_server_metadata({"infer-key": "infer-value"})["name"] == "fw"
        with pytest.raises(InferenceServerException, match="This API is restricted"):
            h.unload_model("simple", headers={"infer-key": "infer-value"})
        h.load_model("simple", headers={"admin-key": "admin-value"})
        ins, a, b = _simple_inputs(httpclient)
        with pytest.raises(InferenceServerException, match="This API is restricted"):
            h.infer("simple", ins)
        np.testing.assert_array_equal(
            h.infer("simple", ins, headers={"infer-key": "infer-value"}).as_numpy("OUTPUT0"), a + b
        )

        g = grpcclient.InferenceServerClient(srv.grpc_url)
        p = "triton-grpc-protocol-"
        g.get_inference_statistics("simple")
        with pytest.raises(InferenceServerException, match="This protocol is restricted"):
            g.is_server_live()
        assert g.is_server_live({p + "infer-key": "infer-value"})
        with pytest.raises(InferenceServerException, match="This protocol is restricted"):
            g.unload_model("simple", headers={p + "infer-key": "infer-value"})
        gins, _, _ = _simple_inputs(grpcclient)
        with pytest.raises(InferenceServerException, match="This protocol is restricted"):
            g.infer("simple", gins, headers={"test": "1"})
        g.infer("simple", gins, headers={p + "infer-key": "infer-value"})
    finally:
        assert srv.stop() == 0, srv.log()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["model-reposit,health:k1=v1"], "unknown restricted api 'model-reposit'"),
        (
            ["model-repository,health:k1=v1", "metadata,health:k2=v2"],
            "api 'health' can not be specified in multiple config groups",
        ),
    ],
)
def test_restricted_api_flags_refused(repo: Path, flags: list[str], message: str) -> None:
    import subprocess

    args = [str(FW_BIN), "serve", "--model-repository", str(repo), "--port", "0"]
    for f in flags:
        args += ["--http-restricted-api", f]
    out = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_thousand_models_on_demand_with_lru_eviction(tmp_path: Path) -> None:
    """1,000 models, at most 100 resident: HTTP and gRPC clients asking for 300 of them (and one hot
    model throughout) never see a failure; the index lists all 1,000; the least recently used are
    unloaded, and the hot one stays resident."""
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    if not (SAMPLES / "simple" / "config.pbtxt").is_file():
        pytest.skip(f"Triton sample repository missing in {SAMPLES}: run `make models`")
    root = tmp_path / "models"
    onnx = (SAMPLES / "simple" / "1" / "model.onnx").read_bytes()
    config = (SAMPLES / "simple" / "config.pbtxt").read_text()
    for i in range(1000):
        name = f"m{i:04d}"
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.onnx").write_bytes(onnx)
        (root / name / "config.pbtxt").write_text(config.replace('name: "simple"', f'name: "{name}"'))
    srv = FwServer(FW_BIN, None, "--model-repository", str(root), "--max-resident-models", "100", grpc=True)
    try:
        srv.wait_ready()
        http = httpclient.InferenceServerClient(srv.url, concurrency=1)
        index = http.get_model_repository_index()
        assert len(index) == 1000, len(index)

        cold_done = threading.Event()

        def ask(names: list[str], proto: str, hot: bool = False) -> int:
            mod = httpclient if proto == "http" else grpcclient
            client = mod.InferenceServerClient(srv.url if proto == "http" else srv.grpc_url)
            n = 0
            while names or (hot and not cold_done.is_set()):
                name = names.pop() if names else "m0000"
                ins, a, b = _simple_inputs(mod)
                res = client.infer(name, ins)
                np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
                np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
                n += 1
            return n

        cold = [f"m{i:04d}" for i in range(1, 301)]
        with ThreadPoolExecutor(4) as pool:
            hot = [pool.submit(ask, [], proto, True) for proto in ("http", "grpc")]
            done = sum(pool.map(lambda j: ask(*j), [(cold[0::2], "http"), (cold[1::2], "grpc")]))
            cold_done.set()
            hot_done = sum(f.result() for f in hot)
        assert done == 300 and hot_done > 0
        index = {m["name"]: m for m in http.get_model_repository_index()}
        ready = [n for n, m in index.items() if m.get("state") == "READY"]
        assert len(ready) <= 100, f"{len(ready)} resident, bound 100"
        assert index["m0000"]["state"] == "READY", index["m0000"]
        evicted = [n for n, m in index.items() if "least recently used" in m.get("reason", "")]
        assert len(evicted) >= 200, f"{len(evicted)} evicted after 301 distinct models with room for 100"
        # A readiness probe answers for a model it would load, without loading it (nor evicting another).
        assert http.is_model_ready("m0999") is True
        assert grpcclient.InferenceServerClient(srv.grpc_url).is_model_ready("m0999") is True
        assert {m["name"]: m for m in http.get_model_repository_index()}["m0999"].get("state") != "READY"
        assert http.is_model_ready("nosuch") is False
    finally:
        assert srv.stop() == 0, srv.log()
