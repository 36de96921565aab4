#!/usr/bin/env bash
# The system packages `make test` and `make demo` need, from Debian/Ubuntu's
# apt (the one list; the Makefile's sysdeps target runs this first, before any
# long step). Checks what is present and installs only what is missing:
#   - as root: apt-get update + apt-get install of the missing packages;
#   - not root: prints the one `sudo apt-get install -y ...` line and exits 1.
# Quick and silent when everything is there, so a developer machine is left
# alone. Not from apt: Go (go.dev/dl; go.mod's toolchain line is fetched by
# Go itself) and, where the distribution's is older than web/package.json's
# engines (>= 20.19; Debian 12 has 18), Node.js (nodesource.com or Debian 13).
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
# The libtorch shim (scripts/build-shim.sh) and cgo.
have cmake || need+=(cmake)
have g++ || need+=(g++)
have gcc || need+=(gcc)
have ninja || need+=(ninja-build)
have make || need+=(make)
have pkg-config || need+=(pkg-config)
# Fetching (scripts/fetch-*.sh), checksums, the demo's JSON.
have git || need+=(git)
have curl || need+=(curl)
have tar || need+=(tar)
have sha256sum || need+=(coreutils)
# The Python venv (scripts/setup-venv.sh): python3 with venv and ensurepip.
if ! have python3; then
  need+=(python3 python3-venv python3-dev)
elif ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  need+=(python3-venv)
fi
# bench-serve's load generator.
have wrk || need+=(wrk)
# The tracking store's PostgreSQL tests (scripts/pg-test.sh) need the server
# binaries, not a running cluster.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || [ -x "${PG_BIN:-/nonexistent}/initdb" ] || need+=(postgresql)
# The web UI: Node.js builds it; its browser journey drives Debian's chromium
# at /usr/bin/chromium with playwright-core (Playwright's own browser
# download cannot work offline), with fonts for the screenshots.
have node || need+=(nodejs)
have npm || need+=(npm)
[ -x "${FW_CHROMIUM:-/usr/bin/chromium}" ] || need+=(chromium)
[ -d /usr/share/fonts/truetype/dejavu ] || need+=(fonts-dejavu-core)
# ps for the end-of-suite leftover check's report.
have ps || need+=(procps)
# The CPU image (make image, scripts/image.sh): buildah builds it without a
# Docker engine, debootstrap makes its Debian base from Debian's packages.
have buildah || need+=(buildah)
have debootstrap || need+=(debootstrap)
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
# Observability (python/tests/test_observability.py): a real Prometheus scrapes
# fw serve and fw dashboard; promtool checks and unit-tests deploy/'s rules.
have prometheus || need+=(prometheus)
have promtool || need+=(prometheus)

# Node.js must be >= 20.19 (web/package.json engines; vite 7 and vitest need it).
node_ok() {
  node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)' 2>/dev/null
}

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "sudo apt-get install -y ${need[*]}"
    echo "system-deps: missing system packages (above); run that line (or \`make test\` as root, which runs it), then make again" >&2
    exit 1
  fi
  echo "system-deps: apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! node_ok; then
  echo "system-deps: Node.js $(node --version 2>/dev/null || echo none) is older than web/package.json's >= 20.19" >&2
  echo "system-deps: install Node.js 20.19 or newer (Debian 13's nodejs, or https://github.com/nodesource/distributions), then make again" >&2
  exit 1
fi
echo "system-deps: system packages present"
