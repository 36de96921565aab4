#!/usr/bin/env bash
# make demo: the main job. `make` has already set everything up, trained and
# exported the reference models (build/models). This script
#   1. checks every exported file in the Go engine (fw verify: ONNX Runtime
#      and libtorch, TorchScript and AOTInductor .pt2, compute what PyTorch
#      computed);
#   2. starts the dashboard on http://127.0.0.1:8080 (data in build/demo/),
#      registers the reference models in its registry, and deploys digits_cnn
#      as a managed `fw serve` on http://127.0.0.1:8000;
#   3. prints both URLs with requests to try, and waits. Ctrl-C stops the
#      deployment and the dashboard cleanly.
# DEMO_SERVE=0 stops after step 1 (for scripted runs); DEMO_PORT and
# DEMO_DASHBOARD_PORT move the ports.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
port=${DEMO_PORT:-8000}
dport=${DEMO_DASHBOARD_PORT:-8080}
dash="http://127.0.0.1:$dport"

echo "==> 1. fw verify on every reference model in build/models"
fail=0
for f in build/models/*.onnx build/models/*.ts.pt build/models/*.quant.pt build/models/*.pt2; do
  [ -f "$f" ] || continue
  printf '%-42s ' "$f"
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
echo "==> 2. fw dashboard on $dash (data in build/demo/)"
mkdir -p build/demo
export FW_EXPERIMENT_DIR=$root/build/demo/experiments FW_CHECKPOINT_DIR=$root/build/demo/checkpoints
# Its own session: Ctrl-C reaches only this script, which stops things in order.
setsid bin/fw dashboard --port "$dport" >build/demo/dashboard.log 2>&1 &
dpid=$!
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
stop() {
  trap - INT TERM EXIT
  echo
  echo "==> stopping: the deployment, then the dashboard"
  for id in $(curl -sf "$dash/api/deployments" | json '" ".join(x["id"] for x in d.get("deployments", []))' 2>/dev/null); do
    curl -sf -X DELETE "$dash/api/deployments/$id" >/dev/null || true
  done
  kill -TERM "$dpid" 2>/dev/null || true
  wait "$dpid" 2>/dev/null || true
  echo "demo: stopped"
}
trap stop INT TERM EXIT
for _ in $(seq 100); do
  curl -sf "$dash/health" >/dev/null && break
  kill -0 "$dpid" 2>/dev/null || { cat build/demo/dashboard.log; echo "demo: the dashboard did not start" >&2; exit 1; }
  sleep 0.1
done
# A deployment left by an interrupted demo was re-adopted: stop it first.
for id in $(curl -sf "$dash/api/deployments" | json '" ".join(x["id"] for x in d.get("deployments", []))'); do
  curl -sf -X DELETE "$dash/api/deployments/$id" >/dev/null || true
done
for name in digits_cnn digits_mlp textcls; do
  if curl -sf "$dash/api/models/$name" >/dev/null; then
    echo "    $name: already registered"
  else
    v=$(curl -sf -X POST "$dash/api/models?name=$name" -F "file=@build/models/$name.onnx" | json 'd["version"]["version"] if isinstance(d["version"], dict) else d["version"]')
    echo "    $name: registered as version $v"
  fi
done
echo "    deploying digits_cnn on port $port (a managed fw serve)"
curl -sf -X POST "$dash/api/models/digits_cnn/deploy" -H 'Content-Type: application/json' \
  -d "{\"port\": $port}" >/dev/null || { echo "demo: deploy failed (is port $port free?)" >&2; exit 1; }

cat <<MSG

==> 3. running
    dashboard  $dash/      (the web UI: open it in a browser; API docs at $dash/docs)
    model      http://127.0.0.1:$port  (digits_cnn; interactive docs at http://127.0.0.1:$port/docs)

    curl -s -X POST http://127.0.0.1:$port/predict/image?top_k=3 -F file=@build/models/samples/digit_3_2.png
    curl -s $dash/api/deployments

    Train from the dashboard's Training page ($dash/training), or with curl:
    curl -s -X POST $dash/api/training/start -H 'Content-Type: application/json' \\
         -d '{"recipe": "digits_mlp", "experiment": "demo", "params": {"epochs": 3}}'

    Ctrl-C stops the deployment and the dashboard.
MSG
wait "$dpid"
