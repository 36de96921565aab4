#!/usr/bin/env bash
# Puts the CPU part of libtorch 2.13.0 into DEST (include/ and lib/), for
# building and running the libtorch shim without the 5 GB CUDA venv: the CPU
# container image (Dockerfile) uses it. Everything comes from PyPI's wheels,
# downloaded with pip (no install, no Python packages), pinned by sha256:
#   torch 2.13.0          include/ (the C++ headers), lib/libtorch_cpu.so,
#                         lib/libc10.so, lib/libgomp.so.1
#   nvidia-cuda-runtime   lib/libcudart.so.13 } libtorch_cpu.so of the CUDA
#   nvidia-cuda-cupti     lib/libcupti.so.13  } wheel links them (not called
#                                               without a GPU)
# That is the whole set `ldd` resolves for a shim linked against libtorch_cpu
# and libc10 (scripts/build-shim.sh with FW_SHIM_CPU_ONLY=1), besides glibc and
# libstdc++. Wheels are cached in FW_CACHE_DIR/wheels. Idempotent: a DEST
# stamped with the same pins is kept. x86_64 only (the pins are its wheels').
#
#   scripts/fetch-libtorch.sh DEST
#   scripts/fetch-libtorch.sh --download    only the wheels, into the cache
set -euo pipefail
dest=${1:?usage: fetch-libtorch.sh DEST | --download}
py=${PYTHON:-python3}
cache=${FW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fw}/wheels
[ "$(uname -m)" = x86_64 ] || { echo "fetch-libtorch: only x86_64 wheels are pinned (this is $(uname -m))" >&2; exit 1; }

# One line per wheel: its file, the sha256 PyPI lists for it, the requirement.
pins="torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl 60fcdcb2f3876e21146cb4524ef06397d727ca9ad5f020818547e25075fe3cb7 torch==2.13.0
nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548 nvidia-cuda-runtime==13.0.96
nvidia_cuda_cupti-13.0.85-py3-none-manylinux_2_25_x86_64.whl 4eb01c08e859bf924d222250d2e8f8b8ff6d3db4721288cf35d14252a4d933c8 nvidia-cuda-cupti==13.0.85"
stamp=$(echo "$pins" | sha256sum | cut -c1-16)
if [ "$dest" != --download ] && [ -f "$dest/.fw-libtorch" ] && [ "$(cat "$dest/.fw-libtorch")" = "$stamp" ]; then
  echo "fetch-libtorch: $dest is in place"
  exit 0
fi

mkdir -p "$cache"
if ! (cd "$cache" && echo "$pins" | awk '{print $2 "  " $1}' | sha256sum -c --status 2>/dev/null); then
  echo "fetch-libtorch: torch 2.13.0 (527 MB wheel) and two CUDA runtime wheels from PyPI into $cache (kept)"
  # --platform/--python-version pick the wheels the pins name whatever Python
  # runs pip; --require-hashes checks each download against its pin.
  "$py" -m pip download --quiet --no-deps --only-binary=:all: --implementation cp --python-version 3.11 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 \
    --require-hashes -r <(echo "$pins" | awk '{print $3 " --hash=sha256:" $2}') -d "$cache"
fi
(cd "$cache" && echo "$pins" | awk '{print $2 "  " $1}' | sha256sum -c --status) ||
  { echo "fetch-libtorch: a wheel in $cache does not match its pinned sha256" >&2; exit 1; }
[ "$dest" != --download ] || exit 0

tmp=$dest.tmp
rm -rf "$tmp"
mkdir -p "$tmp/lib"
"$py" - "$cache" "$tmp" <<'PY'
import pathlib, shutil, sys, zipfile

cache, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wanted = {
    "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl": (
        "torch/include/", ["torch/lib/libtorch_cpu.so", "torch/lib/libc10.so", "torch/lib/libgomp.so.1"]),
    "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl": (
        None, ["nvidia/cu13/lib/libcudart.so.13"]),
    "nvidia_cuda_cupti-13.0.85-py3-none-manylinux_2_25_x86_64.whl": (None, ["nvidia/cu13/lib/libcupti.so.13"]),
}
for wheel, (include, libs) in wanted.items():
    with zipfile.ZipFile(cache / wheel) as z:
        names = set(z.namelist())
        for lib in libs:
            if lib not in names:
                sys.exit(f"fetch-libtorch: {wheel} has no {lib}")
            target = out / "lib" / pathlib.PurePosixPath(lib).name
            with z.open(lib) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            target.chmod(0o755)
        if include:
            for name in names:
                if name.startswith(include) and not name.endswith("/"):
                    target = out / "include" / name[len(include):]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with z.open(name) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst)
PY
echo "$stamp" > "$tmp/.fw-libtorch"
rm -rf "$dest"
mv "$tmp" "$dest"
echo "fetch-libtorch: $dest ready ($(du -sh "$dest" | cut -f1))"
