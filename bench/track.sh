#!/usr/bin/env bash
# make bench-track: metric ingest throughput, fw.track vs MLflow's own client and store,
# in one run on the same machine with the same workload (STEPS steps x KEYS metric keys,
# value step * 0.001, one Python process logging):
#   a. fw: bench/track_sdk.py, run.log per step -> HTTP -> fw dashboard -> SQLite, timed
#      until run.flush() has every event acknowledged; the stored count is checked.
#   b. MLflow: bench/track_mlflow.py --mode log_batch, MlflowClient().log_batch with 1000
#      metrics per call (MLflow's cap) into a local SQLite store (sqlite:///.../mlflow.db).
#   c. MLflow: bench/track_mlflow.py --mode log_metrics, mlflow.log_metrics(dict, step=)
#      per step (the fluent API), on METRICS_STEPS steps: it is too slow for STEPS.
#   d. MLflow's client code (bench/track_mlflow_api.py: create_run, log_metric, log_batch of 10 and 1000, the registry, logged models,
#      search_runs over API_RUNS runs with a metric filter and order), the same calls against
#      `fw dashboard` and against MLflow's own `mlflow server` (SQLite, its defaults).
# MLflow lives in its own cached venv (scripts/setup-mlflow-venv.sh: ${FW_CACHE_DIR:-~/.cache/fw}/
# mlflow-venv, pinned by python/mlflow_tests/requirements.txt), never in the project .venv.
# Results: build/bench/track/*.jsonl; the tables: docs/benchmarks.md between
# <!-- bench:track:start/end --> and <!-- bench:track-mlflow-api:start/end -->.
#
# Knobs (environment): STEPS (20000), KEYS (10), FW_REPEAT (3), MLFLOW_REPEAT (2),
# METRICS_STEPS (500), METRICS_REPEAT (1), API_RUNS (10000), API_CREATES (300), API_METRIC_CALLS
# (1000), API_BATCH_CALLS (500), API_SEARCHES (30), FW_VENV (.venv), FW_CACHE_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

STEPS=${STEPS:-20000}
API_RUNS=${API_RUNS:-10000}
API_CREATES=${API_CREATES:-300}
API_METRIC_CALLS=${API_METRIC_CALLS:-1000}
API_BATCH_CALLS=${API_BATCH_CALLS:-500}
API_SEARCHES=${API_SEARCHES:-30}
KEYS=${KEYS:-10}
FW_REPEAT=${FW_REPEAT:-3}
MLFLOW_REPEAT=${MLFLOW_REPEAT:-2}
METRICS_STEPS=${METRICS_STEPS:-500}
METRICS_REPEAT=${METRICS_REPEAT:-1}
cache=${FW_CACHE_DIR:-$HOME/.cache/fw}
venv=$cache/bench-mlflow-venv
py=${FW_VENV:-$root/.venv}/bin/python
out=$root/build/bench/track

log() { echo "==> $*" >&2; }
die() { echo "bench-track: $*" >&2; exit 1; }

[[ -x $py ]] || die "$py is missing: run 'make venv' first (or set FW_VENV)"

# ---- MLflow venv (cached; rebuilt when its requirements change)
mlpy=$(bash scripts/setup-mlflow-venv.sh) || die "the MLflow venv (scripts/setup-mlflow-venv.sh) could not be built"
venv=$(dirname "$(dirname "$mlpy")")
"$venv/bin/python" -c 'import mlflow, sqlalchemy' || die "MLflow venv $venv is broken; remove it and rerun"

# ---- bin/fw: built when missing or older than a Go source (the doc names the commit)
if [[ ! -x bin/fw || -n $(find . -path ./third_party -prune -o -path ./web/node_modules -prune -o \
  \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer bin/fw -print -quit) ]]; then
  log "go build bin/fw"
  go build -o bin/fw ./cmd/fw
fi

