#!/usr/bin/env bash
# Assembles the CPU image's whole root file system in OUT (the Dockerfile's
# build stage runs it; the runtime stage is `FROM scratch` + OUT):
#   /opt/fw/bin/fw                      bin/fw
#   /opt/fw/lib/libonnxruntime.so.1     ONNX Runtime (third_party/)
#   /opt/fw/lib/libfwtorch.so           the shim, built CPU-only ($ORIGIN first)
#   /opt/fw/lib/<libtorch CPU set>      what ldd resolves for the shim from
#                                       LIBTORCH (scripts/fetch-libtorch.sh)
#   /opt/fw/lib/libtorch.so             CPU-only: links libtorch_cpu (for .pt2)
#   /lib..., /usr/lib...                the system libraries ldd resolves for all
#                                       of the above (glibc, libstdc++, libgcc_s)
#   /etc/passwd, /etc/group             root and fw (uid/gid 10001)
#   /etc/nsswitch.conf, /etc/ssl/certs/ca-certificates.crt, /tmp (1777),
#   /app/models (mount point)
# Nothing else: no shell, no package manager. It fails when ldd leaves a
# library unresolved, so the image cannot ship without one.
#
#   scripts/image-rootfs.sh OUT LIBTORCH
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: image-rootfs.sh OUT LIBTORCH}
libtorch=${2:?usage: image-rootfs.sh OUT LIBTORCH}
rm -rf "$out"
mkdir -p "$out/opt/fw/bin" "$out/opt/fw/lib" "$out/etc/ssl/certs" "$out/app/models" "$out/tmp"
install -m 0755 "$root/bin/fw" "$out/opt/fw/bin/fw"
install -m 0755 "$root/third_party/onnxruntime/lib/libonnxruntime.so.1" "$root/build/lib/libfwtorch.so" "$out/opt/fw/lib/"

# The shim's libtorch closure, from LIBTORCH into /opt/fw/lib.
ldd_of() { LD_LIBRARY_PATH="$libtorch/lib" ldd "$1"; }
unresolved=$(for f in "$out/opt/fw/bin/fw" "$out"/opt/fw/lib/*; do ldd_of "$f"; done | grep 'not found' || true)
[ -z "$unresolved" ] || { echo "image-rootfs: unresolved libraries:"$'\n'"$unresolved" >&2; exit 1; }
for lib in $(ldd_of "$out/opt/fw/lib/libfwtorch.so" | awk '$3 ~ /^\// {print $3}' | grep "^$libtorch/"); do
  install -m 0755 "$lib" "$out/opt/fw/lib/"
done
# AOTInductor packages (.pt2) carry a library linked against libtorch.so,
# which in the CUDA wheel does nothing but link libtorch_cpu and libtorch_cuda
# (the whole CUDA stack). A CPU-only libtorch ships a libtorch.so that links
# libtorch_cpu alone; make that one (no code of its own: a package's symbols
# are libtorch_cpu's), found through the image's LD_LIBRARY_PATH=/opt/fw/lib
# when the shim loads a package.
printf '' | ${CXX:-c++} -shared -x c++ -o "$out/opt/fw/lib/libtorch.so" - -Wl,-soname,libtorch.so \
  -Wl,--no-as-needed -L"$out/opt/fw/lib" -l:libtorch_cpu.so -Wl,--as-needed -Wl,-rpath,'$ORIGIN'
# Everything else ldd resolves (system libraries) at the same path, symlinks
# resolved; and the dynamic loader at its PT_INTERP path.
for f in "$out/opt/fw/bin/fw" "$out"/opt/fw/lib/*; do
  LD_LIBRARY_PATH="$out/opt/fw/lib" ldd "$f" | awk '$3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
done | sort -u | while read -r lib; do
  case "$lib" in "$out"/*) continue ;; esac
  mkdir -p "$out$(dirname "$lib")"
  cp -L "$lib" "$out$lib"
done
# Check: with only OUT's files, every library still resolves.
for f in "$out/opt/fw/bin/fw" "$out"/opt/fw/lib/*; do
  if LD_LIBRARY_PATH="$out/opt/fw/lib" ldd "$f" | awk '$3 ~ /^\// {print $3}' | grep -v "^$out/" | while read -r lib; do
    [ -e "$out$lib" ] || echo "$lib"
  done | grep .; then
    echo "image-rootfs: $f needs the libraries above, which are not in $out" >&2
    exit 1
  fi
done

cat >"$out/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
fw:x:10001:10001:fw:/app:/sbin/nologin
EOF
cat >"$out/etc/group" <<'EOF'
root:x:0:
fw:x:10001:
EOF
echo 'hosts: files dns' >"$out/etc/nsswitch.conf"
cp -L /etc/ssl/certs/ca-certificates.crt "$out/etc/ssl/certs/ca-certificates.crt"
chmod 1777 "$out/tmp"
echo "image-rootfs: $out ($(du -sh "$out" | cut -f1)): $(cd "$out" && find . -type f | sort | tr '\n' ' ')"
