#!/usr/bin/env bash
# The moto venv: moto's server mode (an S3-protocol server that runs here,
# from PyPI), for the tests of the dashboard's object storage
# (dashboard/blob, FW_ARTIFACT_URI=s3://bucket/prefix). Cached at
# ${FW_CACHE_DIR:-~/.cache/fw}/moto-venv and rebuilt when
# scripts/moto-requirements.txt changes. Prints the venv's moto_server on
# stdout. The tests start it on 127.0.0.1 and stop it themselves.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${FW_CACHE_DIR:-$HOME/.cache/fw}
venv=$cache/moto-venv
req=$root/scripts/moto-requirements.txt
want=$(sha256sum "$req" | cut -d' ' -f1)
mkdir -p "$cache"
exec 9>"$cache/moto-venv.lock"
flock 9
if [[ ! -x $venv/bin/moto_server || $(cat "$venv/.requirements.sha256" 2>/dev/null) != "$want" ]]; then
  echo "==> moto venv $venv (pinned from $req; first time: under a minute)" >&2
  rm -rf "$venv"
  timeout 900 "$(command -v python3)" -m venv "$venv"
  timeout 900 "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
  echo "$want" >"$venv/.requirements.sha256"
fi
"$venv/bin/python" -c 'import moto, flask' >&2 || { echo "setup-moto-venv: $venv is broken; remove it and rerun" >&2; exit 1; }
echo "$venv/bin/moto_server"
