#!/usr/bin/env bash
# bench/cpu_ab.sh: server CPU per answered request of two or more fw binaries
# (say, before and after a change) on /predict of digits_mlp.onnx, in
# interleaved rounds, so that the machine's drift over minutes falls on every
# binary alike. Each round starts each binary's `fw serve`, warms it for 1 s,
# then loads it with wrk (one thread, CONCURRENCY connections, DURATION) and
# reads the server's user + system time from /proc before and after, and its
# peak RSS (VmHWM) at the end. Prints one line per run and, at the end, each
# binary's median per concurrency.
#
#   bash bench/cpu_ab.sh OLD_BIN NEW_BIN [...] [ceiling]
#
# `ceiling` stands for the bare fasthttp server of bench/ceiling (fixed
# answer), built into build/bench/ceiling: the floor to compare against.
# MODE=ndjson measures /predict/batch instead: one streamed NDJSON body of
# LINES (100000) one-row lines per run (curl), rows/s and CPU per row; the
# concurrency is the server's own (its BatchConcurrency window).
# MODE=grpc measures gRPC ModelInfer instead (the row as raw_input_contents,
# what tritonclient.grpc sends), loaded by ghz on one CPU (--cpus 1) with one
# HTTP/2 connection per 16 concurrent calls, as `make bench-serve` loads it;
# `ceiling` is then bench/ceiling -grpc, a bare grpc-go server answering every
# ModelInfer with a fixed output. ghz: GHZ (default: the one bench/serve.sh
# installs under FW_CACHE_DIR).
#
# Environment: CONCURRENCY ("1 16 64"), ROUNDS (3), DURATION (5s), PORT
# (18130), FW_FLAGS (extra `fw serve` flags), MODEL
# (build/models/digits_mlp.onnx). Loopback only; every server is stopped on
# exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: bash bench/cpu_ab.sh BIN [BIN...]" >&2; exit 2; }
command -v wrk >/dev/null || { echo "cpu_ab: needs wrk (apt-get install wrk)" >&2; exit 1; }
model=${MODEL:-build/models/digits_mlp.onnx}
port=${PORT:-18130}
tick=$(getconf CLK_TCK)
work=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
if curl -s -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null; then
  echo "cpu_ab: port $port is in use; set PORT" >&2
  exit 1
fi
python3 -c 'import json; print(json.dumps({"data": [[round(0.01 * i, 2) for i in range(64)]]}))' >"$work/row.json"
if [[ ${MODE:-wrk} == ndjson ]]; then
  [[ " $* " != *" ceiling "* ]] || { echo "cpu_ab: MODE=ndjson has no ceiling (it answers a fixed body)" >&2; exit 2; }
  python3 -c 'import sys; open(sys.argv[1], "w").write((open(sys.argv[2]).read().strip() + "\n") * int(sys.argv[3]))' \
    "$work/lines.ndjson" "$work/row.json" "${LINES:-100000}"
  CONCURRENCY=ndjson
fi
if [[ ${MODE:-wrk} == grpc ]]; then
  ghz=${GHZ:-${FW_CACHE_DIR:-$HOME/.cache/fw}/bin/ghz-v0.121.0}
  [[ -x $ghz ]] || { echo "cpu_ab: MODE=grpc needs ghz ($ghz): run make bench-serve once, or set GHZ" >&2; exit 1; }
  python3 -c 'import base64, json, struct; print(json.dumps({"model_name": "digits_mlp", "inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64]}], "raw_input_contents": [base64.b64encode(struct.pack("<64f", *[round(0.01 * i, 2) for i in range(64)])).decode()]}))' >"$work/grpcrow.json"
  ghz_args=(--insecure --proto grpcapi/inferencepb/grpc_service.proto --import-paths grpcapi/inferencepb
    --call inference.GRPCInferenceService/ModelInfer -D "$work/grpcrow.json" --cpus 1 --timeout 10s -O json)
fi
cat >"$work/post.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = io.open("$work/row.json"):read("*a")
EOF
if [[ " $* " == *" ceiling "* ]]; then
  go build -o build/bench/ceiling ./bench/ceiling
fi
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

