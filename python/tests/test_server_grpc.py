"""fw serve's gRPC front end, driven by Triton's own gRPC clients (tritonclient.grpc and .aio).

Starts the real ``fw`` binary with ``--grpc-port`` on the reference models and checks the
answers against the test vectors in the model files, against the HTTP path and against
onnxruntime in Python; checks fw's .proto files against the field numbers of the
descriptors tritonclient ships.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from fwserve import FwServer

from fw import metadata

grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
import grpc  # noqa: E402
import tritonclient.grpc.aio as aioclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
MODELS = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models")
PROTO_DIR = REPO / "grpcapi" / "inferencepb"

# Every reference file a user would serve, with the input dtypes they exercise.
REFERENCE = [
    "digits_mlp.onnx",
    "digits_cnn.onnx",
    "textcls.onnx",
    "resnet18.onnx",
    "digits_mlp.ts.pt",
    "textcls.ts.pt",
    "textcls.quant.pt",
    "digits_mlp.int8-dynamic.onnx",
    "digits_cnn.int8-static.onnx",
    "textcls.int8-dynamic.onnx",
    "textcls.pt2",
]


@pytest.fixture(scope="module")
def serve() -> Iterator[Callable[..., FwServer]]:
    """Factory: ``serve("digits_mlp.onnx", *flags)`` starts (once per argument list) a ready server with gRPC."""
    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `go build -o bin/fw ./cmd/fw` or set FW_BIN")
    if not (MODELS / "manifest.json").is_file():
        pytest.skip(f"reference models missing in {MODELS}: run `make models` or set FW_MODELS_DIR")
    servers: dict[tuple, FwServer] = {}

    def start(model: str | Path, *flags: str) -> FwServer:
        key = (str(model), flags)
        if key not in servers:
            path = model if isinstance(model, Path) else MODELS / model
            srv = FwServer(FW_BIN, path, *flags, grpc=True)
            servers[key] = srv
            srv.wait_ready()
        return servers[key]

    yield start
    failures = [f"{k}: exit {code}\n{s.log()}" for k, s in servers.items() if (code := s.stop()) != 0]
    assert not failures, "fw serve did not exit cleanly on SIGTERM:\n" + "\n".join(failures)


def _vector(path: Path) -> tuple[dict, dict, float, float, dict]:
    doc = metadata.read(path)
    tv = doc["test_vector"]
    ins = {k: metadata.decode_tensor(v) for k, v in tv["inputs"].items()}
    outs = {k: metadata.decode_tensor(v) for k, v in tv["outputs"].items()}
    return ins, outs, tv["atol"], tv["rtol"], doc


def _inputs(ins: dict, mod) -> list:
    out = []
    for name, x in ins.items():
        dt = {np.float32: "FP32", np.int64: "INT64", np.float64: "FP64", np.int32: "INT32"}[x.dtype.type]
        i = mod.InferInput(name, list(x.shape), dt)
        i.set_data_from_numpy(x)
        out.append(i)
    return out


def test_probes_metadata_config(serve) -> None:
    srv = serve("digits_mlp.onnx")
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        assert c.is_server_live() and c.is_server_ready()
        assert c.is_model_ready("digits_mlp") and c.is_model_ready("digits_mlp", "1")
        sm = c.get_server_metadata(as_json=True)
        assert sm["name"] == "fw" and {"binary_tensor_data", "model_configuration", "statistics"} <= set(
            sm["extensions"]
        )
        md = c.get_model_metadata("digits_mlp", as_json=True)
        assert md["platform"] == "onnxruntime_onnx" and md["versions"] == ["1"]
        assert md["inputs"] == [{"name": "input", "datatype": "FP32", "shape": ["-1", "64"]}]
        cfg = c.get_model_config("digits_mlp").config
        assert cfg.name == "digits_mlp" and cfg.backend == "onnxruntime" and cfg.max_batch_size == 64
        assert cfg.input[0].data_type == model_config_pb2.TYPE_FP32 and list(cfg.input[0].dims) == [64]
        assert list(cfg.output[0].dims) == [10]
        assert cfg.dynamic_batching.max_queue_delay_microseconds == 1000
        assert cfg.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    # The same configuration over HTTP, in Triton's JSON.
    with httpclient.InferenceServerClient(srv.url) as h:
        hc = h.get_model_config("digits_mlp")
        assert (
            hc["max_batch_size"] == 64
            and hc["input"][0]["dims"] == [64]
            and hc["input"][0]["data_type"] == "TYPE_FP32"
        )
        assert "statistics" in h.get_server_metadata()["extensions"]


@pytest.mark.parametrize("model_file", REFERENCE)
def test_infer_every_reference_model(serve, model_file: str) -> None:
    """Each reference file answers its embedded test vector over gRPC, byte-equal to the HTTP path."""
    path = MODELS / model_file
    ins, outs, atol, rtol, doc = _vector(path)
    srv = serve(model_file)
    name = doc["name"]
    with grpcclient.InferenceServerClient(srv.grpc_url) as c, httpclient.InferenceServerClient(srv.url) as h:
        got = c.infer(name, _inputs(ins, grpcclient), request_id="v1")
        assert got.get_response().id == "v1"
        via_http = h.infer(name, _inputs(ins, httpclient))
        for out_name, want in outs.items():
            g = got.as_numpy(out_name)
            np.testing.assert_allclose(g, want, atol=atol, rtol=rtol)
            np.testing.assert_array_equal(g, via_http.as_numpy(out_name))
        if model_file.endswith(".onnx"):
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            ref = sess.run(None, dict(ins))
            for out_name, r in zip([o.name for o in sess.get_outputs()], ref, strict=True):
                np.testing.assert_allclose(got.as_numpy(out_name), r, atol=atol, rtol=rtol)


@pytest.mark.parametrize(
    "model_file", ["digits_cnn.int8-dynamic.onnx", "digits_cnn.int8-static.onnx", "resnet18.int8-static.onnx"]
)
def test_int8_onnx_served(serve, model_file: str) -> None:
    """int8 files written by onnxruntime.quantization (Python 1.31) run in fw's engine (ONNX Runtime 1.30):
    /model reports format onnx_int8 with the method and the accuracy recorded at export, Triton's clients see
    an ONNX Runtime model, and /predict answers what the file gives in onnxruntime and the float file's
    classes on the test vector rows."""
    import json
    import urllib.request

    path = MODELS / model_file
    ins, _, atol, rtol, doc = _vector(path)
    srv = serve(model_file)
    with urllib.request.urlopen(f"http://{srv.url}/model", timeout=10) as r:
        info = json.load(r)
    quantization = model_file.split("int8-")[1].removesuffix(".onnx")
    assert info["format"] == "onnx_int8" and info["metadata"]["export"]["quantization"] == quantization
    if not model_file.startswith("resnet18"):  # random weights: no accuracy to speak of
        metrics = info["metadata"]["metrics"]
        assert metrics["float_test_accuracy"] - metrics["test_accuracy"] <= 0.01
    name = doc["name"]
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        md = c.get_model_metadata(name, as_json=True)
        assert md["platform"] == "onnxruntime_onnx"
    (x,) = ins.values()
    body = json.dumps({"data": x.tolist()}).encode()
    req = urllib.request.Request(
        f"http://{srv.url}/predict", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        got = np.asarray(json.load(r)["predictions"], dtype=np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, dict(ins))[0]
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)
    fp32 = ort.InferenceSession(str(MODELS / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got.argmax(-1), fp32.run(None, dict(ins))[0].argmax(-1))


def test_two_inputs_two_outputs(serve, tmp_path: Path) -> None:
    """FP32 and INT64 inputs at once, and two outputs, one of them requested alone."""
    import torch

    from fw import export

    from helpers import TwoInput

    model = TwoInput(vocab=50).eval()
    example = {"tokens": torch.randint(0, 50, (5, 6)), "features": torch.rand(5, 4)}
    export.onnx(model, example, tmp_path / "two.onnx")
    ins, outs, atol, rtol, _ = _vector(tmp_path / "two.onnx")
    srv = serve(tmp_path / "two.onnx")
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        r = c.infer("two", _inputs(ins, grpcclient))
        for k in ("output_0", "output_1"):
            np.testing.assert_allclose(r.as_numpy(k), outs[k], atol=atol, rtol=rtol)
        only = c.infer("two", _inputs(ins, grpcclient), outputs=[grpcclient.InferRequestedOutput("output_1")])
        assert [o.name for o in only.get_response().outputs] == ["output_1"]
        np.testing.assert_allclose(only.as_numpy("output_1"), outs["output_1"], atol=atol, rtol=rtol)


def test_typed_contents(serve) -> None:
    """The typed form (InferTensorContents), sent with tritonclient's own protobuf stubs, equals the raw form."""
    srv = serve("textcls.onnx")
    ins, outs, atol, rtol, _ = _vector(MODELS / "textcls.onnx")
    x = ins["tokens"]
    req = service_pb2.ModelInferRequest(model_name="textcls", id="typed")
    t = req.inputs.add(name="tokens", datatype="INT64", shape=list(x.shape))
    t.contents.int64_contents.extend(x.ravel().tolist())
    with grpc.insecure_channel(srv.grpc_url) as ch:
        resp = service_pb2_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=30)
    assert resp.id == "typed" and resp.outputs[0].name == "logits"
    got = np.frombuffer(resp.raw_output_contents[0], dtype=np.float32).reshape(list(resp.outputs[0].shape))
    np.testing.assert_allclose(got, outs["logits"], atol=atol, rtol=rtol)


