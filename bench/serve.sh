#!/usr/bin/env bash
# make bench-serve: HTTP serving benchmark, in one run, on the same model files:
#   a. the HTTP ceiling (bench/ceiling: bare fasthttp, fixed JSON answer)
#   b. fw serve /predict on digits_mlp.onnx (default batching, and one tuned setting)
#   c. LitServe + onnxruntime with its dynamic batching on (bench/peers/litserve_app.py)
#   d. FastAPI + uvicorn + onnxruntime the way FastAPI's docs write it (bench/peers/fastapi_app.py)
#   g. TorchServe + onnxruntime in a custom handler, TorchServe's dynamic batching on
#      (bench/peers/torchserve_handler.py, bench/peers/torchserve.properties; needs Java 11+)
#   e. /predict/image on resnet18.onnx: fw, LitServe, FastAPI, TorchServe
#   f. the engine ceiling for resnet18 (no HTTP; bench/ceiling -engine)
# Load generator: wrk, one thread, 127.0.0.1 only. Results: build/bench/serve/,
# the table: docs/benchmarks.md between <!-- bench:serve:start/end -->.
#
# Knobs (environment): DURATION (5s), IMG_DURATION (10s), CONCURRENCY ("1 16 64 256"),
# IMG_CONCURRENCY ("1 16 64"), FW_TUNED_FLAGS, SKIP_PEERS=1, SKIP_IMAGE=1,
# SKIP_TORCHSERVE=1, TS_BATCH (64) / TS_DELAY_MS (1) and TS_IMG_BATCH (16) /
# TS_IMG_DELAY_MS (5) for TorchServe's batchSize / maxBatchDelay,
# PROFILE=1 (perf profile of fw /predict at c=64 into build/bench/serve/),
# FW_CACHE_DIR (peers venv cache), PORT_BASE (18100; uses PORT_BASE..PORT_BASE+12).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

DURATION=${DURATION:-5s}
IMG_DURATION=${IMG_DURATION:-10s}
CONCURRENCY=${CONCURRENCY:-1 16 64 256}
IMG_CONCURRENCY=${IMG_CONCURRENCY:-1 16 64}
FW_TUNED_FLAGS=${FW_TUNED_FLAGS:---threads 1}
LIT_BATCH=${LIT_BATCH:-64}
LIT_TIMEOUT=${LIT_TIMEOUT:-0.001}
TS_BATCH=${TS_BATCH:-64}
TS_DELAY_MS=${TS_DELAY_MS:-1}
TS_IMG_BATCH=${TS_IMG_BATCH:-16}
TS_IMG_DELAY_MS=${TS_IMG_DELAY_MS:-5}
PORT_BASE=${PORT_BASE:-18100}
HOST=127.0.0.1 # loopback only, by design
cache=${FW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fw}
venv=$cache/bench-peers-venv
tsvenv=$cache/bench-torchserve-venv
out=$root/build/bench/serve
mlp=build/models/digits_mlp.onnx
img_model=build/models/resnet18.onnx
jpeg=build/models/samples/rgb_224.jpg
zeros='{"data":[[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]]}'

log() { echo "==> $*" >&2; }
die() { echo "bench-serve: $*" >&2; exit 1; }

for f in "$mlp" "$img_model" "$jpeg"; do
  [[ -f $f ]] || die "$f is missing: run 'make models' first"
done

# ---- every server we start is its own process group; kill them all on exit
pgids=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for g in "${pgids[@]}"; do kill -TERM -- "-$g" 2>/dev/null || kill -TERM "$g" 2>/dev/null || true; done
  sleep 1
  for g in "${pgids[@]}"; do kill -KILL -- "-$g" 2>/dev/null || kill -KILL "$g" 2>/dev/null || true; done
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

# ---- 1. wrk
if ! command -v wrk >/dev/null; then
  log "installing wrk (apt-get)"
  sudo_=""
  [[ $(id -u) -eq 0 ]] || sudo_=sudo
  timeout 300 $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 300 $sudo_ apt-get install -y -qq wrk >/dev/null
