"""Checking a real ``fw`` HTTP process against its OpenAPI 3.1 document.

Shared by test_server_openapi.py (``fw serve``, httpapi/openapi.json) and test_dashboard_openapi.py
(``fw dashboard``, dashboard/api/openapi.json):

- ``OpenAPIDoc``: the document, its JSON Schema 2020-12 validators (refs resolved against the whole
  document with ``referencing``), path-template matching, the response a path, method and status
  name, and ``validate(response)`` for a ``Response`` received from the process;
- ``FwProcess``: a started ``fw`` subcommand (``launch`` waits for its "ready on <url>" line) with
  ``request`` (raw) and ``call`` (status checked, body validated) helpers;
- ``free_port``, ``multipart``, ``every_operation_answers`` and ``unauthorized_exactly_where_declared``.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytest.importorskip("jsonschema", reason="jsonschema is not installed (python/requirements.txt)")
pytest.importorskip("referencing", reason="referencing (a jsonschema dependency) is not installed")
from jsonschema import Draft202012Validator  # noqa: E402
from referencing import Registry, Resource  # noqa: E402
from referencing.jsonschema import DRAFT202012  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
MODELS = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
NDJSON = ("application/x-ndjson", "application/jsonl")


def escape(token: str) -> str:
    """A JSON Pointer reference token for token."""
    return token.replace("~", "~0").replace("/", "~1")


# ----------------------------------------------------------------------------- responses


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    method: str
    path: str

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def data(self) -> bytes:
        """The body decompressed, when its Content-Encoding is gzip or deflate (zlib)."""
        enc = self.headers.get("content-encoding", "").strip().lower()
        if enc == "gzip":
            return gzip.decompress(self.body)
        if enc == "deflate":
            return zlib.decompress(self.body)
        return self.body

    def json(self):
        return json.loads(self.data)


# ----------------------------------------------------------------------------- the document


class OpenAPIDoc:
    """An OpenAPI 3.1 document and the checks of responses against it.

    head_as_get: a HEAD request is checked against the GET operation (for documents that list no
    HEAD operations). validate_text: text/* bodies are validated (as strings) against their schema.
    """

    def __init__(self, path: Path, uri: str, *, head_as_get: bool = False, validate_text: bool = False):
        self.path = path
        self.uri = uri
        self.spec = json.loads(path.read_text())
        self.registry = Registry().with_resource(
            uri, Resource.from_contents(self.spec, default_specification=DRAFT202012)
        )
        self.head_as_get = head_as_get
        self.validate_text = validate_text
        self.seen: set[tuple[str, str, int]] = (
            set()
        )  # (path template, method, status) of every validated answer

    # --- navigation

    def lookup(self, pointer: str):
        node = self.spec
        for tok in pointer.lstrip("/").split("/"):
            node = node[tok.replace("~1", "/").replace("~0", "~")]
        return node

    def deref(self, pointer: str) -> str:
        """Follows $refs of the object at pointer; returns the pointer of what it names."""
        for _ in range(16):
            node = self.lookup(pointer)
            if isinstance(node, dict) and isinstance(node.get("$ref"), str):
                pointer = node["$ref"].removeprefix("#")
                continue
            return pointer
        raise AssertionError(f"$ref chain too deep at {pointer}")

    def validator_for(self, pointer: str) -> Draft202012Validator:
        return Draft202012Validator({"$ref": f"{self.uri}#{pointer}"}, registry=self.registry)

    def operations(self) -> Iterator[tuple[str, str, dict]]:
        """(path template, lower-case method, operation) of every documented operation."""
        for tmpl, item in self.spec["paths"].items():
            for m in METHODS:
                if m in item:
                    yield tmpl, m, item[m]

    def requires_auth(self, op: dict) -> bool:
        """Whether op declares bearerAuth (its own security, else the document's)."""
        return any("bearerAuth" in req for req in op.get("security", self.spec.get("security", [])))

    def template_of(self, path: str) -> str:
        """The document's path template that a concrete request path matches (literal paths first)."""
        best = None
        for tmpl in self.spec["paths"]:
            rx = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(tmpl)) + "$"
            if re.match(rx, path) and (best is None or tmpl.count("{") < best.count("{")):
                best = tmpl
        assert best is not None, f"{path} is not documented in {self.path.name}"
        return best

    def response_pointer(self, path: str, method: str, status: int) -> str:
        tmpl = self.template_of(path)
        item = self.spec["paths"][tmpl]
        m = method.lower()
        if m == "head" and self.head_as_get:
            m = "get"
        op = item.get(m)
        if op is None and status == 405:  # an undocumented method: the path's documented 405
            m = next(x for x in METHODS if x in item)
            op = item[m]
        assert op is not None, f"{method} {tmpl} is not documented"
        key = str(status) if str(status) in op["responses"] else "default"
        assert key in op["responses"], (
            f"{method} {tmpl} answered {status}, which the document does not list ({sorted(op['responses'])})"
        )
        return self.deref(f"/paths/{escape(tmpl)}/{m}/responses/{key}")

    def check_document(self) -> None:
        """An OpenAPI 3.1 document with a version whose component schemas are valid JSON Schema 2020-12."""
        assert re.fullmatch(r"3\.1\.\d+", self.spec["openapi"])
        assert self.spec["info"]["version"]
        Draft202012Validator.check_schema({"$defs": self.spec["components"]["schemas"]})

    # --- the document's own examples

    def examples(self) -> Iterator[tuple[str, str, object, str | None]]:
        """Every example of the document: (label, pointer of the schema it illustrates, value, media type)."""
        for name, schema in self.spec["components"]["schemas"].items():
            for ex in ([schema["example"]] if "example" in schema else []) + schema.get("examples", []):
                yield f"schemas/{name}", f"/components/schemas/{name}", ex, None

        def media(ptr: str, node: dict, label: str):
            for ct, m in node.get("content", {}).items():
                sp = f"{ptr}/content/{escape(ct)}/schema"
                values = [m["example"]] if "example" in m else []
                values += [e["value"] for e in m.get("examples", {}).values() if "value" in e]
                for v in values:
                    yield f"{label} {ct}", sp, v, ct

        for name, resp in self.spec["components"].get("responses", {}).items():
            yield from media(f"/components/responses/{name}", resp, f"responses/{name}")
        for p, m, op in self.operations():
            base = f"/paths/{escape(p)}/{m}"
            if "requestBody" in op:
                yield from media(f"{base}/requestBody", op["requestBody"], f"{m} {p} request")
            for st, r in op["responses"].items():
                if "$ref" not in r:
                    yield from media(f"{base}/responses/{st}", r, f"{m} {p} {st}")

    def validate_example(self, schema_ptr: str, value, ct: str | None) -> None:
        v = self.validator_for(schema_ptr)
        if ct in NDJSON and isinstance(value, str):
            for line in value.splitlines():
                v.validate(json.loads(line))
        else:
            v.validate(value)

    # --- responses

    def validate(self, r: Response) -> None:
        """Validates r against the schema the document gives its path, method, status and content type."""
        ptr = self.response_pointer(r.path, r.method, r.status)
        self.seen.add((self.template_of(r.path), r.method.lower(), r.status))
        resp = self.lookup(ptr)
        content = resp.get("content")
        if r.method == "HEAD" or not content:
            if r.method != "HEAD" and r.status not in (101, 204, 304):
                assert not r.body or r.status == 302, (
                    f"{r.method} {r.path} {r.status}: a body where the document declares none"
                )
            return
        ct = r.content_type
        assert ct in content, (
            f"{r.method} {r.path} {r.status}: Content-Type {ct!r}, the document declares {sorted(content)}"
        )
        for name in resp.get("headers", {}):
            if name.lower() in ("allow", "www-authenticate", "location"):
                assert name.lower() in r.headers, f"{r.method} {r.path} {r.status}: no {name} header"
        if r.status == 405:
            assert "allow" in r.headers, f"{r.method} {r.path}: 405 without an Allow header"
        if "content-encoding" in r.headers and (
            ct in NDJSON or ct in ("application/json", "application/octet-stream")
        ):
            assert any(n.lower() == "content-encoding" for n in resp.get("headers", {})), (
                f"{r.method} {r.path} {r.status}: compressed ({r.headers['content-encoding']}), "
                "but the document declares no Content-Encoding header for it"
            )
        v = self.validator_for(f"{ptr}/content/{escape(ct)}/schema")
        if ct == "application/json":
            v.validate(r.json())
        elif ct in NDJSON:
            for line in r.data.decode().splitlines():
                if line.strip():
                    v.validate(json.loads(line))
        elif ct == "application/octet-stream" and "inference-header-content-length" in r.headers:
            n = int(r.headers["inference-header-content-length"])
            # Binary extension: the JSON part is the application/json response.
            self.validator_for(f"{ptr}/content/application~1json/schema").validate(json.loads(r.data[:n]))
        elif ct.startswith("text/") and self.validate_text:
            v.validate(r.data.decode())


# ----------------------------------------------------------------------------- the process


def launch(
    argv: list[str], env_extra: dict | None = None, cwd: Path | None = None, timeout: float = 60.0
) -> tuple[str, subprocess.Popen, object]:
    """Starts ``fw <argv>`` and waits for its "ready on <url>" line: (url, process, stderr log file)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FW_")}  # FW_<FLAG> would set flags
    env.update(env_extra or {})
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([str(FW_BIN), *argv], stdout=subprocess.PIPE, stderr=log, env=env, cwd=cwd)
    found: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.search(rb"ready on (http://\S+)", line)
            if m and not found:
                found.append(m.group(1).decode())

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not found:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log.seek(0)
            pytest.fail(f"fw {argv[0]} did not come up: {log.read().decode(errors='replace')[-3000:]}")
        time.sleep(0.02)
    return found[0], proc, log


@dataclass
class FwProcess:
    """A started fw process that answers HTTP; ``call`` validates every answer against doc."""

    url: str
    proc: subprocess.Popen
    log_file: object
    doc: OpenAPIDoc
    token: str = ""  # sent as a bearer token by call
    http_timeout: float = 30.0

    def log(self) -> str:
        self.log_file.seek(0)
        return self.log_file.read().decode(errors="replace")

    def request(
        self, method: str, target: str, body: bytes | None = None, headers: dict | None = None
    ) -> Response:
        u = urlsplit(self.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=self.http_timeout)
        try:
            hdrs = {"Connection": "close", **(headers or {})}
            conn.request(method, target, body=body, headers=hdrs)
            r = conn.getresponse()
            data = r.read()
            return Response(
                r.status, {k.lower(): v for k, v in r.getheaders()}, data, method, target.split("?")[0]
            )
        finally:
            conn.close()

    def call(
        self, method: str, target: str, body=None, headers=None, *, expect: int, json_body=None
    ) -> Response:
        """Sends a request, checks its status and validates the response against the document."""
        headers = dict(headers or {})
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers.setdefault("Content-Type", "application/json")
        if self.token:
            headers.setdefault("Authorization", f"Bearer {self.token}")
        r = self.request(method, target, body, headers)
        assert r.status == expect, (
            f"{method} {target}: {r.status}, want {expect}: {r.body[:800]!r}\n{self.log()[-2000:]}"
        )
        self.doc.validate(r)
        return r

    def stop(self, timeout: float = 20.0) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ----------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def multipart(
    files: list[tuple[str, str, bytes]],
    fields: dict | None = None,
    file_type: str = "application/octet-stream",
) -> tuple[bytes, str]:
    """A multipart/form-data body of fields and files (form name, file name, data): (body, Content-Type)."""
    boundary = uuid.uuid4().hex
    out = b""
    for k, v in (fields or {}).items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
    for name, filename, data in files:
        out += (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                f"Content-Type: {file_type}\r\n\r\n"
            ).encode()
            + data
            + b"\r\n"
        )
    out += f"--{boundary}--\r\n".encode()
    return out, f"multipart/form-data; boundary={boundary}"


def every_operation_answers(p: FwProcess, target_of: Callable[[str], str]) -> None:
    """Each documented operation, sent to target_of(template) without a body, answers a status the
    document lists for it, and the answer validates."""
    for tmpl, m, op in p.doc.operations():
        r = p.request(m.upper(), target_of(tmpl), None, {})
        assert str(r.status) in op["responses"], (
            f"{m.upper()} {tmpl}: {r.status} is not documented: {r.body[:300]!r}"
        )
        p.doc.validate(r)


def unauthorized_exactly_where_declared(
    p: FwProcess, target_of: Callable[[str], str], body_methods: tuple[str, ...], *, validate_all: bool
) -> None:
    """Each documented operation, sent to target_of(template) without credentials (a "{}" JSON body for
    body_methods), answers 401 exactly where the document declares bearerAuth. The 401 answers are
    validated, and with validate_all every answer."""
    for tmpl, m, op in p.doc.operations():
        protected = p.doc.requires_auth(op)
        r = p.request(
            m.upper(),
            target_of(tmpl),
            b"{}" if m in body_methods else None,
            {"Content-Type": "application/json"},
        )
        assert (r.status == 401) == protected, (
            f"{m.upper()} {tmpl}: {r.status}, bearerAuth declared: {protected}"
        )
        if validate_all or r.status == 401:
            p.doc.validate(r)