mkdir -p "$out"
rm -f "$out"/*.jsonl
load=$(cut -d' ' -f1 /proc/loadavg)
awk -v l="$load" 'BEGIN { exit !(l > 0.5) }' &&
  log "warning: load average $load before the run; the machine is not idle, numbers will be noisy"

# ---- a. fw
log "fw.track: $STEPS steps x $KEYS keys, $FW_REPEAT runs (bench/track_sdk.py)"
FW_BIN=$root/bin/fw timeout 600 "$py" bench/track_sdk.py --steps "$STEPS" --keys "$KEYS" \
  --repeat "$FW_REPEAT" --json | grep '^{' | tee "$out/fw.jsonl"

# ---- b, c. MLflow
export MLFLOW_ENABLE_ASYNC_LOGGING=false
log "MLflow log_batch: $STEPS steps x $KEYS keys, $MLFLOW_REPEAT runs (bench/track_mlflow.py)"
timeout 900 "$venv/bin/python" bench/track_mlflow.py --mode log_batch --steps "$STEPS" \
  --keys "$KEYS" --repeat "$MLFLOW_REPEAT" 2>"$out/mlflow.log" | tee "$out/mlflow.jsonl"
log "MLflow log_metrics: $METRICS_STEPS steps x $KEYS keys, $METRICS_REPEAT runs"
timeout 900 "$venv/bin/python" bench/track_mlflow.py --mode log_metrics --steps "$METRICS_STEPS" \
  --keys "$KEYS" --repeat "$METRICS_REPEAT" 2>>"$out/mlflow.log" | tee -a "$out/mlflow.jsonl"

# ---- d. MLflow's client code against fw's dashboard and against MLflow's own server
tmp=$(mktemp -d /tmp/fw-bench-mlapi.XXXXXX)
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
  done
  pids=()
}
trap 'stop_all; rm -rf "$tmp"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_health() { # url seconds
  for _ in $(seq "$(($2 * 10))"); do curl -sf "$1/health" >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "$1 did not become healthy within $2 s"
}
export MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT=1 MLFLOW_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1
api_args=(--creates "$API_CREATES" --metric-calls "$API_METRIC_CALLS" --batch-calls "$API_BATCH_CALLS" --searches "$API_SEARCHES")

port=$(free_port)
log "MLflow client -> fw dashboard: $API_RUNS runs to search (ingest), then the calls"
FW_EXPERIMENT_DIR=$tmp/fw FW_CHECKPOINT_DIR=$tmp/fw/ck FW_DASHBOARD_TOKEN= FW_DATABASE_URL= \
  setsid bin/fw dashboard --port "$port" >"$out/api_fw_server.log" 2>&1 &
pids+=($!)
wait_health "http://127.0.0.1:$port" 30
timeout 600 "$mlpy" bench/track_mlflow_api.py populate-fw "http://127.0.0.1:$port" --runs "$API_RUNS"
timeout 900 "$mlpy" bench/track_mlflow_api.py bench "http://127.0.0.1:$port" "${api_args[@]}" | tee "$out/api_fw.jsonl"
stop_all

port=$(free_port)
log "MLflow client -> mlflow server (SQLite): $API_RUNS runs to search (MLflow's store), then the calls"
timeout 600 "$mlpy" bench/track_mlflow_api.py populate-mlflow "sqlite:///$tmp/mlflow.db" --artifacts "$tmp/mlart" --runs "$API_RUNS"
setsid "$venv/bin/mlflow" server --backend-store-uri "sqlite:///$tmp/mlflow.db" --artifacts-destination "$tmp/mlart" \
  --host 127.0.0.1 --port "$port" >"$out/api_mlflow_server.log" 2>&1 &
pids+=($!)
wait_health "http://127.0.0.1:$port" 120
timeout 1800 "$mlpy" bench/track_mlflow_api.py bench "http://127.0.0.1:$port" "${api_args[@]}" | tee "$out/api_mlflow.jsonl"
stop_all

# ---- the doc section
log "writing docs/benchmarks.md (track section)"
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain --untracked-files=no -- . ':(exclude)docs' 2>/dev/null) ]] || commit="$commit-dirty"
sqlite_v=$("$venv/bin/python" -c 'import sqlite3; print(sqlite3.sqlite_version)')
python3 - "$out" docs/benchmarks.md "$(nproc)" "${cpu:-unknown}" "$commit" "$sqlite_v" \
  "$("$py" -V 2>&1)" "$load" <<'EOF'
import datetime, json, statistics, sys

out, doc, nproc, cpu, commit, sqlite_v, pyv, load = sys.argv[1:]
START, END = "<!-- bench:track:start -->", "<!-- bench:track:end -->"
fw = [json.loads(l) for l in open(f"{out}/fw.jsonl") if l.strip()]
ml = {r["mode"]: r for r in (json.loads(l) for l in open(f"{out}/mlflow.jsonl") if l.strip())}
if not fw or set(ml) != {"log_batch", "log_metrics"}:
    sys.exit("bench-track: missing results")
for r in fw:
    if r["stored"] != r["points"] or r["spooled"]:
        sys.exit(f"bench-track: fw stored {r['stored']} of {r['points']} points, "
                 f"spooled {r['spooled']} events")
fw_s = statistics.median(r["seconds"] for r in fw)
fw_log = statistics.median(r["log_seconds"] for r in fw)
dash_cpu = statistics.median(r.get("dashboard_cpu_s", 0) for r in fw)
client_cpu = statistics.median(r.get("client_cpu_s", 0) for r in fw)
fw_pts = fw[0]["points"]
fw_pps = fw_pts / fw_s
lb, lm = ml["log_batch"], ml["log_metrics"]
r_lb, r_lm = fw_pps / lb["points_per_s"], fw_pps / lm["points_per_s"]
keys, steps = lb["keys"], lb["steps"]

def rng(vals):
    return f"{min(vals):,.0f}-{max(vals):,.0f}" if len(vals) > 1 else f"{vals[0]:,.0f}"

def ok(x):
    return "**met**" if x else "**missed**"

rows = [
    ("fw.track -> HTTP -> `fw dashboard` -> SQLite", f"`run.log({{{keys} keys}}, step)` per step; "
     "the SDK batches in the background, clock stops when `run.flush()` has every ack",
     fw_pts, fw_s, fw_pps, f"median of {len(fw)}: {rng([r['points_per_s'] for r in fw])}"),
    ("MLflow `MlflowClient` -> SqlAlchemyStore -> SQLite", f"`log_batch`, {lb['metrics_per_call']} "
     "metrics per call (MLflow's cap, `MAX_METRICS_PER_BATCH`), synchronous",
     lb["points"], lb["seconds"], lb["points_per_s"],
     f"median of {len(lb['runs_seconds'])}: {rng([lb['points'] / s for s in lb['runs_seconds']])}"),
    ("MLflow fluent -> SqlAlchemyStore -> SQLite", f"`mlflow.log_metrics({{{keys} keys}}, step=)` "
     f"per step, synchronous; {lm['steps']:,} steps (too slow for {steps:,})",
     lm["points"], lm["seconds"], lm["points_per_s"],
     f"median of {len(lm['runs_seconds'])}: {rng([lm['points'] / s for s in lm['runs_seconds']])}"),
]
t = ["| client / store | mode | points | seconds | points/s | runs (points/s) |",
     "|---|---|---:|---:|---:|---|"]
t += [f"| {a} | {b} | {c:,} | {d:.2f} | {e:,.0f} | {f} |" for a, b, c, d, e, f in rows]

met_abs = fw_pps >= 200_000
why = []
if not met_abs:
    why.append(
        f"- **In the way of 200,000 points/s**: of the {fw_s:.2f} s end to end, the {steps:,} "
        f"`run.log` calls take {fw_log:.2f} s ({fw_log / steps * 1e6:.1f} us/call); the other "
        f"{fw_s - fw_log:.2f} s is the SDK's sender thread (JSON encoding), HTTP, and the "
        "dashboard decoding and inserting into SQLite, all on the same 2 cores as the "
        f"logging loop. CPU over the run: the dashboard {dash_cpu:.2f} s "
        f"({dash_cpu / fw_pts * 1e6:.1f} us per point), the logging process {client_cpu:.2f} s; "
        "the SDK posts one batch at a time and waits for its acknowledgement (given after the "
        "commit), so the dashboard's time per point bounds the rate: 200,000 points/s needs it "
        "under 5 us. Profiled (2026-11-28, the same batches applied in process): about three "
        "quarters of it is writing the points into SQLite (a row each, 500 per statement, and "
        "their summaries) and a quarter decoding the JSON.")
if r_lb < 10:
    why.append(
        f"- **In the way of 10x over `log_batch`**: fw is {r_lb:.1f}x; reaching 10x needs "
        f"{10 * lb['points_per_s']:,.0f} points/s from fw.")
text = f"""{START}
## Tracking ingest: fw.track vs MLflow

Measured {datetime.date.today().isoformat()} on {nproc} cores ({cpu}); fw {commit}, mlflow {lb['mlflow']},
{pyv}, SQLite {sqlite_v} (MLflow's); 1-minute load average before the run: {load}. Command: `make bench-track` (bench/track.sh: bench/track_sdk.py
for fw, bench/track_mlflow.py for MLflow; raw results in build/bench/track/).

Workload: one Python process logs {steps:,} steps x {keys} metric keys = {steps * keys:,} points
(value `step * 0.001`), one step per call, into a fresh run; store setup and run creation are outside
the clock. Every run's point count is checked in the store afterwards.

{chr(10).join(t)}

- fw / MLflow `log_batch`: **{r_lb:.1f}x**
- fw / MLflow `log_metrics`: **{r_lm:.0f}x**

Targets from the issue:

- fw >= 200,000 points/s end to end: {ok(met_abs)} ({fw_pps:,.0f} points/s).
- fw >= 10x MLflow's own client and store, side by side: against `log_batch`, MLflow's fastest
  path, {ok(r_lb >= 10)} ({r_lb:.1f}x); against `log_metrics`, what most training code calls,
  {ok(r_lm >= 10)} ({r_lm:.0f}x).{"".join(chr(10) + w for w in why)}

Fairness:

- Both stores are SQLite files under the same temporary directory, on the same machine, in the
  same `make bench-track` run; the same steps, keys, values and one step per call (`log_batch`
  gets 1000 / {keys} = {1000 // keys} steps per call, as MLflow's docs suggest for bulk logging).
- fw ingests asynchronously: `run.log` only queues, a sender thread posts batches to the
  dashboard (a second process, so fw can use both cores; MLflow's store runs in the logging
  process). The clock stops only when `run.flush()` has the dashboard's acknowledgement for every
  event (an ack is given after the SQLite commit), and the stored count is then read back over
  HTTP, so the fw figure is end to end, HTTP and JSON included.
- MLflow's client is synchronous (`MLFLOW_ENABLE_ASYNC_LOGGING=false`, its default): the clock runs
  from the first call to the last one returning; the count is checked with SQL on `metrics` and
  `get_metric_history` for one key. MLflow talks to SQLite in-process: no HTTP on its side.
- Durability: fw's store uses WAL with `synchronous=NORMAL` (its default); MLflow uses SQLAlchemy's
  SQLite defaults (rollback journal, `synchronous=FULL`), one commit per call: {steps // (1000 // keys):,}
  commits for `log_batch`, one per step for `log_metrics`.
- `log_metrics` runs on {lm['steps']:,} steps, not {steps:,}: its cost is per call, so points/s does not
  depend on N, and {steps:,} steps would take about {steps * keys / lm['points_per_s'] / 60:.0f} minutes.
- Not measured: MLflow through its tracking server (adds HTTP on MLflow's side), MLflow's async
  logging, PostgreSQL.
{END}
"""
s = open(doc).read()
if START in s and END in s:
    s = s[: s.index(START)] + text.rstrip("\n") + s[s.index(END) + len(END):]
else:
    s = s.rstrip("\n") + "\n\n" + text
open(doc, "w").write(s)
print(f"fw {fw_pps:,.0f} points/s; MLflow log_batch {lb['points_per_s']:,.0f} ({r_lb:.1f}x); "
      f"log_metrics {lm['points_per_s']:,.0f} ({r_lm:.0f}x)")
EOF
mlserver_workers=$("$venv/bin/mlflow" server --help 2>/dev/null | sed -n 's/.*requests (default: \([0-9]*\)).*/\1/p' | head -1)
python3 - "$out" docs/benchmarks.md "$(nproc)" "${cpu:-unknown}" "$commit" "$load" "$API_RUNS" "${mlserver_workers:-4}" <<'EOF'
import datetime, json, sys

