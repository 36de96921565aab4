#!/usr/bin/env bash
# Builds the libtorch shim (cmake/) into build/lib/libfwtorch.so against the
# torch installed in the venv (FW_VENV, default .venv). Idempotent: CMake only
# rebuilds when a source or the torch install changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${FW_VENV:-$root/.venv}
py=$venv/bin/python
[ -x "$py" ] || { echo "build-shim: no venv at $venv; run scripts/setup-venv.sh first" >&2; exit 1; }
read -r torch_dir abi < <("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__), int(torch._C._GLIBCXX_USE_CXX11_ABI))')
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
bdir=$root/build/shim
if [ ! -f "$bdir/CMakeCache.txt" ] || ! grep -q "TORCH_DIR:PATH=$torch_dir\$" "$bdir/CMakeCache.txt"; then
  echo "build-shim: configuring against libtorch in $torch_dir"
  rm -rf "$bdir"
  cmake -S "$root/cmake" -B "$bdir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DTORCH_DIR:PATH="$torch_dir" -DTORCH_CXX11_ABI="$abi" >/dev/null
fi
echo "build-shim: compiling build/lib/libfwtorch.so (about a minute the first time)"
cmake --build "$bdir" --parallel "$(nproc)"
mkdir -p "$root/build/lib"
cp -f "$bdir/lib/libfwtorch.so" "$root/build/lib/libfwtorch.so.tmp"
mv -f "$root/build/lib/libfwtorch.so.tmp" "$root/build/lib/libfwtorch.so"
echo "build-shim: build/lib/libfwtorch.so ready"
