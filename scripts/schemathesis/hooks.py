"""schemathesis hooks for fw (scripts/schemathesis.sh loads them with SCHEMATHESIS_HOOKS).

fw serve's POST /predict/batch takes and answers JSON lines (application/x-ndjson,
application/jsonl): the document gives the schema of one line (BatchItem,
BatchItemResult). schemathesis has no serializer for these types, so without this it
cannot send such a body nor check such an answer.
"""

from __future__ import annotations

import json

import schemathesis

NDJSON = ("application/x-ndjson", "application/jsonl")


@schemathesis.serializer(*NDJSON)
def ndjson_lines(ctx, value):
    """A generated line object as one JSON line; bytes (negative cases) as they are."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return (json.dumps(value) + "\n").encode()


@schemathesis.deserializer(*NDJSON)
def first_line(ctx, response):
    """The answer's first line, which the per-line schema describes (one line per
    item sent; the generated request holds one item)."""
    for line in response.content.splitlines():
        if line.strip():
            return json.loads(line)
    raise ValueError("an empty JSON-lines answer")


# Codes with which fw's /v2 routes answer 500 for a request they refuse, where Triton answers
# 500 (docs/serving.md, Errors): a shape element that is not an unsigned integer, a shared
# memory key that opens no object (bad_request), a load's file path no file system can hold
# (load_failed). Any other 5xx is a failure of the server.
TRITON_REFUSALS_500 = {"bad_request", "load_failed"}


@schemathesis.check
def no_server_failure(ctx, response, case):
    """not_a_server_error, except for Triton's 500 refusals on /v2 (serve.toml turns
    not_a_server_error off for the operations that answer them)."""
    if response.status_code < 500:
        return
    if response.status_code == 500 and case.operation.path.startswith("/v2"):
        try:
            body = json.loads(response.content)
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("code") in TRITON_REFUSALS_500:
            return
    raise AssertionError(
        f"server error {response.status_code}: {response.content[:300]!r}"
    )
