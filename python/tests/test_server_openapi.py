"""Conformance of the real ``fw serve`` to its OpenAPI document (httpapi/openapi.json).

Starts the real binary (FW_BIN, default <repo>/bin/fw: ``go build -o bin/fw ./cmd/fw``) on
build/models/digits_cnn.onnx (FW_MODELS_DIR, default <repo>/build/models: ``make models``),
sends real requests to every endpoint -- successes and each error class -- and validates every
JSON body against the schema the document declares for that path, method, status and content
type (JSON Schema 2020-12, refs resolved against the whole document; see openapi_check.py).
"""

from __future__ import annotations

import functools
import gzip
import json
import struct
import threading
import zlib

import pytest
from openapi_check import (
    FW_BIN,
    MODELS,
    REPO,
    FwProcess,
    OpenAPIDoc,
    Response,
    every_operation_answers,
    launch,
    unauthorized_exactly_where_declared,
)
from openapi_check import multipart as _multipart

MODEL = MODELS / "digits_cnn.onnx"
SAMPLES = MODELS / "samples"

DOC = OpenAPIDoc(REPO / "httpapi" / "openapi.json", "urn:fw:openapi")
SPEC = DOC.spec
Server = FwProcess


# ----------------------------------------------------------------------------- the server


@pytest.fixture(scope="module")
def fw_server():
    """A factory that starts ``fw serve`` on digits_cnn with extra flags and environment."""
    if not FW_BIN.exists():
        pytest.skip(f"{FW_BIN} is missing: build it with `go build -o bin/fw ./cmd/fw` (or set FW_BIN)")
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is missing: run `make models` (or set FW_MODELS_DIR)")
    started: list[Server] = []

    def start(*args: str, env: dict | None = None) -> Server:
        argv = ["serve", "--model", str(MODEL), "--host", "127.0.0.1", "--port", "0", *args]
        s = Server(*launch(argv, env), DOC)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop(timeout=20)


@pytest.fixture(scope="module")
def server(fw_server) -> Server:
    return fw_server()


@pytest.fixture(scope="module")
def small_server(fw_server) -> Server:
    return fw_server("--max-body-bytes", "1000", "--max-rows", "2")


@pytest.fixture(scope="module")
def auth_server(fw_server) -> Server:
    return fw_server(env={"FW_API_KEYS": "k1, k2"})


# ----------------------------------------------------------------------------- request bodies

DIGIT = [[[0, 0, 0.31, 0.81, 0.94, 0.44, 0, 0], [0, 0.25, 0.88, 0.5, 0.63, 0.94, 0.06, 0], [0, 0, 0, 0, 0.5, 0.88, 0, 0],
          [0, 0, 0, 0.44, 1, 0.5, 0, 0], [0, 0, 0, 0.06, 0.5, 0.94, 0.31, 0], [0, 0, 0, 0, 0, 0.69, 0.75, 0],
          [0, 0.13, 0.5, 0.31, 0.5, 0.94, 0.38, 0], [0, 0.19, 0.81, 0.94, 0.81, 0.31, 0, 0]]]  # fmt: skip
FLAT = [v for row in DIGIT[0] for v in row]


multipart = functools.partial(_multipart, file_type="image/png")


def png(name: str = "digit_3_2.png") -> bytes:
    p = SAMPLES / name
    if not p.exists():
        pytest.skip(f"{p} is missing (make models)")
    return p.read_bytes()


def code_of(r: Response) -> str:
    body = r.json()
    return body["code"] if isinstance(body.get("error"), str) else body["error"]["code"]


# ----------------------------------------------------------------------------- the document alone


def test_document_is_openapi_31() -> None:
    DOC.check_document()
    assert SPEC["servers"][0]["url"] == "/"


EXAMPLES = list(DOC.examples())


@pytest.mark.parametrize(
    "label,schema_ptr,value,ct", EXAMPLES, ids=[f"{e[0]}#{i}" for i, e in enumerate(EXAMPLES)]
)
def test_document_examples_validate(label, schema_ptr, value, ct) -> None:
    DOC.validate_example(schema_ptr, value, ct)


