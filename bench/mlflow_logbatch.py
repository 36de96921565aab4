"""CPU per MLflow ``log_batch`` of 1000 metrics, on each side of the call.

Usage: mlflow_logbatch.py URL SERVER_PID [CALLS]

MLflow's own client (``MlflowClient.log_batch(run, metrics=[1000 Metric],
synchronous=True)``, 100 steps of 10 keys, new steps each call) against a
running ``fw dashboard`` at URL whose process is SERVER_PID: points/s, the
p50 of a call, and the CPU per call of the server (from /proc) and of this
client (process time). Run by bench/mlflow_logbatch_ab.sh; loopback only.
"""

import os
import sys
import time

from mlflow import MlflowClient
from mlflow.entities import Metric


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    url, pid = sys.argv[1], int(sys.argv[2])
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    client = MlflowClient(tracking_uri=url)
    run = client.create_run(
        client.create_experiment(f"logbatch-{time.time_ns()}")
    ).info.run_id
    keys = [f"k{i}" for i in range(10)]
    ts = int(time.time() * 1000)

    def batch(i: int) -> None:
        metrics = [
            Metric(k, s * 0.001, ts, s)
            for s in range(i * 100, i * 100 + 100)
            for k in keys
        ]
        client.log_batch(run, metrics=metrics, synchronous=True)

    batch(0)  # warm-up
    lat = []
    server0, client0, t0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
    for i in range(1, calls + 1):
        a = time.perf_counter()
        batch(i)
        lat.append(time.perf_counter() - a)
    elapsed = time.perf_counter() - t0
    server_ms = (cpu_seconds(pid) - server0) / calls * 1000
    client_ms = (time.process_time() - client0) / calls * 1000
    if len(client.get_metric_history(run, "k9")) != (calls + 1) * 100:
        sys.exit("mlflow_logbatch: not every point was stored")
    lat.sort()
    print(
        f"points/s={calls * 1000 / elapsed:.0f} p50_ms={lat[calls // 2] * 1000:.1f} "
        f"server_cpu_ms={server_ms:.2f} client_cpu_ms={client_ms:.2f}"
    )


if __name__ == "__main__":
    main()
