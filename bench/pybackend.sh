#!/usr/bin/env bash
# make bench-pybackend: one Python model (Triton's Python backend: a model.py with
# TritonPythonModel) served by fw serve and by tritonserver with its own Python backend,
# side by side on this machine: the same model directory, the same config.pbtxt (dynamic
# batching up to 8 requests, 1 ms queue delay, one instance), the same V2 JSON request,
# wrk on loopback. Prints the table and writes it into docs/benchmarks.md (bench:pybackend).
#
# tritonserver comes from PyPI's nvidia-pytriton (its bundled 2.51 server ships the Python
# backend), in its own Python 3.12 venv (bench/peers/triton_requirements.txt, the venv
# make bench-serve uses); it runs here with its stub found through the venv's bin on PATH
# and Python 3.12's libpython on LD_LIBRARY_PATH.
#
# Env: DURATION (10s), CONCURRENCY ("1 8 32"), PORT_BASE (18300), WRITE_DOCS (1).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONCURRENCY=${CONCURRENCY:-1 8 32}
PORT_BASE=${PORT_BASE:-18300}
HOST=127.0.0.1
cache=${FW_CACHE_DIR:-$HOME/.cache/fw}
trvenv=$cache/bench-triton-venv
out=$(mktemp -d "${TMPDIR:-/tmp}/fw-bench-pybackend.XXXXXX")
log() { echo "==> $*" >&2; }
die() { echo "bench-pybackend: $*" >&2; exit 1; }
command -v wrk >/dev/null || die "wrk is needed (apt-get install wrk)"
py=${FW_VENV:-.venv}/bin/python
[[ -x $py ]] || die "no venv at ${FW_VENV:-.venv} (make setup)"

# ---- the Triton venv (as bench/serve.sh makes it)
trreq=bench/peers/triton_requirements.txt
trwant=$(sha256sum "$trreq" | cut -d' ' -f1)
if [[ ! -x $trvenv/bin/python || $(cat "$trvenv/.requirements.sha256" 2>/dev/null) != "$trwant" ]]; then
  trpy=${TRITON_PYTHON:-}
  if [[ -z $trpy ]]; then
    if command -v pyenv >/dev/null && [[ -x "$(pyenv root)/versions/3.12.1/bin/python" ]]; then
      trpy="$(pyenv root)/versions/3.12.1/bin/python"
    else
      trpy=$(command -v python3.12 || true)
    fi
  fi
  [[ -n $trpy && -x $trpy ]] || die "Triton needs Python 3.12 (pyenv install 3.12.1, or TRITON_PYTHON=/path/to/python3.12)"
  log "Triton venv $trvenv (pinned from $trreq, $trpy)"
  rm -rf "$trvenv"
  timeout 900 "$trpy" -m venv "$trvenv"
  timeout 1800 "$trvenv/bin/pip" install -q --disable-pip-version-check -r "$trreq"
  echo "$trwant" >"$trvenv/.requirements.sha256"
fi
trsite=$("$trvenv/bin/python" -c 'import pytriton, os; print(os.path.dirname(pytriton.__file__))')
trlib=$("$trvenv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
trver=$("$trvenv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# tritonserver's own tree (its libraries are found relative to its binaries), with the
# stub for the venv's Python where the backend looks for it (PyTriton puts it there in
# its copy of the tree)
trdir=$trsite/tritonserver
trbackends=$trdir/backends
cp "$trdir/python_backend_stubs/$trver/triton_python_backend_stub" "$trbackends/python/"

# ---- the model: sum and difference of two FP32 [16] inputs, every request of a batch
repo=$out/repo
mkdir -p "$repo/add_sub/1"
cat >"$repo/add_sub/config.pbtxt" <<'EOF'
name: "add_sub"
backend: "python"
max_batch_size: 8
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 16 ] }, { name: "INPUT1", data_type: TYPE_FP32, dims: [ 16 ] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 16 ] }, { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 16 ] }]
dynamic_batching { max_queue_delay_microseconds: 1000 }
instance_group [{ count: 1, kind: KIND_CPU }]
parameters [{ key: "fw_hold_when_idle", value: { string_value: "false" } }]
EOF
cat >"$repo/add_sub/1/model.py" <<'EOF'
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
EOF
row=$(python3 -c 'print([round(i * 0.1, 1) for i in range(16)])')
cat >"$out/v2.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [==[{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":$row},{"name":"INPUT1","shape":[1,16],"datatype":"FP32","data":$row}]}]==]
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"err":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.status + e.timeout))
end
EOF