for round in $(seq "${ROUNDS:-3}"); do
  for c in ${CONCURRENCY:-1 16 64}; do
    for bin in "$@"; do
      gport=$((port + 1))
      grpc_flag=() # fw's gRPC front end only when it is what is measured
      [[ ${MODE:-wrk} == grpc ]] && grpc_flag=(--grpc-port "$gport")
      if [[ $bin == ceiling && ${MODE:-wrk} == grpc ]]; then
        build/bench/ceiling -addr "127.0.0.1:$port" -grpc "127.0.0.1:$gport" >"$work/serve.log" 2>&1 &
      elif [[ $bin == ceiling ]]; then
        build/bench/ceiling -addr "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
      else
        # shellcheck disable=SC2086
        "$bin" serve --model "$model" --host 127.0.0.1 --port "$port" "${grpc_flag[@]}" ${FW_FLAGS:-} >"$work/serve.log" 2>&1 &
      fi
      pid=$!
      ready=0
      for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
        if [[ ${MODE:-wrk} == grpc ]]; then
          timeout 10 "$ghz" "${ghz_args[@]}" -n 1 "127.0.0.1:$gport" >"$work/probe.json" 2>/dev/null &&
            grep -q '"OK":1' "$work/probe.json" && { ready=1; break; }
        else
          curl -fs -o /dev/null -H 'Content-Type: application/json' --data-binary @"$work/row.json" "http://127.0.0.1:$port/predict" && { ready=1; break; }
        fi
        sleep 0.1
      done
      [[ $ready == 1 ]] && kill -0 "$pid" 2>/dev/null || { echo "cpu_ab: $bin not answering on port $port" >&2; cat "$work/serve.log" >&2; exit 1; }
      if [[ $c == ndjson ]]; then
        ndjson() {
          timeout 300 curl -fsS -o "$work/answers.ndjson" -H 'Content-Type: application/x-ndjson' \
            --data-binary @"$work/lines.ndjson" "http://127.0.0.1:$port/predict/batch"
        }
        ndjson # warm-up
        t0=$(cpu_ticks "$pid")
        w0=$(date +%s.%N)
        ndjson
        w1=$(date +%s.%N)
        t1=$(cpu_ticks "$pid")
        n=$(wc -l <"$work/answers.ndjson")
        bad=$(grep -c '"error"' "$work/answers.ndjson" || true)
        rps=$(python3 -c "print(f'{$n / ($w1 - $w0):.0f}')")
      elif [[ ${MODE:-wrk} == grpc ]]; then
        conns=$(((c + 15) / 16))
        timeout 30 "$ghz" "${ghz_args[@]}" -c "$c" --connections "$conns" -z 1s "127.0.0.1:$gport" >/dev/null 2>&1 || true
        t0=$(cpu_ticks "$pid")
        timeout 90 "$ghz" "${ghz_args[@]}" -c "$c" --connections "$conns" -z "${DURATION:-5s}" "127.0.0.1:$gport" >"$work/ghz.json" 2>&1 || true
        t1=$(cpu_ticks "$pid")
        read -r n bad rps < <(python3 -c 'import json, sys
g = json.load(open(sys.argv[1]))
ok = (g.get("statusCodeDistribution") or {}).get("OK", 0)
cut = sum(v for m, v in (g.get("errorDistribution") or {}).items() if "use of closed network connection" in m)
print(ok, g["count"] - ok - cut, round(ok / (g["total"] / 1e9)))' "$work/ghz.json")
      else
        timeout 30 wrk -t1 -c"$c" -d1s -s "$work/post.lua" "http://127.0.0.1:$port/predict" >/dev/null
        t0=$(cpu_ticks "$pid")
        out=$(timeout 60 wrk -t1 -c"$c" -d"${DURATION:-5s}" -s "$work/post.lua" "http://127.0.0.1:$port/predict")
        t1=$(cpu_ticks "$pid")
        n=$(awk '/requests in/{print $1}' <<<"$out")
        bad=$(awk '/Non-2xx/{print $NF}' <<<"$out")
        rps=$(awk '/Requests\/sec/{print $2}' <<<"$out")
      fi
      rss=$(awk '/^VmHWM:/{printf "%.0f", $2 / 1024}' "/proc/$pid/status")
      kill "$pid"
      wait "$pid" 2>/dev/null || true
      pid=
      us=$(python3 -c "print(f'{($t1 - $t0) * 1e6 / $tick / $n:.1f}')")
      echo "round=$round c=$c bin=$bin requests=$n req/s=$rps non2xx=${bad:-0} cpu_us_per_request=$us peak_rss_mib=$rss" | tee -a "$work/runs.txt"
    done
  done
done
echo "medians (cpu_us_per_request, req/s) over ${ROUNDS:-3} rounds:"
python3 - "$work/runs.txt" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.split())
    runs[(f["bin"], f["c"])].append((float(f["cpu_us_per_request"]), float(f["req/s"]), float(f["peak_rss_mib"])))
for (b, c), v in sorted(runs.items(), key=lambda kv: (kv[0][1].zfill(8), kv[0][0])):
    print(f"c={c} {b}: {statistics.median(x for x, _, _ in v):.1f} us/request "
          f"({min(x for x, _, _ in v):.1f}-{max(x for x, _, _ in v):.1f}), {statistics.median(y for _, y, _ in v):,.0f} req/s, "
          f"peak RSS {statistics.median(z for _, _, z in v):.0f} MiB")
EOF
