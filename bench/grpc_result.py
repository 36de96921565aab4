"""One ghz run (its -O json file) as one line of bench/serve.sh's results.jsonl, in wrk's fields.

Usage: grpc_result.py GHZ_JSON SERVER CONCURRENCY ADDR GHZ_EXIT_CODE CONNECTIONS
(prints the line on stdout and a summary on stderr).
"""

import json
import sys
from pathlib import Path

path, server, c, addr, rc, conns = sys.argv[1:]
try:
    g = json.loads(Path(path).read_text())
    pct = {
        p["percentage"]: p["latency"] // 1000
        for p in g.get("latencyDistribution") or []
    }
    ok = (g.get("statusCodeDistribution") or {}).get("OK", 0)
    # ghz closes its connections when -z runs out, failing the calls still in flight with
    # "use of closed network connection" (at most one per concurrent call): the client's
    # doing, not an answer of the server, so they are not counted as errors
    cut = sum(
        n
        for msg, n in (g.get("errorDistribution") or {}).items()
        if "use of closed network connection" in msg
    )
    d = {
        "requests": ok,
        "duration_us": g["total"] // 1000,
        "p50_us": pct[50],
        "p90_us": pct[90],
        "p99_us": pct[99],
        "max_us": g["slowest"] // 1000,
        "mean_us": g["average"] / 1000,
        "err_connect": 0,
        "err_read": 0,
        "err_write": 0,
        "err_status": g["count"] - ok - cut,
        "cut_at_end": cut,
        "err_timeout": 0,
        "ghz_status": g.get("statusCodeDistribution"),
        "ghz_errors": g.get("errorDistribution"),
    }
except Exception as e:  # noqa: BLE001 - a failed run is recorded as failed, not fatal
    d = {"failed": True, "why": repr(e)}
d.update(
    scenario="grpc",
    server=server,
    concurrency=int(c),
    url="grpc://" + addr,
    wrk_rc=int(rc),
    connections=int(conns),
)
print(json.dumps(d))
if d.get("failed"):
    print(f"    grpc {server:17} c={c:<4} FAILED ({d['why']})", file=sys.stderr)
else:
    print(
        f"    grpc {server:17} c={c:<4} {d['requests'] / d['duration_us'] * 1e6:9.1f} req/s  "
        f"p50 {d['p50_us'] / 1e3:8.2f} ms  p99 {d['p99_us'] / 1e3:8.2f} ms  errors {d['err_status']}",
        file=sys.stderr,
    )
