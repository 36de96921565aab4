#!/usr/bin/env bash
# fw's GPU check, in one call of a lent GPU machine (docs/gpu-check.md).
#
#   bash scripts/gpu-check.sh pack    here (make gpu-check): builds bin/fw, the engine's
#                                     test binary and bench/gpucheck into build/gpu/bundle.tgz
#                                     (about 23 MB), the only built thing the call carries
#   bash scripts/gpu-check.sh profile there: the short run that says where fw serve's time goes on
#                                     the GPU: unpack, shim, the TorchScript models, then fw serve
#                                     with --pprof under load (bench/gpucheck -profile): the table,
#                                     a table of server, engine and queue time and CPU by thread,
#                                     and each row's Go CPU profile in $OUT/profiles.tgz (~2 minutes)
#   bash scripts/gpu-check.sh run     there, in the repository's root: unpacks the bundle,
#                                     builds the libtorch shim against the machine's own
#                                     libtorch, exports the models there (scripts/gpu-export.py),
#                                     runs `fw verify --device cuda`, the engine's CUDA tests,
#                                     raw PyTorch (bench/gpu_eager.py) and fw serve on the same
#                                     files (bench/gpucheck), and writes one report
#
# The GPU machine has CUDA, a C++ compiler, CMake and python3 with torch, and no Go and no
# network: everything Go is built here, everything that must match its libtorch is built there.
# The report and the logs go to $OUT (the device tool brings that folder back), else to
# build/gpu-run/out. Each step is timed and logged; a failed step is reported and the rest still
# run; the exit status is the number of failed steps.
#
# GPU_CHECK_DEVICE (default cuda): cpu runs the same steps on the CPU (the CPU half, testable on
# any machine with the venv: GPU_CHECK_PYTHON=.venv/bin/python); GPU_CHECK_SECONDS: measured
# seconds per load row (default 3), GPU_CHECK_WARMUP: warm-up seconds before each (default 1); GPU_CHECK_BATCHES, GPU_CHECK_EAGER_SECONDS: raw PyTorch's batches
# (default 1,8,32,64) and seconds per batch (default 1).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
gpu=$root/build/gpu      # the bundle: the one built thing the call carries
work=$root/build/gpu-run # what a run writes: the unpacked bundle, the models, the report without $OUT

pack() {
  set -e
  local go=${GO:-go}
  rm -rf "$gpu"
  mkdir -p "$gpu/stage"
  make -s build
  cp -f bin/fw "$gpu/stage/fw"
  "$go" test -c -o "$gpu/stage/engine.test" ./engine
  "$go" build -o "$gpu/stage/gpucheck" ./bench/gpucheck
  local commit
  commit=$(git rev-parse --short HEAD)
  git diff --quiet HEAD || commit+="-dirty"
  echo "$commit" >"$gpu/stage/commit"
  tar -C "$gpu/stage" -czf "$gpu/bundle.tgz.tmp" fw engine.test gpucheck commit
  mv -f "$gpu/bundle.tgz.tmp" "$gpu/bundle.tgz"
  rm -rf "$gpu/stage"
  echo "gpu-check: build/gpu/bundle.tgz ready ($(du -h "$gpu/bundle.tgz" | cut -f1)). On the GPU machine, from the"
  echo "repository's root with build/gpu carried: bash scripts/gpu-check.sh run   (about 5 minutes; docs/gpu-check.md)"
}

