#!/usr/bin/env bash
# The main job, for now: the reference models are trained and exported by
# `make models`; this checks each exported file in the Go engine with
# `fw verify` (both engines: ONNX Runtime and libtorch) and prints the table.
# The model server and the dashboard join this demo as they land.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "==> fw verify on every reference model in build/models"
fail=0
for f in build/models/*.onnx build/models/*.ts.pt build/models/*.quant.pt; do
  [ -f "$f" ] || continue
  echo "--- $f"
  bin/fw verify "$f" --time 0.3 || fail=1
done
echo
echo "Accuracy and sizes: build/models/manifest.json"
if [ "$fail" -ne 0 ]; then echo "demo: some model failed verification" >&2; exit 1; fi
echo "demo: every exported model matches PyTorch in the Go engine"
