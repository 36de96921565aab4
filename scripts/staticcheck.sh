#!/usr/bin/env bash
# Runs staticcheck when it can be installed from the Go module proxy (pinned);
# says so and skips when it cannot, so an offline machine still lints.
set -euo pipefail
version=v0.8.2 # module version (the proxy refuses the 2025.1.1 form)
bin=${FW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fw}/staticcheck-$version
if [ ! -x "$bin" ]; then
  echo "==> installing staticcheck $version"
  mkdir -p "$(dirname "$bin")"
  if ! GOBIN=$(dirname "$bin")/sc-tmp go install "honnef.co/go/tools/cmd/staticcheck@$version" 2>/tmp/fw-staticcheck.log; then
    echo "==> staticcheck: could not install (see /tmp/fw-staticcheck.log); skipped"
    exit 0
  fi
  mv "$(dirname "$bin")/sc-tmp/staticcheck" "$bin"
fi
echo "==> staticcheck"
"$bin" ./...