run() {
  local mode=${1:-run}
  local dev=${GPU_CHECK_DEVICE:-cuda} py=${GPU_CHECK_PYTHON:-python3} secs=${GPU_CHECK_SECONDS:-3}
  local out=${OUT:-$work/out} models=$work/models failed=0 t0
  rm -rf "$work"
  mkdir -p "$work/bin" "$out"
  local report=$out/gpu-check.md log=$out/gpu-check.log
  : >"$log"
  export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/fw-inductor} PYTHONPATH=$root/python PYTHONUNBUFFERED=1
  t0=$(date +%s)
  {
    echo "# fw GPU check"
    echo
    echo "Commit $(tar -xzOf "$gpu/bundle.tgz" commit 2>/dev/null || echo unknown)," \
      "$(date -u +%Y-%m-%dT%H:%MZ), device $dev, \`bash scripts/gpu-check.sh $mode\`."
    echo
  } >"$report"

  # step NAME COMMAND...: runs it, output to the log (and the terminal), a line in the report.
  step() {
    local name=$1 s rc
    shift
    s=$(date +%s)
    echo "==> $name" | tee -a "$log"
    "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    if [ $rc -eq 0 ]; then
      echo "- $name: ok ($(($(date +%s) - s)) s)" >>"$report"
    else
      echo "- $name: **FAILED** (exit $rc, $(($(date +%s) - s)) s; see gpu-check.log)" >>"$report"
      failed=$((failed + 1))
    fi
    return $rc
  }

  machine() {
    uname -srm
    nproc
    if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; fi
    "$py" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "devices", torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
    command -v g++ cmake ninja nvcc || true
  }
  unpack() {
    [ -f "$gpu/bundle.tgz" ] || { echo "no build/gpu/bundle.tgz: run make gpu-check here first and carry build/gpu" >&2; return 1; }
    mkdir -p bin
    tar -C "$work/bin" -xzf "$gpu/bundle.tgz"
    cp -f "$work/bin/fw" bin/fw
    bin/fw version
  }
  shim() {
    local dir abi
    read -r dir abi < <("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__), int(torch._C._GLIBCXX_USE_CXX11_ABI))') || return 1
    FW_TORCH_DIR=$dir FW_TORCH_CXX11_ABI=$abi bash scripts/build-shim.sh
  }
  verify() {
    local f rc=0
    for f in "$models"/resnet18.ts.pt "$models"/resnet18."$dev".pt2 "$models"/digits_mlp.ts.pt; do
      [ -f "$f" ] || continue
      if ! bin/fw verify "$f" --device "$dev" --time 2; then
        rc=1
        # Diagnosis: the same with every CUDA library folder of the wheels on the search path.
        local libs
        libs=$("$py" -c 'import glob, os, torch; print(":".join(sorted(glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia", "*", "lib")))))')
        echo "--- again with LD_LIBRARY_PATH=$libs"
        LD_LIBRARY_PATH=$libs bin/fw verify "$f" --device "$dev" --time 0 && echo "--- passes with LD_LIBRARY_PATH: a library the shim does not preload"
      fi
    done
    return $rc
  }
  cudatests() {
    if [ "$dev" = cuda ]; then
      (cd engine && FW_TEST_CUDA=1 FW_REQUIRE_MODELS=1 FW_MODELS_DIR=$models "$work/bin/engine.test" -test.run '^TestCUDA$' -test.v -test.count 1)
    else
      # The CPU half: the refusals TestCUDA checks without a GPU, over the reference models.
      (cd engine && FW_MODELS_DIR=${FW_MODELS_DIR:-$root/build/models} "$work/bin/engine.test" -test.run '^TestCUDA$' -test.v -test.count 1)
    fi
  }
  eager() {
    local files=("$models"/resnet18.ts.pt)
    [ -f "$models/resnet18.$dev.pt2" ] && files+=("$models/resnet18.$dev.pt2")
    LD_PRELOAD="libstdc++.so.6${LD_PRELOAD:+ $LD_PRELOAD}" "$py" bench/gpu_eager.py --device "$dev" --batches "${GPU_CHECK_BATCHES:-1,8,32,64}" --seconds "${GPU_CHECK_EAGER_SECONDS:-1}" --out "$out/eager.json" "${files[@]}" "$models"/digits_mlp.ts.pt
  }
  serving() {
    local smi="" rc
    # The GPU's utilisation and memory every half second while fw serves (gpu-util.csv).
    if [ "$dev" != cpu ] && command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -lms 500 >"$out/gpu-util.csv" 2>&1 &
      smi=$!
    fi
    if [ "$mode" = profile ]; then
      "$work/bin/gpucheck" -bin bin/fw -models "$models" -device "$dev" -c "${GPU_CHECK_CLIENTS:-1,16,64}" -d "${secs}s" -warmup "${GPU_CHECK_WARMUP:-1}s" \
        -only resnet18.ts.pt,digits_mlp.ts.pt -profile "$work/prof" -out "$out/serve.md"
      rc=$?
      tar -C "$work/prof" -czf "$out/profiles.tgz" . || rc=1
    else
      "$work/bin/gpucheck" -bin bin/fw -models "$models" -device "$dev" -c 1,16,64 -d "${secs}s" -warmup "${GPU_CHECK_WARMUP:-1}s" -eager "$out/eager.json" -out "$out/serve.md"
      rc=$?
    fi
    [ -n "$smi" ] && kill "$smi" 2>/dev/null && wait "$smi" 2>/dev/null
    return $rc
  }

  step "machine" machine
  step "unpack the bundle (bin/fw, engine.test, gpucheck)" unpack || { echo "- stopped: nothing to run" >>"$report"; return 1; }
  step "libtorch shim built against the machine's torch" shim
  local aoti=()
  [ "$dev" = cpu ] && [ -z "${GPU_CHECK_AOTI_CPU:-}" ] && aoti=(--no-aoti)
  [ "$mode" = profile ] && aoti=(--no-aoti)
  # Python's own AOTInductor loader (torch._inductor.aoti_load_package) crashed on the H200 image
  # the way fw's shim did before it loaded libstdc++ globally (engine/torch_dl.c): std::call_once's
  # state bound to two copies. The Python steps get the same cure from outside (docs/gpu-check.md).
  local pre="libstdc++.so.6${LD_PRELOAD:+ $LD_PRELOAD}"
  step "models exported there (scripts/gpu-export.py)" env LD_PRELOAD="$pre" timeout 300 "$py" scripts/gpu-export.py --out "$models" --device "$dev" "${aoti[@]}"
  if [ "$mode" = profile ]; then
    step "fw serve on $dev with --pprof (bench/gpucheck -profile)" serving
  else
    step "fw verify --device $dev" verify
    step "engine CUDA tests (TestCUDA)" cudatests
    step "raw PyTorch on the same files (bench/gpu_eager.py)" eager
    step "fw serve on $dev (bench/gpucheck)" serving
  fi
  {
    echo
    echo "Total $(($(date +%s) - t0)) s, $failed step(s) failed."
    echo
    if [ -f "$models/manifest.json" ]; then
      echo "## Exports"
      echo
      echo '```'
      cat "$models/manifest.json"
      echo '```'
      echo
    fi
    if [ "$mode" = run ]; then
      echo "## fw verify"
      echo
      echo '```'
      sed -n '/^==> fw verify/,/^==> /p' "$log" | grep -v '^==> '
      echo '```'
      echo
    fi
    echo "## Serving: fw serve against raw PyTorch, same files, same device"
    echo
    cat "$out/serve.md" 2>/dev/null || echo "(no serving table: see gpu-check.log)"
    echo
    if [ -s "$out/gpu-util.csv" ]; then
      echo "GPU while serving (nvidia-smi every 0.5 s): $(awk -F', ' '{u=$2+0; m=$3+0; if (u>mu) mu=u; if (m>mm) mm=m; su+=u; n++} END {if (n) printf "utilisation mean %.0f %%, max %d %%; memory used max %d MiB; %d samples", su/n, mu, mm, n}' "$out/gpu-util.csv")"
      echo
    fi
    if [ -s "$out/eager.json" ]; then
      echo "## Raw PyTorch (bench/gpu_eager.py)"
      echo
      echo "| file | batch | mode | rows/s | p50 µs | p99 µs |"
      echo "|---|---:|---|---:|---:|---:|"
      "$py" -c 'import json, sys
for r in json.load(open(sys.argv[1])):
    print("| %s | %d | %s | %s | %s | %s |" % (r["model"], r["batch"], r["mode"], format(r["rows_per_s"], ",.0f"),
          format(r["p50_us"], ",.0f"), format(r["p99_us"], ",.0f")))' "$out/eager.json" 2>/dev/null
    fi
  } >>"$report"
  echo "gpu-check: report in $report ($failed step(s) failed)"
  return $failed
}

case "${1:-}" in
  pack) pack ;;
  run) run run ;;
  profile) run profile ;;
  *) echo "usage: bash scripts/gpu-check.sh pack|run|profile" >&2; exit 2 ;;
esac