# ----------------------------------------------------------------------------- open endpoints


def test_health_model_metrics(server: Server) -> None:
    for p in ("/health", "/health/ready", "/health/live"):
        server.call("GET", p, expect=200)
        r = server.call("HEAD", p, expect=200)
        assert r.body == b""
        r = server.call("POST", p, body=b"", expect=405)
        assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}
    info = server.call("GET", "/model", expect=200).json()
    assert info["name"] == "digits_cnn" and info["inputs"][0]["shape"] == [-1, 1, 8, 8]
    r = server.call("GET", "/metrics", expect=200)
    assert r.content_type == "text/plain" and b"fw_ready 1" in r.body
    server.call("POST", "/metrics", body=b"", expect=405)
    server.call("DELETE", "/model", expect=405)


def test_docs_and_openapi(server: Server) -> None:
    r = server.call("GET", "/openapi.json", expect=200)
    served = r.json()
    # httpapi/openapi.json completed with the served model: the same routes and responses.
    assert served["paths"].keys() == SPEC["paths"].keys()
    assert served["components"]["responses"] == SPEC["components"]["responses"]
    assert served["components"]["parameters"]["ModelName"]["schema"]["enum"] == ["digits_cnn"]
    r = server.call("GET", "/docs", expect=200)
    assert b"/openapi.json" in r.body
    bundled = b"swagger-ui-bundle.js" in r.body
    r = server.call("GET", "/docs/swagger-ui.css", expect=200 if bundled else 404)
    if bundled:
        assert r.headers["content-type"].startswith("text/css") and "max-age" in r.headers["cache-control"]
        r = server.call("GET", "/docs/swagger-ui-bundle.js", expect=200, headers={"Accept-Encoding": "gzip"})
        assert r.headers.get("content-encoding") == "gzip" and gzip.decompress(r.body).startswith(b"/*")
    server.call("GET", "/docs/no-such-file.js", expect=404)
    for target in ("/docs/../server.go", "/docs/%2e%2e/x", "/docs/..%2fdocs.go"):
        r = server.request("GET", target)
        assert r.status == 404 and b"package httpapi" not in r.body, target
    r = server.call("GET", "/", expect=302)
    assert r.headers["location"].endswith("/docs")
    server.call("POST", "/openapi.json", body=b"{}", expect=405)


@pytest.fixture(scope="module")
def served_doc(server: Server, tmp_path_factory) -> OpenAPIDoc:
    """The document the server answers, for the served model."""
    r = server.call("GET", "/openapi.json", expect=200)
    p = tmp_path_factory.mktemp("served") / "openapi.json"
    p.write_bytes(r.data)
    return OpenAPIDoc(p, "urn:fw:served-openapi")


def test_served_document_is_openapi_31(served_doc: OpenAPIDoc) -> None:
    served_doc.check_document()
    assert "`digits_cnn` version 1" in served_doc.spec["info"]["description"]
    for _label, ptr, value, ct in served_doc.examples():
        served_doc.validate_example(ptr, value, ct)


# Bodies the served document accepts (True) or refuses (False), with what the server answers:
# what the schema accepts is what the server accepts.
ROW = [0.5] * 64
PREDICT_BODIES = [
    (True, {"data": [DIGIT]}, 200),
    (True, {"data": [FLAT, FLAT]}, 200),
    (True, {"inputs": {"input": [DIGIT, DIGIT]}}, 200),
    (True, {"data": [[3.4e38] * 64]}, 200),
    (False, {"data": [DIGIT, FLAT]}, 422),  # every row in the first row's form
    (False, {"data": [FLAT[:63]]}, 422),  # a row of the wrong length
    (False, {"data": [[[ROW[:8]] * 8] * 2]}, 422),  # a row of the wrong shape
    (False, {"data": [[1e39] * 64]}, 422),  # beyond float32: Inf, refused
    (False, {"inputs": {"input": [FLAT], "other": [FLAT]}}, 422),  # an input the model does not have
    (False, {"inputs": {}}, 422),
    (False, {"data": [FLAT], "inputs": {"input": [FLAT]}}, 400),  # both
    (False, {"data": []}, 422),
]


