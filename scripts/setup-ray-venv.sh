#!/usr/bin/env bash
# The Ray venv: PyPI's ray (the head node with its dashboard and Jobs REST
# API), every package pinned by scripts/ray/requirements.txt, for `make
# test-ray` (the Ray executor of training jobs against a real head). Cached at
# ${FW_CACHE_DIR:-~/.cache/fw}/ray-venv and rebuilt when the requirements
# change. Nothing of the project venv is mixed in: the jobs' entrypoints run
# the project venv's python themselves. Prints the venv's python on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${FW_CACHE_DIR:-$HOME/.cache/fw}
venv=$cache/ray-venv
req=$root/scripts/ray/requirements.txt
want=$(sha256sum "$req" | cut -d' ' -f1)
# One builder at a time (make -j).
mkdir -p "$cache"
exec 9>"$cache/ray-venv.lock"
flock 9
if [[ ! -x $venv/bin/python || $(cat "$venv/.requirements.sha256" 2>/dev/null) != "$want" ]]; then
  echo "==> Ray venv $venv (pinned from $req; first time: about a minute)" >&2
  rm -rf "$venv"
  timeout 900 "$(command -v python3)" -m venv "$venv"
  timeout 900 "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
  echo "$want" >"$venv/.requirements.sha256"
fi
"$venv/bin/python" -c 'import ray, ray.dashboard.modules.job.job_head' >&2 || { echo "setup-ray-venv: $venv is broken; remove it and rerun" >&2; exit 1; }
[[ -x $venv/bin/ray ]] || { echo "setup-ray-venv: $venv/bin/ray is missing; remove $venv and rerun" >&2; exit 1; }
echo "$venv/bin/python"