def _code(exc: InferenceServerException) -> str:
    return str(exc.status())


def test_errors_have_matching_codes(serve) -> None:
    srv = serve("digits_mlp.onnx")
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        x = np.zeros((1, 63), np.float32)
        i = grpcclient.InferInput("input", [1, 63], "FP32")
        i.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as e:
            c.infer("digits_mlp", [i])
        assert _code(e.value) == "StatusCode.INVALID_ARGUMENT" and "64" in e.value.message()
        with pytest.raises(InferenceServerException) as e:
            c.infer("resnet18", [i])
        assert (
            _code(e.value) == "StatusCode.NOT_FOUND"
            and "Request for unknown model: 'resnet18'" in e.value.message()
        )
        assert "digits_mlp" in e.value.message()
        big = grpcclient.InferInput("input", [4097, 64], "FP32")
        big.set_data_from_numpy(np.zeros((4097, 64), np.float32))
        with pytest.raises(InferenceServerException) as e:
            c.infer("digits_mlp", [big])
        assert _code(e.value) == "StatusCode.RESOURCE_EXHAUSTED" and "--max-rows" in e.value.message()
        wrong = grpcclient.InferInput("input", [1, 64], "FP64")
        wrong.set_data_from_numpy(np.zeros((1, 64), np.float64))
        with pytest.raises(InferenceServerException) as e:
            c.infer("digits_mlp", [wrong])
        assert _code(e.value) == "StatusCode.INVALID_ARGUMENT" and "FP32" in e.value.message()
        # Still serving, and the statistics counted only what reached the model.
        ok = grpcclient.InferInput("input", [2, 64], "FP32")
        ok.set_data_from_numpy(np.zeros((2, 64), np.float32))
        c.infer("digits_mlp", [ok])
        st = c.get_inference_statistics("digits_mlp").model_stats[0]
        assert st.inference_stats.success.count >= 1 and st.inference_stats.success.ns > 0
        assert st.execution_count >= 1 and any(b.batch_size == 2 for b in st.batch_stats)


