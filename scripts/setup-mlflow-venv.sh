#!/usr/bin/env bash
# The MLflow venv: MLflow's own client and server (pinned) plus PyTorch
# Lightning, for the MLflow-compatibility tests (python/mlflow_tests/)
# and `make bench-track`. Cached at ${FW_CACHE_DIR:-~/.cache/fw}/mlflow-venv and
# rebuilt when python/mlflow_tests/requirements.txt changes. torch comes from the
# project venv (FW_VENV, default .venv) through a .pth file placed after the
# venv's own site-packages, so it is not downloaded a second time.
# Prints the venv's python on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${FW_CACHE_DIR:-$HOME/.cache/fw}
venv=$cache/mlflow-venv
req=$root/python/mlflow_tests/requirements.txt
proj=${FW_VENV:-$root/.venv}
proj_site=$("$proj/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
want=$( (cat "$req"; echo "$proj_site") | sha256sum | cut -d' ' -f1)
# One builder at a time (make -j runs test-mlflow and test-e2e side by side).
mkdir -p "$cache"
exec 9>"$cache/mlflow-venv.lock"
flock 9
if [[ ! -x $venv/bin/python || $(cat "$venv/.requirements.sha256" 2>/dev/null) != "$want" ]]; then
  echo "==> MLflow venv $venv (pinned from $req; first time: a minute or two)" >&2
  rm -rf "$venv"
  timeout 900 "$(command -v python3)" -m venv "$venv"
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # zz-: .pth files are processed in name order and append to sys.path, so
  # the project venv's packages come after this venv's own.
  # addsitedir (not a bare path) so the project venv's own .pth files apply too.
  echo "import site; site.addsitedir('$proj_site')" >"$site/zz-fw-project-venv.pth"
  timeout 900 "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
  echo "$want" >"$venv/.requirements.sha256"
fi
"$venv/bin/python" -c 'import mlflow, lightning, torch' >&2 || { echo "setup-mlflow-venv: $venv is broken; remove it and rerun" >&2; exit 1; }
echo "$venv/bin/python"