@pytest.mark.parametrize(
    "valid,body,status", PREDICT_BODIES, ids=[str(i) for i in range(len(PREDICT_BODIES))]
)
def test_served_predict_schema_is_the_models(
    server: Server, served_doc: OpenAPIDoc, valid, body, status
) -> None:
    v = served_doc.validator_for("/components/schemas/PredictRequest")
    assert v.is_valid(body) == valid
    r = server.request("POST", "/predict", json.dumps(body).encode(), {"Content-Type": "application/json"})
    assert r.status == status, r.body[:300]


def v2_input(**kw) -> dict:
    return {"name": "input", "datatype": "FP32", "shape": [1, 1, 8, 8], "data": FLAT} | kw


# Under /v2 every refusal here is Triton's 400 (fw's own routes answer 422 for an input that does
# not fit the model).
V2_BODIES = [
    (True, {"inputs": [v2_input()]}, 200),
    (
        True,
        {"inputs": [v2_input(shape=[2, 1, 8, 8], data=FLAT + FLAT)], "outputs": [{"name": "logits"}]},
        200,
    ),
    (True, {"inputs": [v2_input()], "parameters": {"binary_data_output": None}, "id": None}, 200),
    (False, {"inputs": [v2_input(name="")]}, 400),
    (False, {"inputs": [v2_input(datatype="FP64")]}, 400),
    (False, {"inputs": [v2_input(shape=[1, 64])]}, 400),
    (False, {"inputs": [v2_input(), v2_input()]}, 400),
    (False, {"inputs": [v2_input()], "outputs": [{"name": "nope"}]}, 400),
    (False, {"inputs": [v2_input()], "parameters": {"sequence_id": 1}}, 400),
    (False, {"inputs": [v2_input(data=[True] * 64)]}, 400),
]


