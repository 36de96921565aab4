#!/usr/bin/env bash
# Builds the OpenTelemetry Collector that the tracing tests start
# (python/tests/test_otel.py, FW_OTELCOL) into build/tools/otelcol: the
# collector's builder (go.opentelemetry.io/collector/cmd/builder) generates
# a distribution from scripts/otelcol-builder.yaml (the OTLP
# receiver, the debug and OTLP/HTTP exporters, versions pinned there) and
# builds it, all through the Go module proxy (go.sum checked by
# sum.golang.org). Idempotent: a collector built from the current config is
# kept.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
builder_version=v0.165.0
cfg=$root/scripts/otelcol-builder.yaml
bin=$root/build/tools/otelcol
stamp=$root/build/tools/otelcol.sum
want=$( (cat "$cfg"; echo "$builder_version") | sha256sum | cut -d' ' -f1)
if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "fetch-otelcol: $bin is built from $cfg"
  exit 0
fi
echo "fetch-otelcol: building the OpenTelemetry Collector $builder_version from the Go module proxy into build/tools (several minutes the first time)"
mkdir -p "$root/build/tools"
GOBIN=$root/build/tools GOFLAGS=-mod=mod go install -trimpath "go.opentelemetry.io/collector/cmd/builder@$builder_version"
cd "$root"
GOFLAGS=-mod=mod "$root/build/tools/builder" --config "$cfg" >"$root/build/tools/otelcol-build.log" 2>&1 || {
  tail -40 "$root/build/tools/otelcol-build.log"; exit 1; }
cp "$root/build/tools/otelcol-src/otelcol" "$bin"
rm -rf "$root/build/tools/otelcol-src" # generated Go sources: not fw's (Go's build cache keeps the compiled packages)
echo "$want" >"$stamp"
echo "fetch-otelcol: $("$bin" --version)"
