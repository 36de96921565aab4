#!/usr/bin/env bash
# bench/mlflow_logbatch_ab.sh: MLflow's log_batch of 1000 metrics against
# `fw dashboard` binaries side by side (say, before and after a change), in
# interleaved rounds: each round starts each binary's dashboard on a fresh
# SQLite directory and runs bench/mlflow_logbatch.py (CALLS calls of MLflow's
# own client), which prints points/s, a call's p50 and the CPU per call of
# the server and of the client. Loopback only; every server is stopped.
#
#   bash bench/mlflow_logbatch_ab.sh BIN [BIN...]
#
# Environment: ROUNDS (3), CALLS (200), PORT (18555), FW_CACHE_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: bash bench/mlflow_logbatch_ab.sh BIN [BIN...]" >&2; exit 2; }
mlpy=$(bash scripts/setup-mlflow-venv.sh)
port=${PORT:-18555}
pid= work=
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  [[ -n $work ]] && rm -rf "$work"
  return 0
}
trap cleanup EXIT
export MLFLOW_ENABLE_ASYNC_LOGGING=false MLFLOW_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1
for round in $(seq "${ROUNDS:-3}"); do
  for bin in "$@"; do
    work=$(mktemp -d)
    FW_EXPERIMENT_DIR=$work FW_CHECKPOINT_DIR=$work/ck FW_DASHBOARD_TOKEN= FW_DATABASE_URL= \
      "$bin" dashboard --port "$port" >"$work/dashboard.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
    echo "round=$round bin=$bin $(timeout 600 "$mlpy" bench/mlflow_logbatch.py "http://127.0.0.1:$port" "$pid" "${CALLS:-200}")"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
    rm -rf "$work"
    work=
  done
done