@pytest.mark.parametrize("valid,body,status", V2_BODIES, ids=[str(i) for i in range(len(V2_BODIES))])
def test_served_v2_schema_is_the_models(server: Server, served_doc: OpenAPIDoc, valid, body, status) -> None:
    v = served_doc.validator_for("/components/schemas/V2InferenceRequest")
    assert v.is_valid(body) == valid
    r = server.request(
        "POST", "/v2/models/digits_cnn/infer", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    assert r.status == status, r.body[:300]


def test_unknown_path_is_404(server: Server) -> None:
    r = server.request("GET", "/no/such/path")
    assert r.status == 404
    DOC.validator_for("/components/schemas/Error").validate(r.json())
    r = server.request("GET", "/v2/no/such/path")
    assert r.status == 404
    DOC.validator_for("/components/schemas/V2Error").validate(r.json())


# ----------------------------------------------------------------------------- /predict


def test_predict(server: Server) -> None:
    r = server.call("POST", "/predict", json_body={"data": [DIGIT, DIGIT]}, expect=200).json()
    assert len(r["predictions"]) == 2 and r["labels"] == ["3", "3"]
    server.call("POST", "/predict", json_body={"data": [FLAT]}, expect=200)
    server.call("POST", "/predict", json_body={"inputs": {"input": [DIGIT]}}, expect=200)
    server.call(
        "POST",
        "/predict",
        json_body={"data": [DIGIT]},
        headers={"Content-Type": "application/json; charset=utf-8"},
        expect=200,
    )


@pytest.mark.parametrize(
    "body,ctype,status,code",
    [
        (b'{"data": [[1, 2', "application/json", 400, "invalid_json"),
        (b"[1, 2]", "application/json", 400, "bad_request"),
        (b'{"data": [[1]]}', "text/plain", 415, "unsupported_media_type"),
        (b'{"data": [[1]]}', None, 415, "unsupported_media_type"),
        (b'{"data": [[1, 2, 3]]}', "application/json", 422, "invalid_input"),
        (b'{"rows": [[1]]}', "application/json", 422, "invalid_input"),
        (b'{"inputs": {"input": [[1]], "other": [[2]]}}', "application/json", 422, "invalid_input"),
        (b'{"data": [["a", "b"]]}', "application/json", 422, "invalid_input"),
        (b'{"data": []}', "application/json", 422, "invalid_input"),
    ],
)
def test_predict_errors(server: Server, body, ctype, status, code) -> None:
    r = server.call(
        "POST", "/predict", body=body, headers={"Content-Type": ctype} if ctype else {}, expect=status
    )
    assert code_of(r) == code


def test_predict_405(server: Server) -> None:
    r = server.call("GET", "/predict", expect=405)
    assert r.headers["allow"] == "POST"


# ----------------------------------------------------------------------------- /predict/image


def test_predict_image(server: Server) -> None:
    body, ct = multipart([("file", "digit.png", png())])
    r = server.call(
        "POST", "/predict/image?top_k=2&scores=true", body=body, headers={"Content-Type": ct}, expect=200
    ).json()
    assert r["predictions"][0]["top_k"][0]["label"] == "3" and len(r["predictions"][0]["top_k"]) == 2
    assert len(r["predictions"][0]["scores"]) == 10
    body, ct = multipart([("file", "a.png", png()), ("file", "b.png", png("digit_7_0.png"))])
    r = server.call("POST", "/predict/image", body=body, headers={"Content-Type": ct}, expect=200).json()
    assert [p["top_k"][0]["label"] for p in r["predictions"]] == ["3", "7"]
    r = server.call(
        "POST", "/predict/image?top_k=1", body=png(), headers={"Content-Type": "image/png"}, expect=200
    ).json()
    assert r["predictions"][0]["top_k"][0]["label"] == "3"
    jpg = SAMPLES / "rgb_224.jpg"
    if jpg.exists():
        server.call(
            "POST",
            "/predict/image?resize=bilinear&invert=false",
            body=jpg.read_bytes(),
            headers={"Content-Type": "image/jpeg"},
            expect=200,
        )


@pytest.mark.parametrize(
    "query,ctype,body,status,code",
    [
        ("?top_k=0", "image/png", None, 400, "bad_request"),
        ("?height=abc", "image/png", None, 400, "bad_request"),
        ("?channels=2", "image/png", None, 400, "bad_request"),
        ("?resize=cubic", "image/png", None, 400, "bad_request"),
        ("?invert=maybe", "image/png", None, 400, "bad_request"),
        ("", "image/png", b"this is not a png", 400, "bad_image"),
        ("", "multipart/form-data", None, 400, "bad_request"),
        ("", "text/plain", None, 415, "unsupported_media_type"),
        ("", "application/json", b"{}", 415, "unsupported_media_type"),
    ],
)
def test_predict_image_errors(server: Server, query, ctype, body, status, code) -> None:
    r = server.call(
        "POST",
        "/predict/image" + query,
        body=png() if body is None else body,
        headers={"Content-Type": ctype},
        expect=status,
    )
    assert code_of(r) == code


def test_predict_image_form_without_file(server: Server) -> None:
    body, ct = multipart([], {"note": "no file"})
    r = server.call("POST", "/predict/image", body=body, headers={"Content-Type": ct}, expect=400)
    assert code_of(r) == "bad_request"


# ----------------------------------------------------------------------------- /predict/batch


def test_predict_batch_json(server: Server) -> None:
    req = {
        "requests": [
            {"id": "a", "data": [DIGIT]},
            {"data": [[1, 2, 3]]},
            {"id": 7, "inputs": {"input": [FLAT]}},
            5,
        ]
    }
    r = server.call("POST", "/predict/batch", json_body=req, expect=200).json()["responses"]
    assert [x["id"] for x in r] == ["a", 1, 7, 3]
    assert (
        r[0]["labels"] == ["3"]
        and r[1]["error"]["status"] == 422
        and r[3]["error"]["code"] == "invalid_input"
    )


@pytest.mark.parametrize("ctype", ["application/x-ndjson", "application/jsonl"])
def test_predict_batch_ndjson(server: Server, ctype) -> None:
    lines = [
        json.dumps({"id": "a", "data": [DIGIT]}),
        "{not json",
        "",
        json.dumps({"data": [[1]]}),
        json.dumps({"id": 9.5, "data": [FLAT]}),
    ]
    r = server.call(
        "POST",
        "/predict/batch",
        body=("\n".join(lines) + "\n").encode(),
        headers={"Content-Type": ctype},
        expect=200,
    )
    assert r.content_type == "application/x-ndjson"
    out = [json.loads(x) for x in r.body.decode().splitlines()]
    assert [x["id"] for x in out] == ["a", 1, 3, 9.5]
    assert out[1]["error"]["code"] == "invalid_json" and out[2]["error"]["status"] == 422


@pytest.mark.parametrize(
    "body,ctype,status,code",
    [
        (b'{"requests": [', "application/json", 400, "invalid_json"),
        (b'{"items": []}', "application/json", 422, "invalid_input"),
        (b'{"requests": []}', "text/csv", 415, "unsupported_media_type"),
    ],
)
def test_predict_batch_errors(server: Server, body, ctype, status, code) -> None:
    r = server.call("POST", "/predict/batch", body=body, headers={"Content-Type": ctype}, expect=status)
    assert code_of(r) == code


# ----------------------------------------------------------------------------- limits (413)


def test_payload_too_large(small_server: Server) -> None:
    s = small_server
    big = json.dumps({"data": [FLAT, FLAT], "pad": "x" * 2000}).encode()
    for path in ("/predict", "/predict/batch"):
        r = s.call("POST", path, body=big, headers={"Content-Type": "application/json"}, expect=413)
        assert code_of(r) == "payload_too_large" and r.json()["error"]["details"]["max_body_bytes"] == 1000
    r = s.call("POST", "/predict", json_body={"data": [[1], [2], [3]]}, expect=413)
    assert r.json()["error"]["details"] == {"rows": 3, "max_rows": 2}
    jpg = SAMPLES / "rgb_224.jpg"
    if jpg.exists():
        r = s.call(
            "POST",
            "/predict/image",
            body=jpg.read_bytes(),
            headers={"Content-Type": "image/jpeg"},
            expect=413,
        )
    # Within the body limit, an item over --max-rows fails alone.
    r = s.call(
        "POST", "/predict/batch", json_body={"requests": [{"id": "x", "data": [[1], [2], [3]]}]}, expect=200
    ).json()
    assert r["responses"][0]["error"] == {
        "code": "payload_too_large",
        "message": r["responses"][0]["error"]["message"],
        "status": 413,
        "details": {"rows": 3, "max_rows": 2},
    }
    # NDJSON is bounded per line.
    line = json.dumps({"data": [[1]], "pad": "x" * 2000})
    r = s.call(
        "POST",
        "/predict/batch",
        body=(line + "\n").encode(),
        headers={"Content-Type": "application/x-ndjson"},
        expect=200,
    )
    assert json.loads(r.body.decode().splitlines()[0])["error"]["status"] == 413
    # /v2 answers Triton's status and sentence (tritonclient and Triton's tests match them).
    r = s.call(
        "POST",
        "/v2/models/digits_cnn/infer",
        body=big,
        headers={"Content-Type": "application/json"},
        expect=400,
    )
    assert code_of(r) == "payload_too_large"
    assert r.json()["error"].startswith(
        f"request JSON size of {len(big)} bytes exceeds the maximum allowed input size of 1000 bytes."
    )


# ----------------------------------------------------------------------------- 504, 503 overloaded


def test_timeout_504(fw_server) -> None:
    s = fw_server("--timeout", "1ns")
    r = s.call("POST", "/predict", json_body={"data": [DIGIT]}, expect=504)
    assert code_of(r) == "timeout"
    r = s.call("POST", "/predict/image", body=png(), headers={"Content-Type": "image/png"}, expect=504)
    r = s.call("POST", "/predict/batch", json_body={"requests": [{"data": [DIGIT]}]}, expect=200)
    assert r.json()["responses"][0]["error"]["status"] == 504
    body = {"inputs": [{"name": "input", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": FLAT}]}
    r = s.call("POST", "/v2/models/digits_cnn/infer", json_body=body, expect=504)
    assert code_of(r) == "timeout"


def test_overloaded_503(fw_server) -> None:
    """--max-queue 1 on resnet18 (one image per engine call, ~15 ms each): of 16 images sent at
    once, those arriving while one runs and one waits are refused with 503 and Retry-After."""
    s = fw_server("--model", str(MODELS / "resnet18.onnx"), "--max-queue", "1", "--max-batch-size", "1")
    jpg = (SAMPLES / "rgb_224.jpg").read_bytes()
    results: list[Response] = []
    barrier = threading.Barrier(16)

    def one() -> None:
        barrier.wait()
        results.append(s.request("POST", "/predict/image", jpg, {"Content-Type": "image/jpeg"}))

    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        DOC.validate(r)
        assert r.status in (200, 503), r.status
        if r.status == 503:
            assert code_of(r) == "overloaded" and r.headers["retry-after"] == "1"
    statuses = sorted(r.status for r in results)
    assert statuses[0] == 200 and statuses[-1] == 503, statuses


# ----------------------------------------------------------------------------- 401


def _example_target(tmpl: str) -> str:
    return (
        tmpl.replace("{model_name}", "digits_cnn")
        .replace("{model_version}", "1")
        .replace("{asset}", "LICENSE")
    )


def test_api_keys(auth_server: Server) -> None:
    s = auth_server
    body = {"data": [DIGIT]}
    r = s.call("POST", "/predict", json_body=body, expect=401)
    assert r.headers["www-authenticate"] == 'Bearer realm="fw"' and "Bearer" in r.json()["error"]["message"]
    s.call("POST", "/predict", json_body=body, headers={"Authorization": "Bearer nope"}, expect=401)
    s.call("POST", "/predict", json_body=body, headers={"Authorization": "Bearer k2"}, expect=200)
    s.call("POST", "/predict", json_body=body, headers={"Authorization": "bearer k1"}, expect=200)
    # Every documented operation: 401 without a key exactly where the document declares bearerAuth.
    unauthorized_exactly_where_declared(s, _example_target, ("post",), validate_all=False)
    r = s.call("GET", "/v2", headers={"Authorization": "Bearer k1"}, expect=200)


# ----------------------------------------------------------------------------- V2


V2_INPUT = {"name": "input", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": FLAT}


def test_v2_metadata_and_health(server: Server) -> None:
    meta = server.call("GET", "/v2", expect=200).json()
    assert meta["name"] == "fw"
    server.call("GET", "/v2/health/live", expect=200)
    server.call("GET", "/v2/health/ready", expect=200)
    server.call("HEAD", "/v2/health/ready", expect=200)
    for base in ("/v2/models/digits_cnn", "/v2/models/digits_cnn/versions/1"):
        m = server.call("GET", base, expect=200).json()
        assert m["inputs"][0]["datatype"] == "FP32"
        server.call("GET", base + "/ready", expect=200)
        server.call("HEAD", base + "/ready", expect=200)
        server.call("GET", base + "/infer", expect=405)
    for target in (
        "/v2/models/resnet18",
        "/v2/models/digits_cnn/versions/9",
        "/v2/models/nope/ready",
        "/v2/models/nope/infer",
    ):
        r = server.call(
            "POST" if target.endswith("infer") else "GET",
            target,
            json_body={"inputs": [V2_INPUT]} if target.endswith("infer") else None,
            expect=404,
        )
        assert code_of(r) == "not_found"
    server.call("POST", "/v2", body=b"", expect=405)


def test_v2_infer(server: Server) -> None:
    for base in ("/v2/models/digits_cnn", "/v2/models/digits_cnn/versions/1"):
        r = server.call(
            "POST", base + "/infer", json_body={"id": "q1", "inputs": [V2_INPUT]}, expect=200
        ).json()
        assert r["id"] == "q1" and r["outputs"][0]["shape"] == [1, 10]
    # Binary extension: binary input, binary output.
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [1, 1, 8, 8],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 256},
                }
            ],
            "outputs": [{"name": "logits", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = header + struct.pack("<64f", *FLAT)
    r = server.call(
        "POST",
        "/v2/models/digits_cnn/infer",
        body=body,
        headers={
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(header)),
        },
        expect=200,
    )
    n = int(r.headers["inference-header-content-length"])
    out = json.loads(r.body[:n])["outputs"][0]
    assert out["parameters"]["binary_data_size"] == 40 and len(r.body) - n == 40
    logits = struct.unpack("<10f", r.body[n:])
    assert max(range(10), key=lambda i: logits[i]) == 3


@pytest.mark.parametrize(
    "body,headers,status,code",
    [
        (b'{"inputs": [', {}, 400, "invalid_json"),
        (b'{"inputs": 5}', {}, 400, "bad_request"),
        # Triton's status (400) for what fw's own routes answer 422; fw's code in the body.
        (json.dumps({"inputs": [dict(V2_INPUT, datatype="INT64")]}).encode(), {}, 400, "invalid_input"),
        (json.dumps({"inputs": [dict(V2_INPUT, data=[1, 2, 3])]}).encode(), {}, 400, "invalid_input"),
        (json.dumps({"inputs": [dict(V2_INPUT, name="x")]}).encode(), {}, 400, "invalid_input"),
        (
            json.dumps({"inputs": [V2_INPUT]}).encode(),
            {"Content-Encoding": "br"},
            415,
            "unsupported_media_type",
        ),
        (
            json.dumps({"inputs": [V2_INPUT]}).encode(),
            {"Content-Encoding": "gzip"},
            400,
            "bad_request",
        ),
        (
            json.dumps({"inputs": [V2_INPUT]}).encode(),
            {"Inference-Header-Content-Length": "0"},
            400,
            "bad_request",
        ),
    ],
)
def test_v2_infer_errors(server: Server, body, headers, status, code) -> None:
    r = server.call(
        "POST",
        "/v2/models/digits_cnn/infer",
        body=body,
        headers={"Content-Type": "application/json", **headers},
        expect=status,
    )
    assert code_of(r) == code


# ----------------------------------------------------------------------------- compression

COMPRESS = {
    "gzip": ("gzip", gzip.compress),
    "deflate": ("deflate", zlib.compress),  # what tritonclient sends as deflate: zlib
    "deflate-raw": ("deflate", lambda b: zlib.compress(b, wbits=-15)),  # bare deflate data
}


@pytest.mark.parametrize("how", sorted(COMPRESS))
def test_compressed_requests(server: Server, how: str) -> None:
    """A compressed body answers as the same body uncompressed, on every POST endpoint."""
    enc, compress = COMPRESS[how]
    bodies = [
        ("/predict", "application/json", json.dumps({"data": [DIGIT, DIGIT]}).encode(), {}),
        ("/predict/image", "image/png", png(), {}),
        (
            "/predict/batch",
            "application/json",
            json.dumps({"requests": [{"id": "a", "data": [DIGIT]}]}).encode(),
            {},
        ),
        ("/predict/batch", "application/x-ndjson", (json.dumps({"data": [FLAT]}) + "\n").encode() * 3, {}),
        ("/v2/models/digits_cnn/infer", "application/json", json.dumps({"inputs": [V2_INPUT]}).encode(), {}),
    ]
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [1, 1, 8, 8],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 256},
                }
            ],
            "outputs": [{"name": "logits", "parameters": {"binary_data": True}}],
        }
    ).encode()
    binary = {"Inference-Header-Content-Length": str(len(header))}  # the JSON part of the uncompressed body
    bodies.append(
        (
            "/v2/models/digits_cnn/infer",
            "application/octet-stream",
            header + struct.pack("<64f", *FLAT),
            binary,
        )
    )
    for path, ctype, body, extra in bodies:
        want = server.call("POST", path, body=body, headers={"Content-Type": ctype, **extra}, expect=200)
        got = server.call(
            "POST",
            path,
            body=compress(body),
            headers={"Content-Type": ctype, "Content-Encoding": enc, **extra},
            expect=200,
        )
        assert got.body == want.body, (path, ctype)
        assert got.headers.get("inference-header-content-length") == want.headers.get(
            "inference-header-content-length"
        )


