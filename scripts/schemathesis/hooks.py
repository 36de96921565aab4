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
