#!/usr/bin/env bash
# make bench-serve: HTTP serving benchmark, in one run, on the same model files:
#   a. the HTTP ceiling (bench/ceiling: bare fasthttp, fixed JSON answer)
#   b. fw serve /predict on digits_mlp.onnx (default batching, and one tuned setting)
#   c. LitServe + onnxruntime with its dynamic batching on (bench/peers/litserve_app.py)
#   d. FastAPI + uvicorn + onnxruntime the way FastAPI's docs write it (bench/peers/fastapi_app.py)
#      and FastAPI's threadpool variant (plain `def` endpoints, FW_PEER_FASTAPI=def)
#   g. TorchServe + onnxruntime in a custom handler, TorchServe's dynamic batching on
#      (bench/peers/torchserve_handler.py, bench/peers/torchserve.properties; needs Java 11+)
#   h. Triton (PyPI nvidia-pytriton: tritonserver + its Python backend, onnxruntime in the
#      @batch callable, Triton's dynamic batcher; bench/peers/triton_app.py, needs Python 3.12)
#      and fw's own /v2/models/digits_mlp/infer, the same KServe V2 JSON request
#   i. the peers again at onnxruntime's defaults (spinning on, threads = physical cores),
#      at DEFAULTS_CONCURRENCY only
#   j. gRPC (the Open Inference Protocol's ModelInfer, the row as raw_input_contents): fw serve
#      --grpc-port, Triton's gRPC port, and the gRPC ceiling (bench/ceiling -grpc: a bare grpc-go
#      server with a fixed answer), loaded by ghz (Go module proxy), one CPU like wrk's one thread
#   e. /predict/image on resnet18.onnx: fw, LitServe, FastAPI (both), TorchServe, Triton; and fw
#      again on a copy whose recipe is the simple form fw used before it ran torchvision's eval
#      transform (stretch to 224x224, no antialiasing, no crop): row fw-stretch, the cost of the
#      transform side by side (IMG_STRETCH_ROW=0 leaves it out)
#   f. the engine ceiling for resnet18 (no HTTP; bench/ceiling -engine)
# ONNX Runtime settings: every peer's headline rows run with fw's session settings
# (intra-op threads = what `fw serve` uses, thread spinning off: FW_PEER_THREADS and
# FW_BENCH_ORT_SPIN=0, read by bench/peers/common.py); "fw --engine-spin" (b'') and the
# peers' "onnxruntime defaults" rows (i) show the other direction.
# Load generator: wrk, one thread, 127.0.0.1 only. Results: build/bench/serve/,
# the table: docs/benchmarks.md between <!-- bench:serve:start/end -->.
#
# Knobs (environment): DURATION (5s), IMG_DURATION (10s), CONCURRENCY ("1 16 64 256"),
# IMG_CONCURRENCY ("1 16 64"), DEFAULTS_CONCURRENCY ("64"; empty: no defaults rows),
# FW_TUNED_FLAGS, SKIP_PEERS=1, SKIP_IMAGE=1, SKIP_JSON=1 (no /predict, /v2 or gRPC rows: with
# BENCH_ONLY=fw, just fw's /predict/image rows), SKIP_TORCHSERVE=1, SKIP_TRITON=1,
# IMG_JPEG (the picture the image rows send; default the 224x224 sample), IMG_STRETCH_ROW (1),
# BENCH_ONLY (a subset of "engine ceiling fw litserve fastapi torchserve triton",
# space- or comma-separated; empty: all), BENCH_OUT (build/bench/serve),
# BENCH_DOC (docs/benchmarks.md: where the report goes), PEER_THREADS (the peers'
# intra-op threads; default: what `fw verify` reports fw uses),
# TS_BATCH (64) / TS_DELAY_MS (1) and TS_IMG_BATCH (16) / TS_IMG_DELAY_MS (5) for
# TorchServe's batchSize / maxBatchDelay, TRITON_BATCH (64) / TRITON_DELAY_US (1000)
# and TRITON_IMG_BATCH (16) / TRITON_IMG_DELAY_US (5000) for Triton's dynamic batcher,
# TRITON_PYTHON (a Python 3.12; default: pyenv's 3.12.1),
# PROFILE=1 (perf profile of fw /predict at c=64 into build/bench/serve/),
# FW_CACHE_DIR (peers venv cache, ghz), PORT_BASE (18100; uses PORT_BASE..PORT_BASE+20),
# GRPC_CONNECTIONS_PER (16: ghz opens one HTTP/2 connection per 16 concurrent calls).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

DURATION=${DURATION:-5s}
IMG_DURATION=${IMG_DURATION:-10s}
CONCURRENCY=${CONCURRENCY:-1 16 64 256}
IMG_CONCURRENCY=${IMG_CONCURRENCY:-1 16 64}
DEFAULTS_CONCURRENCY=${DEFAULTS_CONCURRENCY-64}
FW_TUNED_FLAGS=${FW_TUNED_FLAGS:---max-batch-size 8 --threads 1} # fw tune's best for digits_mlp (docs/benchmarks.md, fw tune)
LIT_BATCH=${LIT_BATCH:-64}
LIT_TIMEOUT=${LIT_TIMEOUT:-0.001}
TS_BATCH=${TS_BATCH:-64}
TS_DELAY_MS=${TS_DELAY_MS:-1}
TS_IMG_BATCH=${TS_IMG_BATCH:-16}
TS_IMG_DELAY_MS=${TS_IMG_DELAY_MS:-5}
TRITON_BATCH=${TRITON_BATCH:-64}
TRITON_DELAY_US=${TRITON_DELAY_US:-1000}
TRITON_IMG_BATCH=${TRITON_IMG_BATCH:-16}
TRITON_IMG_DELAY_US=${TRITON_IMG_DELAY_US:-5000}
BENCH_ONLY=${BENCH_ONLY:-}
GHZ_VERSION=v0.121.0
GRPC_CONNECTIONS_PER=${GRPC_CONNECTIONS_PER:-16}
PORT_BASE=${PORT_BASE:-18100}
HOST=127.0.0.1 # loopback only, by design
cache=${FW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fw}
venv=$cache/bench-peers-venv
tsvenv=$cache/bench-torchserve-venv
trvenv=$cache/bench-triton-venv
out=${BENCH_OUT:-$root/build/bench/serve}
doc=${BENCH_DOC:-docs/benchmarks.md}
mlp=build/models/digits_mlp.onnx
img_model=build/models/resnet18.onnx
jpeg=${IMG_JPEG:-build/models/samples/rgb_224.jpg}
zeros='{"data":[[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]]}'