@pytest.mark.parametrize("enc", ["gzip", "deflate"])
def test_compressed_responses(server: Server, enc: str) -> None:
    """Accept-Encoding gets a compressed inference answer (1 KiB or more), documented and read back whole."""
    rows = {"data": [DIGIT] * 16}
    plain = server.call("POST", "/predict", json_body=rows, expect=200)
    r = server.call("POST", "/predict", json_body=rows, headers={"Accept-Encoding": enc}, expect=200)
    assert r.headers["content-encoding"] == enc and len(r.body) < len(plain.body) and r.data == plain.body
    assert "accept-encoding" in r.headers["vary"].lower()
    small = server.call(
        "POST", "/predict", json_body={"data": [DIGIT]}, headers={"Accept-Encoding": enc}, expect=200
    )
    assert "content-encoding" not in small.headers
    v2 = {
        "inputs": [dict(V2_INPUT, shape=[32, 1, 8, 8], data=FLAT * 32)],
        "parameters": {"binary_data_output": True},
    }
    plain = server.call("POST", "/v2/models/digits_cnn/infer", json_body=v2, expect=200)
    r = server.call(
        "POST", "/v2/models/digits_cnn/infer", json_body=v2, headers={"Accept-Encoding": enc}, expect=200
    )
    assert r.headers["content-encoding"] == enc and r.data == plain.body
    assert r.headers["inference-header-content-length"] == plain.headers["inference-header-content-length"]
    lines = (json.dumps({"data": [FLAT]}) + "\n").encode() * 20
    r = server.call(
        "POST",
        "/predict/batch",
        body=lines,
        headers={"Content-Type": "application/x-ndjson", "Accept-Encoding": enc},
        expect=200,
    )
    assert "content-encoding" not in r.headers and len(r.body.splitlines()) == 20


