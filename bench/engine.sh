#!/usr/bin/env bash
# make bench-engine: eager PyTorch (Python) and the Go engines (ONNX Runtime on
# float and int8 ONNX (dynamic and static quantization), TorchScript,
# quantized TorchScript and AOTInductor .pt2 packages through the libtorch
# shim) on the same reference model files and batch sizes, in one run; writes
# the table into docs/benchmarks.md. Run it on an otherwise idle machine (the
# table records the load average). resnet18.pt2 is built by the Makefile
# before this runs (make models leaves it out).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${FW_VENV:-$root/.venv}/bin/python
batches=${BATCHES:-1,8,64}
seconds=${SECONDS_PER_CONFIG:-1.0}
mkdir -p build/bench
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)
echo "==> eager PyTorch (python bench/engine_eager.py), batches $batches, ${seconds}s each"
"$py" bench/engine_eager.py --models build/models --batches "$batches" --seconds "$seconds" --out build/bench/eager.json
echo "==> Go engines (go run ./bench/enginebench)"
go run ./bench/enginebench -models build/models -batches "$batches" -seconds "$seconds" \
  -eager build/bench/eager.json -out build/bench/engine.json -doc docs/benchmarks.md \
  -command "make bench-engine" -load "$load_start"
echo "==> docs/benchmarks.md updated"