log() { echo "==> $*" >&2; }
die() { echo "bench-serve: $*" >&2; exit 1; }

# only NAME: whether BENCH_ONLY selects NAME (everything when BENCH_ONLY is empty)
only_names="engine ceiling fw litserve fastapi torchserve triton"
for n in ${BENCH_ONLY//,/ }; do
  [[ " $only_names " == *" $n "* ]] || die "BENCH_ONLY: unknown name '$n' (one of: $only_names)"
done
only() { [[ -z $BENCH_ONLY || " ${BENCH_ONLY//,/ } " == *" $1 "* ]]; }

for f in "$mlp" "$img_model" "$jpeg"; do
  [[ -f $f ]] || die "$f is missing: run 'make models' first"
done

# ---- every server we start is its own process group; kill them all on exit
# (plus every process of a Triton tree, by PID: tritonserver can outlive PyTriton)
pgids=()
extra_pids=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for g in "${pgids[@]}"; do kill -TERM -- "-$g" 2>/dev/null || kill -TERM "$g" 2>/dev/null || true; done
  for p in "${extra_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 1
  for g in "${pgids[@]}"; do kill -KILL -- "-$g" 2>/dev/null || kill -KILL "$g" 2>/dev/null || true; done
  for p in "${extra_pids[@]}"; do
    kill -KILL "$p" 2>/dev/null || true
    rm -f /dev/shm/pytrtion"$p"-* 2>/dev/null || true
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME CMD...: run CMD in a new session (process group), log to $out/NAME.log
start() {
  local name=$1
  shift
  setsid timeout 1800 "$@" >"$out/$name.log" 2>&1 &
  pgids+=("$!")
  last_pgid=$!
}
stop_last() {
  kill -TERM -- "-$last_pgid" 2>/dev/null || kill -TERM "$last_pgid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 -- "-$last_pgid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL -- "-$last_pgid" 2>/dev/null || true
  sleep 0.2
}
port_free() { ! (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }
# descendants PID: every process below PID, depth first
descendants() {
  local c
  for c in $(pgrep -P "$1" 2>/dev/null); do
    echo "$c"
    descendants "$c"
  done
}

# wait_ready URL CURL-ARGS...: POST until 2xx, at most 120 s
wait_ready() {
  local url=$1
  shift
  for _ in $(seq 240); do
    kill -0 "$last_pgid" 2>/dev/null || { tail -20 "$out"/*.log >&2; die "server for $url exited early"; }
    if curl -fsS -o /dev/null --max-time 10 -X POST "$@" "$url" 2>/dev/null; then return 0; fi
    sleep 0.5
  done
  die "$url not ready after 120 s"
}
# wait_get URL: GET until 200, at most 120 s (Triton's /v2/models/NAME/ready: its
# server turns ready before the model does)
wait_get() {
  for _ in $(seq 240); do
    kill -0 "$last_pgid" 2>/dev/null || { tail -20 "$out"/*.log >&2; die "server for $1 exited early"; }
    [[ $(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "$1" 2>/dev/null) == 200 ]] && return 0
    sleep 0.5
  done
  die "$1 not 200 after 120 s"
}

# ---- 1. wrk
if ! command -v wrk >/dev/null; then
  log "installing wrk (apt-get)"
  sudo_=""
  [[ $(id -u) -eq 0 ]] || sudo_=sudo
  timeout 300 $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 300 $sudo_ apt-get install -y -qq wrk >/dev/null
fi

# ---- 1'. ghz, the gRPC load generator (github.com/bojand/ghz from the Go module proxy)
ghz=$cache/bin/ghz-$GHZ_VERSION
if [[ ${SKIP_JSON:-0} != 1 && ! -x $ghz ]]; then
  log "installing ghz $GHZ_VERSION (go install from the Go module proxy)"
  mkdir -p "$cache/bin"
  GOBIN=$cache/bin/ghz-build timeout 900 go install "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION"
  mv "$cache/bin/ghz-build/ghz" "$ghz"
  rm -rf "$cache/bin/ghz-build"
fi

# ---- 2. peers venv (cached; rebuilt when requirements.txt changes; not needed with
# SKIP_PEERS=1, where the report's versions come from python3)
req=bench/peers/requirements.txt
want=$(sha256sum "$req" | cut -d' ' -f1)
meta_py=$venv/bin/python
if [[ ${SKIP_PEERS:-0} == 1 ]]; then
  meta_py=python3
elif [[ ! -x $venv/bin/python || $(cat "$venv/.requirements.sha256" 2>/dev/null) != "$want" ]]; then
  log "peers venv $venv (pinned from $req; no torch)"
  mkdir -p "$cache"
  rm -rf "$venv"
  py=$(command -v python3)
  timeout 900 "$py" -m venv "$venv"
  timeout 900 "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  echo "$want" >"$venv/.requirements.sha256"
fi
[[ ${SKIP_PEERS:-0} == 1 ]] || "$venv/bin/python" -c 'import litserve, fastapi, uvicorn, onnxruntime, PIL, multipart' ||
  die "peers venv $venv is broken; remove it and rerun"

# ---- 2'. TorchServe venv (its own: torchserve + torch-model-archiver + torch + onnxruntime)
with_ts=0
if [[ ${SKIP_PEERS:-0} != 1 && ${SKIP_TORCHSERVE:-0} != 1 ]] && only torchserve; then
  command -v java >/dev/null ||
    die "TorchServe needs Java 11+ (apt-get install openjdk-17-jre-headless), or set SKIP_TORCHSERVE=1"
  tsreq=bench/peers/torchserve_requirements.txt
  tswant=$(sha256sum "$tsreq" | cut -d' ' -f1)
  if [[ ! -x $tsvenv/bin/python || $(cat "$tsvenv/.requirements.sha256" 2>/dev/null) != "$tswant" ]]; then
    log "TorchServe venv $tsvenv (pinned from $tsreq; torch is a multi-GB CUDA wheel from PyPI, reused from pip's cache)"
    mkdir -p "$cache"
    rm -rf "$tsvenv"
    timeout 900 "$(command -v python3)" -m venv "$tsvenv"
    timeout 1800 "$tsvenv/bin/pip" install -q --disable-pip-version-check -r "$tsreq"
    echo "$tswant" >"$tsvenv/.requirements.sha256"
  fi
  "$tsvenv/bin/python" -c 'import ts.model_service_worker, onnxruntime, numpy, PIL' ||
    die "TorchServe venv $tsvenv is broken; remove it and rerun"
  with_ts=1
fi

# ---- 2''. Triton venv (its own, Python 3.12: nvidia-pytriton 0.7.0 fails to load a model
# under Python 3.11 here; its backend stub needs that Python's libpython3.12.so)
with_triton=0
if [[ ${SKIP_PEERS:-0} != 1 && ${SKIP_TRITON:-0} != 1 ]] && only triton; then
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
    [[ -n $trpy && -x $trpy ]] ||
      die "Triton needs Python 3.12 (pyenv install 3.12.1, or TRITON_PYTHON=/path/to/python3.12), or set SKIP_TRITON=1"
    log "Triton venv $trvenv (pinned from $trreq, $trpy)"
    mkdir -p "$cache"
    rm -rf "$trvenv"
    timeout 900 "$trpy" -m venv "$trvenv"
    timeout 1800 "$trvenv/bin/pip" install -q --disable-pip-version-check -r "$trreq"
    echo "$trwant" >"$trvenv/.requirements.sha256"
  fi
  trlib=$("$trvenv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
  tr_ld="$trlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  LD_LIBRARY_PATH=$tr_ld "$trvenv/bin/python" -c 'import pytriton.triton, onnxruntime, numpy, PIL' ||
    die "Triton venv $trvenv is broken; remove it and rerun"
  with_triton=1
fi

# ---- build
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.jsonl "$out"/*.txt "$out"/*.log
rm -rf "$out/torchserve"
log "go build bin/fw and build/bench/ceiling"
go build -o bin/fw ./cmd/fw
go build -o build/bench/ceiling ./bench/ceiling
# the code measured: "commit abc1234[, dirty]" (as internal/benchdoc.Commit), taken at build time
fw_commit=$(python3 bench/serve_report.py --commit)

# ---- the peers' ONNX Runtime settings: fw's (the intra-op threads `fw serve` uses with
# its defaults for each model, as `fw verify` reports them: one for a small model whose
# calls are as fast with one; spinning off, fw's default) for the headline rows;
# onnxruntime's own defaults (nothing set) for the rows marked so
verify_threads() { bin/fw verify "$1" --json --time 0 | python3 -c 'import json, sys; print(json.load(sys.stdin)["threads"])'; }
fw_threads=${PEER_THREADS:-$(verify_threads "$mlp")}
fw_img_threads=${PEER_IMG_THREADS:-$(verify_threads "$img_model")}
[[ $fw_threads =~ ^[1-9][0-9]*$ && $fw_img_threads =~ ^[1-9][0-9]*$ ]] ||
  die "cannot tell fw's intra-op threads (got '$fw_threads' and '$fw_img_threads')"
fw_ort_env=(env FW_PEER_THREADS="$fw_threads" FW_BENCH_ORT_SPIN=0)
fw_img_ort_env=(env FW_PEER_THREADS="$fw_img_threads" FW_BENCH_ORT_SPIN=0)
ort_defaults_env=(env -u FW_PEER_THREADS -u FW_BENCH_ORT_SPIN)
ort_env=("${fw_ort_env[@]}")
log "peers' ONNX Runtime: intra_op_num_threads=$fw_threads ($img_model: $fw_img_threads), allow_spinning=0 (fw's settings); defaults rows at c=${DEFAULTS_CONCURRENCY:-none}"

# ---- wrk Lua scripts: POST bodies, and a done() that prints one JSON line
python3 - "$out" "$jpeg" <<'EOF'
import json, struct, sys
out, jpeg = sys.argv[1], sys.argv[2]
row = [round(0.01 * i, 2) for i in range(64)]
done = r'''
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f,' ..
    '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout))
end
'''
open(f"{out}/rows.lua", "w").write(
    'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
    f"wrk.body = [==[{json.dumps({'data': [row]})}]==]\n" + done)
open(f"{out}/jpeg.lua", "w").write(
    f'local f = assert(io.open("{jpeg}", "rb"))\nwrk.method = "POST"\n'
    'wrk.headers["Content-Type"] = "image/jpeg"\nwrk.body = f:read("*a")\nf:close()\n' + done)
b = "fwbenchboundary7MA4YWxk"
open(f"{out}/multipart.lua", "w").write(
    f'local f = assert(io.open("{jpeg}", "rb"))\nlocal data = f:read("*a")\nf:close()\n'
    'wrk.method = "POST"\n'
    f'wrk.headers["Content-Type"] = "multipart/form-data; boundary={b}"\n'
    f'wrk.body = "--{b}\\r\\nContent-Disposition: form-data; name=\\"file\\"; filename=\\"x.jpg\\"\\r\\n"'
    f' .. "Content-Type: image/jpeg\\r\\n\\r\\n" .. data .. "\\r\\n--{b}--\\r\\n"\n' + done)
# KServe V2 JSON, the same row: Triton and fw's /v2/models/NAME/infer
v2 = {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": row}]}
open(f"{out}/v2rows.json", "w").write(json.dumps(v2))
open(f"{out}/v2rows.lua", "w").write(
    'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
    f"wrk.body = [==[{json.dumps(v2)}]==]\n" + done)
# the same row for gRPC ModelInfer, as tritonclient.grpc sends it: raw_input_contents
# (little-endian FP32 bytes; base64 in ghz's JSON form of the message)
import base64
raw = base64.b64encode(struct.pack("<64f", *row)).decode()
open(f"{out}/grpcrow.json", "w").write(json.dumps({"model_name": "digits_mlp", "inputs": [
    {"name": "input", "datatype": "FP32", "shape": [1, 64]}], "raw_input_contents": [raw]}))
# KServe V2 binary-data extension: the JSON header, then the JPEG as one BYTES element
# (4-byte little-endian length + bytes); Inference-Header-Content-Length = the header's size
data = open(jpeg, "rb").read()
hdr = json.dumps({"inputs": [{"name": "image", "shape": [1, 1], "datatype": "BYTES",
                              "parameters": {"binary_data_size": 4 + len(data)}}]}).encode()
open(f"{out}/v2jpeg.bin", "wb").write(hdr + struct.pack("<I", len(data)) + data)
open(f"{out}/v2jpeg.hlen", "w").write(str(len(hdr)))
open(f"{out}/v2jpeg.lua", "w").write(
    f'local f = assert(io.open("{out}/v2jpeg.bin", "rb"))\nwrk.method = "POST"\n'
    'wrk.headers["Content-Type"] = "application/octet-stream"\n'
    f'wrk.headers["Inference-Header-Content-Length"] = "{len(hdr)}"\n'
    'wrk.body = f:read("*a")\nf:close()\n' + done)
EOF

# session_cpu SID: CPU seconds (user + system) of every process in session SID so far; each
# server runs in its own session (start), so the difference over a run is the server's CPU
# for that run, whatever load generator drove it
clk_tck=$(getconf CLK_TCK)
session_cpu() {
  local t=0 p
  for p in $(pgrep -s "$1" 2>/dev/null); do
    t=$((t + $(awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  python3 -c "print($t / $clk_tck)"
}
# add_cpu CPU_BEFORE: the last results.jsonl line gains server_cpu_s for the run since CPU_BEFORE
add_cpu() {
  local now
  now=$(session_cpu "$last_pgid")
  python3 - "$out/results.jsonl" "$1" "$now" <<'EOF'
import json, sys
path, before, now = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
lines = open(path).read().splitlines()
d = json.loads(lines[-1])
d["server_cpu_s"] = round(now - before, 3)
lines[-1] = json.dumps(d)
open(path, "w").write("\n".join(lines) + "\n")
EOF
}

# bench SCENARIO SERVER LUA URL DURATION CONCURRENCIES...: one wrk run per concurrency
bench() {
  local scenario=$1 server=$2 lua=$3 url=$4 dur=$5
  shift 5
  # warm-up, not recorded
  timeout 30 wrk -t1 -c16 -d2s --timeout 10s -s "$out/$lua" "$url" >/dev/null 2>&1 || true
  for c in "$@"; do
    local secs=${dur%s} file="$out/$scenario.$server.c$c.txt" rc=0 cpu0
    cpu0=$(session_cpu "$last_pgid")
    timeout $((secs + 30)) wrk -t1 -c"$c" -d"$dur" --latency --timeout 10s -s "$out/$lua" "$url" >"$file" 2>&1 || rc=$?
    local j
    j=$(sed -n 's/^WRKJSON //p' "$file")
    [[ -n $j ]] || j='{"failed":true}'
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(scenario=sys.argv[2], server=sys.argv[3], concurrency=int(sys.argv[4]), url=sys.argv[5], wrk_rc=int(sys.argv[6])); print(json.dumps(d))' \
      "$j" "$scenario" "$server" "$c" "$url" "$rc" >>"$out/results.jsonl"
    add_cpu "$cpu0"
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("    %-22s c=%-4s %9.1f req/s  p50 %8.2f ms  p99 %8.2f ms  errors %d" % (sys.argv[2], sys.argv[3], d["requests"]/d["duration_us"]*1e6, d["p50_us"]/1e3, d["p99_us"]/1e3, sum(d[k] for k in d if k.startswith("err_"))) if not d.get("failed") else "    %s c=%s FAILED" % (sys.argv[2], sys.argv[3]))' \
      "$j" "$server" "$c" >&2
  done
}

# grpc_bench SERVER ADDR DURATION CONCURRENCIES...: one ghz run per concurrency, ModelInfer
# with grpcrow.json, ghz on one CPU (--cpus 1, as wrk's one thread), one HTTP/2 connection
# per GRPC_CONNECTIONS_PER calls; the results as wrk's fields (bench/grpc_result.py), scenario grpc
grpc_bench() {
  local server=$1 addr=$2 dur=$3
  shift 3
  local ghz_args=(--insecure --proto grpcapi/inferencepb/grpc_service.proto --import-paths grpcapi/inferencepb
    --call inference.GRPCInferenceService/ModelInfer -D "$out/grpcrow.json" --cpus 1 --timeout 10s -O json)
  timeout 30 "$ghz" "${ghz_args[@]}" -c 16 -z 2s "$addr" >/dev/null 2>&1 || true # warm-up
  for c in "$@"; do
    local secs=${dur%s} file="$out/grpc.$server.c$c.json" rc=0 conns=$(((c + GRPC_CONNECTIONS_PER - 1) / GRPC_CONNECTIONS_PER)) cpu0
    cpu0=$(session_cpu "$last_pgid")
    timeout $((secs + 60)) "$ghz" "${ghz_args[@]}" -c "$c" --connections "$conns" -z "$dur" "$addr" >"$file" 2>&1 || rc=$?
    python3 bench/grpc_result.py "$file" "$server" "$c" "$addr" "$rc" "$conns" >>"$out/results.jsonl"
    add_cpu "$cpu0"
  done
}

# ---- TorchServe: ts_start NAME MODEL_NAME ONNX_FILE BATCH DELAY_MS; ts_stop
# Archive (no-archive directory: the same .onnx file copied in, plus the handler and
# common.py), config from bench/peers/torchserve.properties, ports PORT_BASE+8..+12,
# its pid file, worker socket and logs under $out/torchserve (TMPDIR/TEMP/LOG_LOCATION),
# so `torchserve --stop` only ever sees this run's server. The Python worker inherits
# the environment, ort_env included.
ts=$out/torchserve
ts_env=(env TEMP="$ts/tmp" TMPDIR="$ts/tmp" LOG_LOCATION="$ts/logs" METRICS_LOCATION="$ts/logs")
ts_start() {
  local name=$1 model=$2 onnx=$3 batch=$4 delay=$5
  rm -rf "$ts"
  mkdir -p "$ts/store" "$ts/tmp" "$ts/logs"
  timeout 120 "$tsvenv/bin/torch-model-archiver" --model-name "$model" --version 1.0 \
    --serialized-file "$onnx" --handler bench/peers/torchserve_handler.py \
    --extra-files bench/peers/common.py --export-path "$ts/store" --archive-format no-archive -f
  cmp -s "$onnx" "$ts/store/$model/$(basename "$onnx")" || die "archive of $onnx differs from the file"
  sed -e "s#@INFERENCE_PORT@#$((PORT_BASE + 8))#; s#@MANAGEMENT_PORT@#$((PORT_BASE + 9))#" \
    -e "s#@METRICS_PORT@#$((PORT_BASE + 10))#; s#@GRPC_INFERENCE_PORT@#$((PORT_BASE + 11))#" \
    -e "s#@GRPC_MANAGEMENT_PORT@#$((PORT_BASE + 12))#; s#@WORKER_PORT@#$((PORT_BASE + 13))#" \
    -e "s#@MODEL_STORE@#$ts/store#; s#@MODEL@#$model#" \
    -e "s#@BATCH@#$batch#; s#@DELAY_MS@#$delay#" \
    bench/peers/torchserve.properties >"$ts/config.properties"
  start "$name" "${ts_env[@]}" "${ort_env[@]}" "$tsvenv/bin/torchserve" --start --foreground --ncs --ts-config "$ts/config.properties"
}
ts_stop() {
  timeout 90 "${ts_env[@]}" "$tsvenv/bin/torchserve" --stop --foreground >/dev/null 2>&1 || true
  stop_last # the rest of its process group: java and the Python worker
  # TorchServe's default log4j config logs every request several times (~6 MB/s
  # under load); keep the first and last lines of its console log only
  local f=$out/$1.log
  if [[ -f $f ]]; then
    { head -100 "$f"; echo "[... trimmed by bench/serve.sh ...]"; tail -100 "$f"; } >"$f.tmp" && mv "$f.tmp" "$f"
  fi
  rm -rf "$ts"
}

# ---- Triton: tr_start NAME MODEL_NAME ONNX_FILE KIND BATCH DELAY_US; tr_stop
# bench/peers/triton_app.py in the Triton venv (PyTriton starts tritonserver and its
# Python backend stub as children), HTTP on PORT_BASE+14, gRPC +15, metrics +16, all on
# 127.0.0.1; PyTriton's workspace (model store, sockets) under $out/triton. Ready when
# GET /v2/models/MODEL_NAME/ready answers 200, then one inference must answer 2xx.
tr=$out/triton
tr_pids=()
tr_start() {
  local name=$1 model=$2 onnx=$3 kind=$4 batch=$5 delay=$6
  rm -rf "$tr"
  mkdir -p "$tr"
  start "$name" env LD_LIBRARY_PATH="$tr_ld" "${ort_env[@]}" "$trvenv/bin/python" bench/peers/triton_app.py \
    --model "$onnx" --name "$model" --kind "$kind" --max-batch-size "$batch" --max-queue-delay-us "$delay" \
    --http-port $((PORT_BASE + 14)) --grpc-port $((PORT_BASE + 15)) --metrics-port $((PORT_BASE + 16)) \
    --workspace "$tr/workspace"
  wait_get "http://$HOST:$((PORT_BASE + 14))/v2/models/$model/ready"
  # every process of the tree by PID, for tr_stop and the exit trap
  mapfile -t tr_pids < <(descendants "$last_pgid")
  extra_pids+=("${tr_pids[@]}")
  triton_server_version=$(sed -n 's/^| server_version *| *\([0-9.]*\) *|$/\1/p' "$out/$name.log" | head -1)
}
# tr_alive: the PIDs of tr_pids still running (a zombie counts as gone)
tr_alive() {
  local p st
  for p in "${tr_pids[@]}"; do
    st=$(ps -o stat= -p "$p" 2>/dev/null | tr -d ' ' || true)
    if [[ -n $st && $st != Z* ]]; then echo "$p"; fi
  done
  return 0
}
tr_stop() {
  local p
  # PyTriton stops its tritonserver on SIGTERM: signal the app first and give the tree
  # 20 s, then the process group, then whatever is left, by PID
  for p in $(pgrep -P "$last_pgid" 2>/dev/null); do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 200); do
    [[ -z $(tr_alive) ]] && break
    sleep 0.1
  done
  stop_last
  for p in $(tr_alive); do
    log "Triton: PID $p still running after its app stopped; killing it"
    kill -KILL "$p" 2>/dev/null || true
  done
  for p in "${tr_pids[@]}"; do rm -f /dev/shm/pytrtion"$p"-* 2>/dev/null || true; done
  tr_pids=()
  extra_pids=()
  rm -rf "$tr"
}

for i in $(seq 0 20); do port_free $((PORT_BASE + i)) || die "port $((PORT_BASE + i)) on $HOST is in use (set PORT_BASE)"; done

# ---- f. engine ceiling (two passes, first and last; the report takes the best per batch size)
engine_ceiling() {
  only engine || return 0
  log "f. engine ceiling, pass $1: resnet18.onnx, no HTTP (build/bench/ceiling -engine)"
  timeout 180 build/bench/ceiling -engine "$img_model" -batches 1,8,16,32 -seconds 3 | tee -a "$out/engine.jsonl" >&2
}
engine_ceiling 1

# ---- a. HTTP ceiling
if [[ ${SKIP_JSON:-0} != 1 ]] && only ceiling; then
  p=$PORT_BASE
  log "a. HTTP ceiling (bare fasthttp) on $HOST:$p"
  start ceiling build/bench/ceiling -addr "$HOST:$p"
  wait_ready "http://$HOST:$p/predict"
  bench predict ceiling rows.lua "http://$HOST:$p/predict" "$DURATION" $CONCURRENCY
  stop_last
  p=$((PORT_BASE + 20))
  log "a'. gRPC ceiling (bare grpc-go, fixed ModelInfer answer) on $HOST:$p"
  start ceiling-grpc build/bench/ceiling -grpc "$HOST:$p"
  sleep 1
  grpc_bench ceiling "$HOST:$p" "$DURATION" $CONCURRENCY
  stop_last
fi

# ---- b. fw serve /predict, and its /v2 infer on the same server
if [[ ${SKIP_JSON:-0} != 1 ]] && only fw; then
  p=$((PORT_BASE + 1))
  log "b. fw serve $mlp (defaults) on $HOST:$p"
  start fw-default bin/fw serve --model "$mlp" --host "$HOST" --port "$p" --grpc-port $((PORT_BASE + 19))
  wait_ready "http://$HOST:$p/predict" -H 'Content-Type: application/json' -d "$zeros"
  fw_model_threads=$(curl -fsS --max-time 10 "http://$HOST:$p/model" | python3 -c 'import json, sys; print(json.load(sys.stdin)["threads"])')
  [[ $fw_model_threads == "$fw_threads" ]] ||
    log "WARNING: fw serve runs $fw_model_threads intra-op threads, the peers get $fw_threads"
  bench predict fw rows.lua "http://$HOST:$p/predict" "$DURATION" $CONCURRENCY
  if [[ ${PROFILE:-0} == 1 ]] && command -v perf >/dev/null; then
    log "perf profile of fw /predict at c=64 (10 s)"
    fwpid=$(pgrep -g "$last_pgid" -x fw | head -1 || true)
    if [[ -n $fwpid ]]; then
      timeout 40 perf record -F 499 -g -p "$fwpid" -o "$out/fw-predict.perf.data" -- sleep 10 >/dev/null 2>&1 &
      perfpid=$!
      timeout 40 wrk -t1 -c64 -d10s -s "$out/rows.lua" "http://$HOST:$p/predict" >/dev/null 2>&1 || true
      wait "$perfpid" || true
      { echo "by shared object:"
        perf report -i "$out/fw-predict.perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep '%' | head -5
        echo "top symbols outside libonnxruntime (stripped, so its symbols are bare addresses):"
        perf report -i "$out/fw-predict.perf.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep '%' | grep -v ' 0x0000' | head -12
      } >"$out/fw-predict.perf.txt" || true
    fi
  fi
  log "b. fw serve /v2/models/digits_mlp/infer (KServe V2 JSON, the request Triton gets) on $HOST:$p"
  wait_ready "http://$HOST:$p/v2/models/digits_mlp/infer" -H 'Content-Type: application/json' --data-binary @"$out/v2rows.json"
  bench v2 fw v2rows.lua "http://$HOST:$p/v2/models/digits_mlp/infer" "$DURATION" $CONCURRENCY
  log "j. fw serve gRPC ModelInfer (raw_input_contents, as tritonclient.grpc sends it) on $HOST:$((PORT_BASE + 19))"
  grpc_bench fw "$HOST:$((PORT_BASE + 19))" "$DURATION" $CONCURRENCY
  stop_last

  p=$((PORT_BASE + 2))
  log "b'. fw serve $mlp $FW_TUNED_FLAGS on $HOST:$p"
  # shellcheck disable=SC2086
  start fw-tuned bin/fw serve --model "$mlp" --host "$HOST" --port "$p" $FW_TUNED_FLAGS
  wait_ready "http://$HOST:$p/predict" -H 'Content-Type: application/json' -d "$zeros"
  bench predict fw-tuned rows.lua "http://$HOST:$p/predict" "$DURATION" $CONCURRENCY
  stop_last

  p=$((PORT_BASE + 17))
  log "b''. fw serve $mlp --engine-spin (ONNX Runtime's threads spin, as onnxruntime's default) on $HOST:$p"
  start fw-spin bin/fw serve --model "$mlp" --host "$HOST" --port "$p" --engine-spin
  wait_ready "http://$HOST:$p/predict" -H 'Content-Type: application/json' -d "$zeros"
  bench predict fw-spin rows.lua "http://$HOST:$p/predict" "$DURATION" $CONCURRENCY
  stop_last
fi

# ---- the peers on /predict (and Triton on /v2 infer); SERVER names the rows, the
# remaining arguments are the concurrencies; ort_env says which ONNX Runtime settings
peer_litserve() {
  local server=$1 p=$((PORT_BASE + 3))
  shift
  log "c. LitServe [$server] (max_batch_size=$LIT_BATCH, batch_timeout=$LIT_TIMEOUT) on $HOST:$p"
  start "$server" "${ort_env[@]}" "$venv/bin/python" bench/peers/litserve_app.py --model "$mlp" --port "$p" --kind rows \
    --max-batch-size "$LIT_BATCH" --batch-timeout "$LIT_TIMEOUT"
  wait_ready "http://$HOST:$p/predict" -H 'Content-Type: application/json' -d "$zeros"
  bench predict "$server" rows.lua "http://$HOST:$p/predict" "$DURATION" "$@"
  stop_last
}
# peer_fastapi MODE SERVER CONCURRENCIES...: MODE async (the tutorial's `async def`) or def
peer_fastapi() {
  local mode=$1 server=$2 p=$((PORT_BASE + 4))
  shift 2
  [[ $mode == def ]] && p=$((PORT_BASE + 18))
  log "d. FastAPI + uvicorn [$server] (1 process, $mode endpoints, session.run per request) on $HOST:$p"
  FW_PEER_MODEL=$mlp FW_PEER_FASTAPI=$mode start "$server" "${ort_env[@]}" "$venv/bin/uvicorn" fastapi_app:app \
    --app-dir bench/peers --host "$HOST" --port "$p" --log-level warning --no-access-log
  wait_ready "http://$HOST:$p/predict" -H 'Content-Type: application/json' -d "$zeros"
  bench predict "$server" rows.lua "http://$HOST:$p/predict" "$DURATION" "$@"
  stop_last
}
peer_torchserve() {
  local server=$1 p=$((PORT_BASE + 8))
  shift
  log "g. TorchServe [$server] (batchSize=$TS_BATCH, maxBatchDelay=${TS_DELAY_MS}ms, 1 worker) on $HOST:$p"
  ts_start "$server" digits "$mlp" "$TS_BATCH" "$TS_DELAY_MS"
  wait_ready "http://$HOST:$p/predictions/digits" -H 'Content-Type: application/json' -d "$zeros"
  bench predict "$server" rows.lua "http://$HOST:$p/predictions/digits" "$DURATION" "$@"
  ts_stop "$server"
}
peer_triton() {
  local server=$1 p=$((PORT_BASE + 14))
  shift
  log "h. Triton [$server] (PyTriton, max_batch_size=$TRITON_BATCH, max_queue_delay_microseconds=$TRITON_DELAY_US) on $HOST:$p"
  tr_start "$server" digits_mlp "$mlp" rows "$TRITON_BATCH" "$TRITON_DELAY_US"
  wait_ready "http://$HOST:$p/v2/models/digits_mlp/infer" -H 'Content-Type: application/json' --data-binary @"$out/v2rows.json"
  bench v2 "$server" v2rows.lua "http://$HOST:$p/v2/models/digits_mlp/infer" "$DURATION" "$@"
  log "j. Triton [$server] gRPC ModelInfer on $HOST:$((PORT_BASE + 15))"
  grpc_bench "$server" "$HOST:$((PORT_BASE + 15))" "$DURATION" "$@"
  tr_stop
}

if [[ ${SKIP_PEERS:-0} != 1 && ${SKIP_JSON:-0} != 1 ]]; then
  # headline rows: fw's ONNX Runtime settings
  ort_env=("${fw_ort_env[@]}")
  if only litserve; then peer_litserve litserve $CONCURRENCY; fi
  if only fastapi; then
    peer_fastapi async fastapi $CONCURRENCY
    peer_fastapi def fastapi-def $CONCURRENCY
  fi
  if [[ $with_ts == 1 ]]; then peer_torchserve torchserve $CONCURRENCY; fi
  if [[ $with_triton == 1 ]]; then peer_triton triton $CONCURRENCY; fi

  # ---- i. the same peers at onnxruntime's defaults (spinning on, threads = physical cores)
  if [[ -n ${DEFAULTS_CONCURRENCY// /} ]]; then
    ort_env=("${ort_defaults_env[@]}")
    log "i. peers at onnxruntime's defaults, c=$DEFAULTS_CONCURRENCY"
    if only litserve; then peer_litserve litserve-ortdefaults $DEFAULTS_CONCURRENCY; fi
    if only fastapi; then
      peer_fastapi async fastapi-ortdefaults $DEFAULTS_CONCURRENCY
      peer_fastapi def fastapi-def-ortdefaults $DEFAULTS_CONCURRENCY
    fi
    if [[ $with_ts == 1 ]]; then peer_torchserve torchserve-ortdefaults $DEFAULTS_CONCURRENCY; fi
    if [[ $with_triton == 1 ]]; then peer_triton triton-ortdefaults $DEFAULTS_CONCURRENCY; fi
    ort_env=("${fw_ort_env[@]}")
  fi
fi

if [[ ${SKIP_IMAGE:-0} != 1 ]]; then
  # ---- e. /predict/image on resnet18 (peers at fw's ONNX Runtime settings for it)
  ort_env=("${fw_img_ort_env[@]}")
  if only fw; then
    p=$((PORT_BASE + 5))
    log "e. fw serve $img_model /predict/image on $HOST:$p"
    start fw-image bin/fw serve --model "$img_model" --host "$HOST" --port "$p"
    wait_ready "http://$HOST:$p/predict/image" -H 'Content-Type: image/jpeg' --data-binary @"$jpeg"
    bench image fw jpeg.lua "http://$HOST:$p/predict/image" "$IMG_DURATION" $IMG_CONCURRENCY
    stop_last
    if [[ ${IMG_STRETCH_ROW:-1} == 1 ]]; then
      # the same file with the simple recipe fw used before the eval transform: stretch the
      # picture to 224x224 (bilinear, no antialiasing), no crop; same weights, same engine
      stretch=$out/resnet18-stretch.onnx
      "${FW_VENV:-$root/.venv}/bin/python" - "$img_model" "$stretch" <<'EOF'
import json, sys, onnx
m = onnx.load(sys.argv[1])
prop = next(p for p in m.metadata_props if p.key == "fw.json")
doc = json.loads(prop.value)
doc["fw_format"] = 1
doc["preprocessing"]["image"] = {"height": 224, "width": 224, "channels": 3, "layout": "NCHW",
    "resize": "bilinear", "scale": 1 / 255, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
doc["test_vector"].pop("image", None)
prop.value = json.dumps(doc)
onnx.save(m, sys.argv[2])
EOF
      log "e. fw serve $stretch (the simple recipe: stretch to 224x224) /predict/image on $HOST:$p"
      start fw-stretch-image bin/fw serve --model "$stretch" --host "$HOST" --port "$p"
      wait_ready "http://$HOST:$p/predict/image" -H 'Content-Type: image/jpeg' --data-binary @"$jpeg"
      bench image fw-stretch jpeg.lua "http://$HOST:$p/predict/image" "$IMG_DURATION" $IMG_CONCURRENCY
      stop_last
    fi
  fi
  if [[ ${SKIP_PEERS:-0} != 1 ]]; then
    if only litserve; then
      p=$((PORT_BASE + 6))
      log "e. LitServe $img_model /predict/image (multipart) on $HOST:$p"
      start litserve-image "${ort_env[@]}" "$venv/bin/python" bench/peers/litserve_app.py --model "$img_model" --port "$p" --kind image \
        --max-batch-size "${LIT_IMG_BATCH:-16}" --batch-timeout "${LIT_IMG_TIMEOUT:-0.005}"
      wait_ready "http://$HOST:$p/predict/image" -F "file=@$jpeg"
      bench image litserve multipart.lua "http://$HOST:$p/predict/image" "$IMG_DURATION" $IMG_CONCURRENCY
      stop_last
    fi
    if only fastapi; then
      for mode in async def; do
        p=$((PORT_BASE + 7))
        server=fastapi
        [[ $mode == def ]] && p=$((PORT_BASE + 18)) && server=fastapi-def
        log "e. FastAPI ($mode endpoints) $img_model /predict/image on $HOST:$p"
        FW_PEER_MODEL=$img_model FW_PEER_FASTAPI=$mode start "$server-image" "${ort_env[@]}" "$venv/bin/uvicorn" fastapi_app:app \
          --app-dir bench/peers --host "$HOST" --port "$p" --log-level warning --no-access-log
        wait_ready "http://$HOST:$p/predict/image" -H 'Content-Type: image/jpeg' --data-binary @"$jpeg"
        bench image "$server" jpeg.lua "http://$HOST:$p/predict/image" "$IMG_DURATION" $IMG_CONCURRENCY
        stop_last
      done
    fi
    if [[ $with_ts == 1 ]]; then
      p=$((PORT_BASE + 8))
      log "e. TorchServe $img_model /predictions/resnet18 (batchSize=$TS_IMG_BATCH, maxBatchDelay=${TS_IMG_DELAY_MS}ms) on $HOST:$p"
      ts_start torchserve-image resnet18 "$img_model" "$TS_IMG_BATCH" "$TS_IMG_DELAY_MS"
      wait_ready "http://$HOST:$p/predictions/resnet18" -H 'Content-Type: image/jpeg' --data-binary @"$jpeg"
      bench image torchserve jpeg.lua "http://$HOST:$p/predictions/resnet18" "$IMG_DURATION" $IMG_CONCURRENCY
      ts_stop torchserve-image
    fi
    if [[ $with_triton == 1 ]]; then
      p=$((PORT_BASE + 14))
      log "e. Triton $img_model /v2/models/resnet18/infer (JPEG as a V2 binary BYTES tensor; max_batch_size=$TRITON_IMG_BATCH, max_queue_delay_microseconds=$TRITON_IMG_DELAY_US) on $HOST:$p"
      tr_start triton-image resnet18 "$img_model" image "$TRITON_IMG_BATCH" "$TRITON_IMG_DELAY_US"
      wait_ready "http://$HOST:$p/v2/models/resnet18/infer" -H 'Content-Type: application/octet-stream' \
        -H "Inference-Header-Content-Length: $(cat "$out/v2jpeg.hlen")" \
        --data-binary @"$out/v2jpeg.bin"
      bench image triton v2jpeg.lua "http://$HOST:$p/v2/models/resnet18/infer" "$IMG_DURATION" $IMG_CONCURRENCY
      tr_stop
    fi
  fi
fi

engine_ceiling 2

# ---- metadata and the report
ts_meta='{}'
if [[ $with_ts == 1 ]]; then
  ts_meta=$("$tsvenv/bin/python" -c 'import json, sys, importlib.metadata as m; d = {k: m.version(k) for k in ("torchserve", "torch-model-archiver", "torch", "onnxruntime")}; d["python"] = "%d.%d.%d" % sys.version_info[:3]; print(json.dumps(d))')
fi
tr_meta='{}'
if [[ $with_triton == 1 ]]; then
  tr_meta=$(LD_LIBRARY_PATH=$tr_ld "$trvenv/bin/python" -c 'import json, sys, importlib.metadata as m; d = {k: m.version(k) for k in ("nvidia-pytriton", "onnxruntime", "numpy", "pillow")}; d["python"] = "%d.%d.%d" % sys.version_info[:3]; d["tritonserver"] = sys.argv[1]; print(json.dumps(d))' "${triton_server_version:-?}")
fi
java_v=$(java -version 2>&1 | head -1 || true)
"$meta_py" - "$out/meta.json" <<EOF
import json, sys, importlib.metadata as importlib_md, subprocess, datetime, platform
class md:  # versions of what this Python has ("" where a package is absent: SKIP_PEERS=1)
    @staticmethod
    def version(name):
        try: return importlib_md.version(name)
        except importlib_md.PackageNotFoundError: return ""
def sh(*a):
    try: return subprocess.run(a, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception: return ""
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
fasthttp = next((l.split()[1] for l in open("go.mod") if "valyala/fasthttp " in l), "?")
meta = {
  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
  "nproc": sh("nproc"), "cpu": cpu, "mem": sh("sh", "-c", "free -g | awk '/Mem:/{print \$2\" GiB\"}'"),
  "kernel": platform.release(),
  "go": sh("go", "env", "GOVERSION"), "fasthttp": fasthttp, "wrk": sh("sh", "-c", "wrk -v 2>&1 | head -1"),
  "python": platform.python_version(),
  "litserve": md.version("litserve"), "fastapi": md.version("fastapi"), "uvicorn": md.version("uvicorn"),
  "onnxruntime_py": md.version("onnxruntime"), "numpy": md.version("numpy"), "pillow": md.version("pillow"),
  "onnxruntime_go": sh("sh", "-c", "ls third_party/onnxruntime/lib/ 2>/dev/null | grep -o 'libonnxruntime.so.[0-9.]*' | sort | tail -1"),
  "duration": "$DURATION", "img_duration": "$IMG_DURATION", "fw_tuned_flags": "$FW_TUNED_FLAGS",
  "lit_batch": "$LIT_BATCH", "lit_timeout": "$LIT_TIMEOUT",
  "lit_img_batch": "${LIT_IMG_BATCH:-16}", "lit_img_timeout": "${LIT_IMG_TIMEOUT:-0.005}",
  "torchserve": json.loads(r'''$ts_meta'''), "java": r'''$java_v''',
  "ts_batch": "$TS_BATCH", "ts_delay_ms": "$TS_DELAY_MS",
  "ts_img_batch": "$TS_IMG_BATCH", "ts_img_delay_ms": "$TS_IMG_DELAY_MS",
  "commit": "$fw_commit", "load_start": "$load_start", "peer_threads": "$fw_threads", "peer_img_threads": "$fw_img_threads", "peer_spin": "0",
  "defaults_concurrency": "$DEFAULTS_CONCURRENCY", "bench_only": "$BENCH_ONLY",
  "triton": json.loads(r'''$tr_meta'''),
  "triton_batch": "$TRITON_BATCH", "triton_delay_us": "$TRITON_DELAY_US",
  "triton_img_batch": "$TRITON_IMG_BATCH", "triton_img_delay_us": "$TRITON_IMG_DELAY_US",
  "ghz": "$GHZ_VERSION", "grpc_connections_per": "$GRPC_CONNECTIONS_PER",
  "grpc_go": next((l.split()[1] for l in open("go.mod") if "google.golang.org/grpc " in l), "?"),
}
json.dump(meta, open(sys.argv[1], "w"), indent=1)
EOF
log "writing $doc (serve section)"
python3 bench/serve_report.py --results "$out/results.jsonl" --engine "$out/engine.jsonl" --meta "$out/meta.json" \
  --perf "$out/fw-predict.perf.txt" --doc "$doc"
log "done: $doc, raw wrk output in $out"