fi

# ---- 2. peers venv (cached; rebuilt when requirements.txt changes)
req=bench/peers/requirements.txt
want=$(sha256sum "$req" | cut -d' ' -f1)
if [[ ! -x $venv/bin/python || $(cat "$venv/.requirements.sha256" 2>/dev/null) != "$want" ]]; then
  log "peers venv $venv (pinned from $req; no torch)"
  mkdir -p "$cache"
  rm -rf "$venv"
  py=$(command -v python3)
  timeout 900 "$py" -m venv "$venv"
  timeout 900 "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  echo "$want" >"$venv/.requirements.sha256"
fi
"$venv/bin/python" -c 'import litserve, fastapi, uvicorn, onnxruntime, PIL, multipart' ||
  die "peers venv $venv is broken; remove it and rerun"

# ---- 2'. TorchServe venv (its own: torchserve + torch-model-archiver + torch + onnxruntime)
with_ts=0
if [[ ${SKIP_PEERS:-0} != 1 && ${SKIP_TORCHSERVE:-0} != 1 ]]; then
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

# ---- build
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.jsonl "$out"/*.txt "$out"/*.log
rm -rf "$out/torchserve"
log "go build bin/fw and build/bench/ceiling"
go build -o bin/fw ./cmd/fw
go build -o build/bench/ceiling ./bench/ceiling

# ---- wrk Lua scripts: POST bodies, and a done() that prints one JSON line
python3 - "$out" "$jpeg" <<'EOF'
import json, sys
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
EOF

# bench SCENARIO SERVER LUA URL DURATION CONCURRENCIES...: one wrk run per concurrency
bench() {
  local scenario=$1 server=$2 lua=$3 url=$4 dur=$5
  shift 5
  # warm-up, not recorded
  timeout 30 wrk -t1 -c16 -d2s --timeout 10s -s "$out/$lua" "$url" >/dev/null 2>&1 || true
  for c in "$@"; do
    local secs=${dur%s} file="$out/$scenario.$server.c$c.txt" rc=0
    timeout $((secs + 30)) wrk -t1 -c"$c" -d"$dur" --latency --timeout 10s -s "$out/$lua" "$url" >"$file" 2>&1 || rc=$?
    local j
    j=$(sed -n 's/^WRKJSON //p' "$file")
    [[ -n $j ]] || j='{"failed":true}'
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(scenario=sys.argv[2], server=sys.argv[3], concurrency=int(sys.argv[4]), url=sys.argv[5], wrk_rc=int(sys.argv[6])); print(json.dumps(d))' \
      "$j" "$scenario" "$server" "$c" "$url" "$rc" >>"$out/results.jsonl"
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("    %-22s c=%-4s %9.1f req/s  p50 %8.2f ms  p99 %8.2f ms  errors %d" % (sys.argv[2], sys.argv[3], d["requests"]/d["duration_us"]*1e6, d["p50_us"]/1e3, d["p99_us"]/1e3, sum(d[k] for k in d if k.startswith("err_"))) if not d.get("failed") else "    %s c=%s FAILED" % (sys.argv[2], sys.argv[3]))' \
      "$j" "$server" "$c" >&2
  done
}

# ---- TorchServe: ts_start NAME MODEL_NAME ONNX_FILE BATCH DELAY_MS; ts_stop
# Archive (no-archive directory: the same .onnx file copied in, plus the handler and
# common.py), config from bench/peers/torchserve.properties, ports PORT_BASE+8..+12,
# its pid file, worker socket and logs under $out/torchserve (TMPDIR/TEMP/LOG_LOCATION),
# so `torchserve --stop` only ever sees this run's server.
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
  start "$name" "${ts_env[@]}" "$tsvenv/bin/torchserve" --start --foreground --ncs --ts-config "$ts/config.properties"
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

for i in $(seq 0 12); do port_free $((PORT_BASE + i)) || die "port $((PORT_BASE + i)) on $HOST is in use (set PORT_BASE)"; done

# ---- f. engine ceiling (two passes, first and last; the report takes the best per batch size)
engine_ceiling() {
  log "f. engine ceiling, pass $1: resnet18.onnx, no HTTP (build/bench/ceiling -engine)"
  timeout 180 build/bench/ceiling -engine "$img_model" -batches 1,8,16,32 -seconds 3 | tee -a "$out/engine.jsonl" >&2
}
engine_ceiling 1

# ---- a. HTTP ceiling
p=$PORT_BASE
log "a. HTTP ceiling (bare fasthttp) on $HOST:$p"
start ceiling build/bench/ceiling -addr "$HOST:$p"
wait_ready "http://$HOST:$p/predict"
bench predict ceiling rows.lua "http://$HOST:$p/predict" "$DURATION" $CONCURRENCY
stop_last

# ---- b. fw serve /predict
p=$((PORT_BASE + 1))
log "b. fw serve $mlp (defaults) on $HOST:$p"
start fw-default bin/fw serve --model "$mlp" --host "$HOST" --port "$p"
wait_ready "http://$HOST:$p/predict" -H 'Content-Type: application/json' -d "$zeros"
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
stop_last

p=$((PORT_BASE + 2))
log "b'. fw serve $mlp $FW_TUNED_FLAGS on $HOST:$p"
# shellcheck disable=SC2086
start fw-tuned bin/fw serve --model "$mlp" --host "$HOST" --port "$p" $FW_TUNED_FLAGS
wait_ready "http://$HOST:$p/predict" -H 'Content-Type: application/json' -d "$zeros"
bench predict fw-tuned rows.lua "http://$HOST:$p/predict" "$DURATION" $CONCURRENCY
stop_last

if [[ ${SKIP_PEERS:-0} != 1 ]]; then
  # ---- c. LitServe
  p=$((PORT_BASE + 3))
  log "c. LitServe (max_batch_size=$LIT_BATCH, batch_timeout=$LIT_TIMEOUT) on $HOST:$p"
  start litserve "$venv/bin/python" bench/peers/litserve_app.py --model "$mlp" --port "$p" --kind rows \
    --max-batch-size "$LIT_BATCH" --batch-timeout "$LIT_TIMEOUT"
  wait_ready "http://$HOST:$p/predict" -H 'Content-Type: application/json' -d "$zeros"
  bench predict litserve rows.lua "http://$HOST:$p/predict" "$DURATION" $CONCURRENCY
  stop_last

  # ---- d. FastAPI + uvicorn
  p=$((PORT_BASE + 4))
  log "d. FastAPI + uvicorn (1 process, async def, session.run per request) on $HOST:$p"
  FW_PEER_MODEL=$mlp start fastapi "$venv/bin/uvicorn" fastapi_app:app --app-dir bench/peers --host "$HOST" --port "$p" --log-level warning --no-access-log
  wait_ready "http://$HOST:$p/predict" -H 'Content-Type: application/json' -d "$zeros"
  bench predict fastapi rows.lua "http://$HOST:$p/predict" "$DURATION" $CONCURRENCY
  stop_last

  # ---- g. TorchServe
  if [[ $with_ts == 1 ]]; then
    p=$((PORT_BASE + 8))
    log "g. TorchServe (batchSize=$TS_BATCH, maxBatchDelay=${TS_DELAY_MS}ms, 1 worker) on $HOST:$p"
    ts_start torchserve digits "$mlp" "$TS_BATCH" "$TS_DELAY_MS"
    wait_ready "http://$HOST:$p/predictions/digits" -H 'Content-Type: application/json' -d "$zeros"
    bench predict torchserve rows.lua "http://$HOST:$p/predictions/digits" "$DURATION" $CONCURRENCY
    ts_stop torchserve
  fi
fi

if [[ ${SKIP_IMAGE:-0} != 1 ]]; then
  # ---- e. /predict/image on resnet18
  p=$((PORT_BASE + 5))
  log "e. fw serve $img_model /predict/image on $HOST:$p"
  start fw-image bin/fw serve --model "$img_model" --host "$HOST" --port "$p"
  wait_ready "http://$HOST:$p/predict/image" -H 'Content-Type: image/jpeg' --data-binary @"$jpeg"
  bench image fw jpeg.lua "http://$HOST:$p/predict/image" "$IMG_DURATION" $IMG_CONCURRENCY
  stop_last
  if [[ ${SKIP_PEERS:-0} != 1 ]]; then
    p=$((PORT_BASE + 6))
    log "e. LitServe $img_model /predict/image (multipart) on $HOST:$p"
    start litserve-image "$venv/bin/python" bench/peers/litserve_app.py --model "$img_model" --port "$p" --kind image \
      --max-batch-size "${LIT_IMG_BATCH:-16}" --batch-timeout "${LIT_IMG_TIMEOUT:-0.005}"
    wait_ready "http://$HOST:$p/predict/image" -F "file=@$jpeg"
    bench image litserve multipart.lua "http://$HOST:$p/predict/image" "$IMG_DURATION" $IMG_CONCURRENCY
    stop_last
    p=$((PORT_BASE + 7))
    log "e. FastAPI $img_model /predict/image on $HOST:$p"
    FW_PEER_MODEL=$img_model start fastapi-image "$venv/bin/uvicorn" fastapi_app:app --app-dir bench/peers --host "$HOST" --port "$p" --log-level warning --no-access-log
    wait_ready "http://$HOST:$p/predict/image" -H 'Content-Type: image/jpeg' --data-binary @"$jpeg"
    bench image fastapi jpeg.lua "http://$HOST:$p/predict/image" "$IMG_DURATION" $IMG_CONCURRENCY
    stop_last
    if [[ $with_ts == 1 ]]; then
      p=$((PORT_BASE + 8))
      log "e. TorchServe $img_model /predictions/resnet18 (batchSize=$TS_IMG_BATCH, maxBatchDelay=${TS_IMG_DELAY_MS}ms) on $HOST:$p"
      ts_start torchserve-image resnet18 "$img_model" "$TS_IMG_BATCH" "$TS_IMG_DELAY_MS"
      wait_ready "http://$HOST:$p/predictions/resnet18" -H 'Content-Type: image/jpeg' --data-binary @"$jpeg"
      bench image torchserve jpeg.lua "http://$HOST:$p/predictions/resnet18" "$IMG_DURATION" $IMG_CONCURRENCY
      ts_stop torchserve-image
    fi
  fi
fi

engine_ceiling 2

# ---- metadata and the report
ts_meta='{}'
if [[ $with_ts == 1 ]]; then
  ts_meta=$("$tsvenv/bin/python" -c 'import json, sys, importlib.metadata as m; d = {k: m.version(k) for k in ("torchserve", "torch-model-archiver", "torch", "onnxruntime")}; d["python"] = "%d.%d.%d" % sys.version_info[:3]; print(json.dumps(d))')
fi
java_v=$(java -version 2>&1 | head -1 || true)
"$venv/bin/python" - "$out/meta.json" <<EOF
import json, sys, importlib.metadata as md, subprocess, datetime, platform
def sh(*a):
    try: return subprocess.run(a, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception: return ""
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
dirty = " (+ uncommitted changes)" if sh("git", "status", "--porcelain", "--untracked-files=no") else ""
fasthttp = next((l.split()[1] for l in open("go.mod") if "valyala/fasthttp " in l), "?")
meta = {
  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
  "nproc": sh("nproc"), "cpu": cpu, "mem": sh("sh", "-c", "free -g | awk '/Mem:/{print \$2\" GiB\"}'"),
  "kernel": platform.release(), "fw_commit": sh("git", "rev-parse", "--short", "HEAD") + dirty,
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
}
json.dump(meta, open(sys.argv[1], "w"), indent=1)
EOF
log "writing docs/benchmarks.md (serve section)"
python3 bench/serve_report.py --results "$out/results.jsonl" --engine "$out/engine.jsonl" --meta "$out/meta.json" \
  --perf "$out/fw-predict.perf.txt" --doc docs/benchmarks.md
log "done: docs/benchmarks.md, raw wrk output in $out"