out, doc, nproc, cpu, commit, load, api_runs, workers = sys.argv[1:]
START, END = "<!-- bench:track-mlflow-api:start -->", "<!-- bench:track-mlflow-api:end -->"
fw = json.loads(open(f"{out}/api_fw.jsonl").read().strip().splitlines()[-1])
ml = json.loads(open(f"{out}/api_mlflow.jsonl").read().strip().splitlines()[-1])
ops = [
    ("create_run", "`MlflowClient.create_run(experiment_id)`"),
    ("log_metric", "`log_metric(run, key, value, step=i)`, one metric per call"),
    ("log_batch_10", "`log_batch(run, metrics=[10 metrics])`, 10 per call"),
    ("log_batch_1000", "`log_batch(run, metrics=[1000 metrics])`, MLflow's cap per call (100 steps of 10 keys)"),
    ("search_runs_100", f"`search_runs([exp], \"metrics.acc > 0.5\", order_by=[\"metrics.acc DESC\"], max_results=100)` over {int(api_runs):,} runs"),
    ("search_runs_1000", "the same with `max_results=1000` (the client's default)"),
    ("create_registered_model", "`create_registered_model(name)`"),
    ("create_model_version", "`create_model_version(name, \"runs:/<run>/model\", run_id=)` (the client waits for READY)"),
    ("set_registered_model_alias", "`set_registered_model_alias(name, \"champion\", \"1\")`"),
    ("get_model_version_by_alias", "`get_model_version_by_alias(name, \"champion\")`"),
    ("search_registered_models", "`search_registered_models(\"name LIKE '<prefix>-%'\", max_results=100)` (100 models match)"),
    ("search_model_versions", "`search_model_versions(\"name = '<model>'\")`"),
    ("create_logged_model", "`create_logged_model(experiment_id, name=)` (MLflow 3)"),
    ("search_logged_models", "`search_logged_models(experiment_ids=[exp], max_results=100)` (100 models)"),
]
t = ["| call | fw calls/s | fw p50 ms | fw p99 ms | MLflow calls/s | MLflow p50 ms | MLflow p99 ms | fw / MLflow |",
     "|---|---:|---:|---:|---:|---:|---:|---:|"]
