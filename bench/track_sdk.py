"""End-to-end throughput of fw.track: SDK -> HTTP -> fw dashboard -> SQLite.

Starts ``fw dashboard`` (FW_BIN, default <repo>/bin/fw) on a free port over a temporary directory,
logs ``--steps`` steps of ``--keys`` metrics from one process, waits for the flush, checks the
point count in the store and prints points per second. Usage::

    go build -o bin/fw ./cmd/fw && .venv/bin/python bench/track_sdk.py [--steps 20000] [--keys 10]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--keys", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="one JSON line per run")
    a = ap.parse_args()
    fw_bin = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="fw-track-bench-")
    env = {
        **os.environ,
        "FW_EXPERIMENT_DIR": f"{tmp}/exp",
        "FW_CHECKPOINT_DIR": f"{tmp}/ckpt",
    }
    os.environ.update(env)
    os.environ["FW_TRACKING_URI"] = url = f"http://127.0.0.1:{port}"
    dash = subprocess.Popen(
        [str(fw_bin), "dashboard", "--port", str(port)],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        import fw.track

        keys = [f"metric_{i}" for i in range(a.keys)]

        def dash_cpu() -> float:
            """The dashboard's CPU seconds so far (user + system, from /proc)."""
            with open(f"/proc/{dash.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        for rep in range(a.repeat):
            with fw.track.run(experiment="bench", capture_output=False) as run:
                c0, p0 = dash_cpu(), time.process_time()
                t0 = time.perf_counter()
                for step in range(a.steps):
                    run.log({k: step * 0.001 for k in keys}, step=step)
                t1 = time.perf_counter()
                run.flush(120)
                t2 = time.perf_counter()
                c1, p1 = dash_cpu(), time.process_time()
            with urllib.request.urlopen(f"{url}/api/runs/{run.id}", timeout=10) as r:
                stored = sum(
                    m["count"] for m in json.loads(r.read())["metrics"].values()
                )
            points = a.steps * a.keys
            if a.json:
                rec = {"client": "fw", "mode": "run.log", "points": points}
                rec |= {"stored": stored, "spooled": run.spooled, "seconds": t2 - t0}
                rec |= {"log_seconds": t1 - t0, "points_per_s": points / (t2 - t0)}
                rec |= {"dashboard_cpu_s": c1 - c0, "client_cpu_s": p1 - p0}
                print(json.dumps(rec), flush=True)
                continue
            print(
                f"run {rep + 1}: {points} points, log calls {t1 - t0:.3f} s ({(t1 - t0) / a.steps * 1e6:.2f} us/call), "
                f"end to end {t2 - t0:.3f} s = {points / (t2 - t0):,.0f} points/s; stored {stored}; spooled {run.spooled}"
            )
    finally:
        dash.terminate()
        dash.wait(30)


if __name__ == "__main__":
    main()