def test_message_over_the_body_limit(serve) -> None:
    srv = serve("digits_mlp.onnx", "--max-body-bytes", "100000")
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        i = grpcclient.InferInput("input", [512, 64], "FP32")
        i.set_data_from_numpy(np.zeros((512, 64), np.float32))
        with pytest.raises(InferenceServerException) as e:
            c.infer("digits_mlp", [i])
        assert _code(e.value) == "StatusCode.RESOURCE_EXHAUSTED"
        assert c.is_server_live()


def test_api_keys_as_metadata(serve, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("s3cret\n")
    srv = serve("digits_mlp.onnx", "--api-keys-file", str(keys))
    ins, outs, atol, rtol, _ = _vector(MODELS / "digits_mlp.onnx")
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        assert c.is_server_ready()  # probes stay open
        with pytest.raises(InferenceServerException) as e:
            c.infer("digits_mlp", _inputs(ins, grpcclient))
        assert _code(e.value) == "StatusCode.UNAUTHENTICATED"
        r = c.infer("digits_mlp", _inputs(ins, grpcclient), headers={"authorization": "Bearer s3cret"})
        np.testing.assert_allclose(r.as_numpy("logits"), outs["logits"], atol=atol, rtol=rtol)


def test_stream(serve) -> None:
    """Triton's streaming extension: answers come back on the stream, a bad request as an error."""
    srv = serve("digits_mlp.onnx")
    ins, outs, atol, rtol, _ = _vector(MODELS / "digits_mlp.onnx")
    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        c.start_stream(callback=lambda result, error: answers.put((result, error)))
        for k in range(5):
            c.async_stream_infer("digits_mlp", _inputs(ins, grpcclient), request_id=f"s{k}")
        bad = grpcclient.InferInput("input", [1, 3], "FP32")
        bad.set_data_from_numpy(np.zeros((1, 3), np.float32))
        c.async_stream_infer("digits_mlp", [bad], request_id="bad")
        got = [answers.get(timeout=30) for _ in range(6)]
        c.stop_stream()
    ok = [r for r, err in got if err is None]
    errors = [err for _, err in got if err is not None]
    assert len(ok) == 5 and len(errors) == 1
    assert sorted(r.get_response().id for r in ok) == [f"s{k}" for k in range(5)]
    for r in ok:
        np.testing.assert_allclose(r.as_numpy("logits"), outs["logits"], atol=atol, rtol=rtol)
    assert "64" in str(errors[0]) or "needs" in str(errors[0])


@pytest.mark.parametrize("alg", ["gzip", "deflate"])
def test_compression(serve, alg: str) -> None:
    """tritonclient.grpc's compression_algorithm (grpcio's gzip and deflate, which is zlib): unary, streaming
    and asyncio calls are answered as uncompressed ones are; fw answers in the request's encoding, which
    grpcio decodes."""
    srv = serve("digits_mlp.onnx")
    ins, outs, atol, rtol, _ = _vector(MODELS / "digits_mlp.onnx")
    x = {"input": np.resize(ins["input"], (64, 64)).astype(np.float32)}
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        want = c.infer("digits_mlp", _inputs(x, grpcclient)).as_numpy("logits")
        got = c.infer("digits_mlp", _inputs(x, grpcclient), compression_algorithm=alg).as_numpy("logits")
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(
            c.infer("digits_mlp", _inputs(ins, grpcclient), compression_algorithm=alg).as_numpy("logits"),
            outs["logits"],
            atol=atol,
            rtol=rtol,
        )
        answers: queue.Queue = queue.Queue()
        c.start_stream(callback=lambda result, error: answers.put((result, error)), compression_algorithm=alg)
        for k in range(3):
            c.async_stream_infer("digits_mlp", _inputs(x, grpcclient), request_id=f"z{k}")
        got = [answers.get(timeout=30) for _ in range(3)]
        c.stop_stream()
    for result, error in got:
        assert error is None, error
        np.testing.assert_array_equal(result.as_numpy("logits"), want)

    async def main() -> np.ndarray:
        async with aioclient.InferenceServerClient(srv.grpc_url) as a:
            r = await a.infer("digits_mlp", _inputs(x, aioclient), compression_algorithm=alg)
            return r.as_numpy("logits")

    np.testing.assert_array_equal(asyncio.run(main()), want)


def test_aio_client(serve) -> None:
    srv = serve("digits_mlp.onnx")
    ins, outs, atol, rtol, _ = _vector(MODELS / "digits_mlp.onnx")

    async def main() -> list:
        async with aioclient.InferenceServerClient(srv.grpc_url) as c:
            assert await c.is_server_ready()
            md = await c.get_model_metadata("digits_mlp", as_json=True)
            assert md["name"] == "digits_mlp"
            return await asyncio.gather(*[c.infer("digits_mlp", _inputs(ins, aioclient)) for _ in range(16)])

    for r in asyncio.run(main()):
        np.testing.assert_allclose(r.as_numpy("logits"), outs["logits"], atol=atol, rtol=rtol)


def test_grpc_health_probe(serve) -> None:
    """grpc.health.v1 as a probe asks it, over grpcio: HealthCheckRequest{service} is field 1, the
    answer's status field 1 (SERVING = 1); sent as raw protobuf bytes so no extra package is needed."""
    srv = serve("digits_mlp.onnx")
    with grpc.insecure_channel(srv.grpc_url) as ch:
        check = ch.unary_unary("/grpc.health.v1.Health/Check")
        assert check(b"", timeout=10) == b"\x08\x01"
        svc = b"inference.GRPCInferenceService"
        assert check(b"\x0a" + bytes([len(svc)]) + svc, timeout=10) == b"\x08\x01"
        with pytest.raises(grpc.RpcError) as e:
            check(b"\x0a\x05other", timeout=10)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND


def _proto_fields(text: str) -> dict[str, dict[str, int]]:
    """Message (dotted for nested ones) -> field name -> number, from a .proto file."""
    text = re.sub(r"//[^\n]*", "", text)
    fields: dict[str, dict[str, int]] = {}
    stack: list[str] = []
    for tok in re.finditer(r"(message|enum|oneof|service)\s+(\w+)\s*\{|\{|\}|(\w+)\s*=\s*(\d+)\s*;", text):
        if tok.group(0) == "{":
            stack.append("")  # an rpc's options block
        elif tok.group(1):
            kind, name = tok.group(1), tok.group(2)
            stack.append(name if kind in ("message", "enum") else "")
            if kind in ("message", "enum"):
                fields.setdefault(".".join(s for s in stack if s), {})
        elif tok.group(0) == "}":
            stack.pop()
        else:
            owner = ".".join(s for s in stack if s)
            fields.setdefault(owner, {})[tok.group(3)] = int(tok.group(4))
    return fields


def _descriptor_fields(desc, prefix: str = "") -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for m in (
        desc.message_types_by_name.values() if hasattr(desc, "message_types_by_name") else desc.nested_types
    ):
        name = prefix + m.name
        out[name] = {f.name: f.number for f in m.fields}
        for e in m.enum_types:
            out[name + "." + e.name] = {v.name: v.number for v in e.values}
        out.update(_descriptor_fields(m, name + "."))
    if hasattr(desc, "enum_types_by_name"):
        for e in desc.enum_types_by_name.values():
            out[prefix + e.name] = {v.name: v.number for v in e.values}
    return out


def test_proto_matches_tritonclient_descriptors() -> None:
    """Every message, field and enum value fw's .proto files declare has the name and number
    tritonclient's generated code uses, and every RPC fw serves is one Triton's service has."""
    theirs = _descriptor_fields(service_pb2.DESCRIPTOR) | _descriptor_fields(model_config_pb2.DESCRIPTOR)
    checked = 0
    for f in ("grpc_service.proto", "model_config.proto"):
        ours = _proto_fields((PROTO_DIR / f).read_text())
        for msg, flds in ours.items():
            if msg.endswith("Entry"):
                continue
            assert msg in theirs, f"{f}: {msg} is not a message or enum of Triton's protocol"
            for name, num in flds.items():
                assert theirs[msg].get(name) == num, (
                    f"{f}: {msg}.{name} = {num}, Triton's is {theirs[msg].get(name)}"
                )
                checked += 1
    assert checked > 100
    rpcs = set(re.findall(r"rpc\s+(\w+)\s*\(", (PROTO_DIR / "grpc_service.proto").read_text()))
    assert rpcs <= {m.name for m in service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods}
    assert len(rpcs) == 20  # every RPC of Triton's service: trace settings answer UNIMPLEMENTED
