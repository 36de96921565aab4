#!/usr/bin/env bash
# Runs staticcheck, installed once from the Go module proxy (pinned). When it
# cannot be installed, lint fails (a lint that silently skips a linter passes
# code it never looked at); FW_SKIP_STATICCHECK=1 skips it on purpose, saying so.
set -euo pipefail
version=v0.8.2 # module version (the proxy refuses the 2025.1.1 form)
bin=${FW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fw}/staticcheck-$version
if [ "${FW_SKIP_STATICCHECK:-}" = 1 ]; then
  echo "==> staticcheck: skipped (FW_SKIP_STATICCHECK=1)"
  exit 0
fi
if [ ! -x "$bin" ]; then
  echo "==> installing staticcheck $version"
  mkdir -p "$(dirname "$bin")"
  if ! GOBIN=$(dirname "$bin")/sc-tmp go install "honnef.co/go/tools/cmd/staticcheck@$version" 2>/tmp/fw-staticcheck.log; then
    cat /tmp/fw-staticcheck.log >&2
    echo "staticcheck: could not install honnef.co/go/tools/cmd/staticcheck@$version from the Go module proxy (above);" >&2
    echo "  fix the proxy access (GOPROXY) or run with FW_SKIP_STATICCHECK=1 to lint without it" >&2
    exit 1
  fi
  mv "$(dirname "$bin")/sc-tmp/staticcheck" "$bin"
fi
echo "==> staticcheck"
"$bin" ./...
