#!/usr/bin/env bash
# Creates (once) the Python virtual environment that exports models, builds the
# libtorch shim's headers/libraries and runs the Python tests, then installs the
# fw package from python/ in editable mode. Idempotent: a venv whose recorded
# requirements hash matches python/requirements.txt is reused as it is.
#
# FW_VENV   where the venv lives (default: .venv in the repository root).
#           CI points it at a cache directory outside the clone so a second run
#           on the same machine reuses the multi-GB torch install.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${FW_VENV:-$root/.venv}
req=$root/python/requirements.txt
want=$(sha256sum "$req" | cut -d' ' -f1)
stamp=$venv/.fw-requirements.sha256
py=${PYTHON:-python3}

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup-venv: $venv is up to date (requirements $want)"
else
  echo "setup-venv: creating $venv with $(cat "$req" | grep -c '==') pinned packages."
  echo "setup-venv: torch 2.13.0 for Linux on PyPI is a CUDA build (~5 GB with its nvidia-* wheels); a fresh install takes several minutes, later runs reuse it."
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  start=$(date +%s)
  "$venv/bin/python" -m pip install --progress-bar off -r "$req"
  echo "setup-venv: installed in $(( $(date +%s) - start ))s"
  echo "$want" > "$stamp"
fi
# The editable install is cheap; redo it when the venv points at another checkout.
if ! "$venv/bin/python" - "$root/python" <<'PY' 2>/dev/null
import sys, pathlib, fw
sys.exit(0 if pathlib.Path(fw.__file__).resolve().parent.parent == pathlib.Path(sys.argv[1]).resolve() else 1)
PY
then
  echo "setup-venv: installing python/ (package fw) in editable mode"
  "$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e "$root/python"
fi