ratios = {}
for k, desc in ops:
    a, b = fw[k], ml[k]
    ratios[k] = b["p50_ms"] / a["p50_ms"]
    t.append(f"| {desc} ({a['calls']} calls) | {a['calls_per_s']:,.1f} | {a['p50_ms']:.1f} | {a['p99_ms']:.1f} | "
             f"{b['calls_per_s']:,.1f} | {b['p50_ms']:.1f} | {b['p99_ms']:.1f} | **{ratios[k]:.1f}x** |")

def ok(x):
    return "**met**" if x else "**missed**"

goal_ops = ["create_run", "log_metric", "log_batch_10", "search_runs_100"]
worst = min(goal_ops, key=lambda k: ratios[k])
reg_ops = [k for k, _ in ops[6:]]
reg_worst = min(reg_ops, key=lambda k: ratios[k])
text = f"""{START}
## MLflow's client: fw dashboard vs mlflow server

Measured {datetime.date.today().isoformat()} on {nproc} cores ({cpu}); fw {commit}, mlflow {fw['mlflow']}
(client and server); 1-minute load average before `make bench-track`: {load}. Command: `make bench-track`
(bench/track.sh part d, bench/track_mlflow_api.py; raw results in build/bench/track/api_*.jsonl).

The same MLflow client code (`MlflowClient`, synchronous, one call at a time, each call timed on
its own) against (a) `fw dashboard` (SQLite, its defaults) and (b) MLflow's own `mlflow server
--backend-store-uri sqlite:///...` (its defaults: {workers} uvicorn workers), one after the other
on the same machine. Both hold the same {int(api_runs):,} runs for the search (a param, a tag,
metrics `acc` and `loss`, finished): fw's loaded through its ingest API, MLflow's written by its own
`SqlAlchemyStore` (one run, its rows copied in SQL for the others); loading is not timed. The
bench checks what it measures: every logged point is read back with `get_metric_history`,
every search answer has `max_results` runs, all with `acc > 0.5`, ordered by `acc`, every model
gets version 1 and its alias names it, and each registry or logged-model search answers the
models it should.
"fw / MLflow" is MLflow's p50 over fw's.

{chr(10).join(t)}

Targets from the issue:

- fw at least 5x MLflow on each call: {ok(all(ratios[k] >= 5 for k in goal_ops))} (lowest:
  {worst}, {ratios[worst]:.1f}x).
- MLflow's `log_batch` through fw at >= 50,000 points/s (1000 metrics per call, one client):
  {ok(fw['log_batch_1000']['points_per_s'] >= 50000)} ({fw['log_batch_1000']['points_per_s']:,.0f} points/s; MLflow's
  server: {ml['log_batch_1000']['points_per_s']:,.0f}). Of fw's {fw['log_batch_1000']['p50_ms']:.1f} ms per call (p50),
  {fw['log_batch_1000_client']['p50_ms']:.1f} ms is the client building the request (its Metric objects,
  protobuf and JSON, timed without HTTP).
- The model registry and MLflow 3's logged models (the last {len(reg_ops)} rows): fw's p50 is
  {min(ratios[k] for k in reg_ops):.1f}x-{max(ratios[k] for k in reg_ops):.1f}x below MLflow's server's (lowest: {reg_worst}). A search
  answering 100 models is mostly MLflow's client parsing them: the registered-model search as raw
  HTTP, the answer read but not parsed, {fw['search_registered_models_http']['p50_ms']:.1f} ms p50 on fw,
  {ml['search_registered_models_http']['p50_ms']:.1f} ms on MLflow's server.
- `search_runs` over {int(api_runs):,} runs under 100 ms p50 (with `max_results=100`):
  {ok(fw['search_runs_100']['p50_ms'] < 100)} ({fw['search_runs_100']['p50_ms']:.1f} ms, measured at the
  client: MLflow's client parses the 100 runs too; the same search as raw HTTP, the answer read but
  not parsed into MLflow's objects: {fw['search_runs_100_http']['p50_ms']:.1f} ms p50 on fw,
  {ml['search_runs_100_http']['p50_ms']:.1f} ms on MLflow's server).

Not measured: PostgreSQL behind either server, MLflow's asynchronous logging, more than one
client at a time.
{END}
"""
s = open(doc).read()
if START in s and END in s:
    s = s[: s.index(START)] + text.rstrip("\n") + s[s.index(END) + len(END):]
else:
    s = s.rstrip("\n") + "\n\n" + text
open(doc, "w").write(s)
print(" ".join(f"{k} {ratios[k]:.1f}x" for k in ratios), f"search p50 {fw['search_runs_100']['p50_ms']:.1f} ms")
EOF
log "done: docs/benchmarks.md, raw results in $out"