def test_compressed_errors(server: Server, small_server: Server) -> None:
    """A bomb is a 413 (on /v2 Triton's 400) once --max-body-bytes is decompressed; a broken stream a 400;
    another encoding a 415."""
    bomb = gzip.compress(b" " * 500_000)  # 500 KB of spaces in under 1000 bytes, the limit
    assert len(bomb) < 1000
    r = small_server.call(
        "POST",
        "/predict",
        body=bomb,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        expect=413,
    )
    assert code_of(r) == "payload_too_large" and "decompresses" in r.json()["error"]["message"]
    r = small_server.call(
        "POST",
        "/v2/models/digits_cnn/infer",
        body=zlib.compress(b" " * 500_000),
        headers={"Content-Type": "application/json", "Content-Encoding": "deflate"},
        expect=400,  # Triton's status and sentence on /v2
    )
    assert code_of(r) == "payload_too_large" and r.json()["error"].startswith(
        "Decompressed data size exceeds"
    )
    body = gzip.compress(json.dumps({"data": [DIGIT]}).encode())
    r = server.call(
        "POST",
        "/predict",
        body=body[:-10],
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        expect=400,
    )
    assert code_of(r) == "bad_request" and "send it uncompressed" in r.json()["error"]["message"]
    r = server.call(
        "POST",
        "/predict",
        body=body,
        headers={"Content-Type": "application/json", "Content-Encoding": "br"},
        expect=415,
    )
    assert r.json()["error"]["details"]["accepted_encodings"] == ["gzip", "deflate", "identity"]


# ----------------------------------------------------------------------------- coverage


def test_every_documented_operation_answers(server: Server) -> None:
    """Each documented operation, sent without a body, answers a status the document lists for it."""
    every_operation_answers(server, _example_target)
