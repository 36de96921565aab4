#!/usr/bin/env bash
# Builds the libtorch shim (cmake/) into build/lib/libfwtorch.so against the
# torch installed in the venv (FW_VENV, default .venv). Idempotent: CMake only
# rebuilds when a source or the torch install changed.
#
# FW_TORCH_DIR   build against this libtorch instead (a directory with
#                include/ and lib/, e.g. from scripts/fetch-libtorch.sh); no
#                Python needed. FW_TORCH_CXX11_ABI: its C++ ABI (default 1,
#                what PyPI's torch 2.13 uses).
# FW_SHIM_CPU_ONLY=1  link libtorch_cpu and libc10 only, with $ORIGIN first in
#                the RPATH (the CPU image; see cmake/CMakeLists.txt).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${FW_TORCH_DIR:-}" ]; then
  torch_dir=$FW_TORCH_DIR abi=${FW_TORCH_CXX11_ABI:-1}
else
  venv=${FW_VENV:-$root/.venv}
  py=$venv/bin/python
  [ -x "$py" ] || { echo "build-shim: no venv at $venv; run scripts/setup-venv.sh first" >&2; exit 1; }
  read -r torch_dir abi < <("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__), int(torch._C._GLIBCXX_USE_CXX11_ABI))')
fi
cpu_only=OFF
[ "${FW_SHIM_CPU_ONLY:-0}" = 1 ] && cpu_only=ON
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
bdir=$root/build/shim
if [ ! -f "$bdir/CMakeCache.txt" ] || ! grep -q "TORCH_DIR:PATH=$torch_dir\$" "$bdir/CMakeCache.txt" ||
  ! grep -q "FWTORCH_CPU_ONLY:BOOL=$cpu_only\$" "$bdir/CMakeCache.txt"; then
  echo "build-shim: configuring against libtorch in $torch_dir (CPU only: $cpu_only)"
  rm -rf "$bdir"
  cmake -S "$root/cmake" -B "$bdir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DTORCH_DIR:PATH="$torch_dir" -DTORCH_CXX11_ABI="$abi" -DFWTORCH_CPU_ONLY:BOOL="$cpu_only" >/dev/null
fi
echo "build-shim: compiling build/lib/libfwtorch.so (about a minute the first time)"
cmake --build "$bdir" --parallel "$(nproc)"
mkdir -p "$root/build/lib"
cp -f "$bdir/lib/libfwtorch.so" "$root/build/lib/libfwtorch.so.tmp"
mv -f "$root/build/lib/libfwtorch.so.tmp" "$root/build/lib/libfwtorch.so"
echo "build-shim: build/lib/libfwtorch.so ready"
