#!/usr/bin/env bash
# System packages the test suite needs, from Debian: installed only when
# missing, so a developer machine that has them is left alone.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v ninja >/dev/null || need+=(ninja-build)
command -v wrk >/dev/null || need+=(wrk)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
# The web UI: Node.js builds it; its browser tests drive Debian's chromium
# with playwright-core (Playwright's own browser download cannot work here).
command -v node >/dev/null || need+=(nodejs npm)
command -v chromium >/dev/null || need+=(chromium fonts-dejavu-core)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "ci-deps: missing ${need[*]}; install them with apt-get (needs root)" >&2
    exit 1
  fi
  echo "ci-deps: apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
echo "ci-deps: system packages present"