pids=()
cleanup() {
  for p in "${pids[@]}"; do
    pkill -KILL -s "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT
clk=$(getconf CLK_TCK)
session_cpu() { # CPU seconds of every process in session $1 (the server and its model processes)
  local t=0 p
  for p in $(pgrep -s "$1" 2>/dev/null); do
    t=$((t + $(awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
wait_ready() { # URL PID
  for _ in $(seq 1 240); do
    curl -sf -o /dev/null "$1" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.25
  done
  return 1
}
results=$out/results.jsonl
run() { # NAME PORT SID
  local name=$1 port=$2 sid=$3 url="http://$HOST:$2/v2/models/add_sub/infer"
  timeout 30 wrk -t1 -c8 -d2s -s "$out/v2.lua" "$url" >/dev/null 2>&1 || true # warm-up
  for c in $CONCURRENCY; do
    local cpu0 cpu1 j
    cpu0=$(session_cpu "$sid")
    j=$(timeout 120 wrk -t1 -c"$c" -d"$DURATION" --latency --timeout 10s -s "$out/v2.lua" "$url" 2>&1 | sed -n 's/^WRKJSON //p')
    cpu1=$(session_cpu "$sid")
    [[ -n $j ]] || j='{"failed":true}'
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(server=sys.argv[2], concurrency=int(sys.argv[3]), cpu_s=(int(sys.argv[5])-int(sys.argv[4]))/int(sys.argv[6])); print(json.dumps(d))' \
      "$j" "$name" "$c" "$cpu0" "$cpu1" "$clk" >>"$results"
    tail -1 "$results" >&2
  done
}

log "fw serve --model-repository (its Python backend, $py)"
setsid bin/fw serve --model-repository "$repo" --python "$py" --host $HOST --port $PORT_BASE >"$out/fw.log" 2>&1 &
fwpid=$!
pids+=("$fwpid")
wait_ready "http://$HOST:$PORT_BASE/v2/models/add_sub/ready" "$fwpid" || { tail -20 "$out/fw.log"; die "fw serve did not get ready"; }
run fw $PORT_BASE "$fwpid"
stop() { # SID PID: TERM, then wait for it (KILL after 30 s)
  pkill -TERM -s "$1" 2>/dev/null || true
  timeout 30 tail --pid="$2" -f /dev/null || pkill -KILL -s "$1" 2>/dev/null || true
  wait "$2" 2>/dev/null || true
}
stop "$fwpid" "$fwpid"

log "tritonserver (its Python backend, $trvenv)"
PATH="$trvenv/bin:$PATH" LD_LIBRARY_PATH="$trlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  setsid "$trdir/bin/tritonserver" --model-repository "$repo" --backend-directory "$trbackends" \
  --http-address $HOST --http-port $((PORT_BASE + 1)) --grpc-address $HOST --grpc-port $((PORT_BASE + 2)) \
  --allow-metrics false >"$out/triton.log" 2>&1 &
trpid=$!
pids+=("$trpid")
wait_ready "http://$HOST:$((PORT_BASE + 1))/v2/models/add_sub/ready" "$trpid" || { tail -20 "$out/triton.log"; die "tritonserver did not get ready"; }
trserver=$(curl -s "http://$HOST:$((PORT_BASE + 1))/v2" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("version","?"))')
run triton $((PORT_BASE + 1)) "$trpid"
stop "$trpid" "$trpid"

"$py" - "$results" "$(git rev-parse --short HEAD)" "$trserver" "$DURATION" "${WRITE_DOCS:-1}" <<'EOF'
import json, re, sys, datetime
path, commit, trserver, duration, write = sys.argv[1:6]
rows = [json.loads(l) for l in open(path)]
by = {(r["server"], r["concurrency"]): r for r in rows}
lines = [
    f"`make bench-pybackend` (bench/pybackend.sh) on commit {commit} ({datetime.date.today()}), 2 CPUs, loopback, wrk -t1 for {duration} per row after a 2 s warm-up. "
    f"The same model directory for both: a Python model (`backend: \"python\"`, a `model.py` whose `execute` answers each request's sum and difference of two FP32 [16] inputs), "
    "`max_batch_size: 8`, `dynamic_batching { max_queue_delay_microseconds: 1000 }`, one instance; the same V2 JSON request (`POST /v2/models/add_sub/infer`, one row). "
    f"fw serve's Python backend (pybackend: a Python process per instance, a pipe) against tritonserver {trserver}'s own Python backend (PyPI nvidia-pytriton 0.7.0's build, its stub and shared memory). "
    "Server CPU is every process of the server's session (the server and its model processes) over the run, per request. "
    "Configured alike, the batchers differ at low load: Triton's dynamic batcher holds a batch that is not full for the queue delay (1 ms) even when the instance is idle, "
    "fw's sends what is queued as soon as the instance is free (it holds only for `preferred_batch_size`).",
    "",
    "| server | concurrency | req/s | p50 ms | p99 ms | errors | server CPU µs/request | fw / Triton req/s |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
]
for (server, c), r in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0] != "fw")):
    if r.get("failed"):
        lines.append(f"| {server} | {c} | failed | | | | | |")
        continue
    rps = r["requests"] / r["duration_us"] * 1e6
    cpu = r["cpu_s"] / max(r["requests"], 1) * 1e6
    ratio = ""
    t = by.get(("triton", c))
    if server == "fw" and t and not t.get("failed"):
        ratio = f"{rps / (t['requests'] / t['duration_us'] * 1e6):.1f}x"
    lines.append(f"| {server} | {c} | {rps:.0f} | {r['p50_us'] / 1e3:.2f} | {r['p99_us'] / 1e3:.2f} | {r['err']} | {cpu:.0f} | {ratio} |")
table = "\n".join(lines)
print(table)
if write == "1":
    doc = open("docs/benchmarks.md").read()
    block = f"<!-- bench:pybackend:start -->\n{table}\n<!-- bench:pybackend:end -->"
    if "<!-- bench:pybackend:start -->" in doc:
        doc = re.sub(r"<!-- bench:pybackend:start -->.*?<!-- bench:pybackend:end -->", lambda m: block, doc, flags=re.S)
    else:
        doc = doc.rstrip("\n") + "\n\n## Python models: fw's Python backend vs Triton's\n\n" + block + "\n"
    open("docs/benchmarks.md", "w").write(doc)
EOF
