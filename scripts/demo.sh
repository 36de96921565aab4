#!/usr/bin/env bash
# make demo: the main job. `make` has already set everything up, trained and
# exported the reference models (build/models). This script
#   1. checks every exported file in the Go engine (fw verify: ONNX Runtime
#      and libtorch compute what PyTorch computed), then
#   2. serves digits_cnn on http://127.0.0.1:8000 with dynamic batching and
#      prints requests to try; Ctrl-C stops it cleanly.
# DEMO_SERVE=0 stops after step 1 (for scripted runs). The dashboard joins the
# demo when it lands.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
port=${DEMO_PORT:-8000}
echo "==> 1. fw verify on every reference model in build/models"
fail=0
for f in build/models/*.onnx build/models/*.ts.pt build/models/*.quant.pt; do
  [ -f "$f" ] || continue
  printf '%-34s ' "$f"
  if out=$(bin/fw verify "$f" --time 0.2 2>&1); then
    echo "$out" | awk '/^check/{sub(/^check +/,""); c=$0} /^timing/{sub(/^timing +/,""); t=$0} END{print c "; " t}'
  else
    echo "FAILED"; echo "$out"; fail=1
  fi
done
echo "    accuracies and sizes: build/models/manifest.json"
[ "$fail" -eq 0 ] || { echo "demo: a model failed verification" >&2; exit 1; }
[ "${DEMO_SERVE:-1}" = "1" ] || exit 0

echo
echo "==> 2. fw serve build/models/digits_cnn.onnx on http://127.0.0.1:$port"
cat <<MSG
    Try, in another terminal:
      curl -s -X POST http://127.0.0.1:$port/predict/image?top_k=3 -F file=@build/models/samples/digit_3_2.png
      curl -s -X POST http://127.0.0.1:$port/predict -H 'Content-Type: application/json' \\
           -d '{"data": [[$(python3 -c 'print(",".join(["0"]*64))')]]}'
      curl -s http://127.0.0.1:$port/health
      open http://127.0.0.1:$port/docs  (interactive API docs), http://127.0.0.1:$port/metrics
    Ctrl-C stops the server.
MSG
exec bin/fw serve --model build/models/digits_cnn.onnx --port "$port"
