#!/usr/bin/env bash
# Puts ONNX Runtime's C library (libonnxruntime.so.1, CPU build) into
# third_party/onnxruntime/lib. It comes from the npm package onnxruntime-node,
# pinned and checksum-verified; the tarball is only unpacked, none of the
# package's install scripts run. Idempotent: a verified library is kept.
# --download: only put the checked tarball into the cache (FW_CACHE_DIR).
set -euo pipefail
download_only=0
[ "${1:-}" != --download ] || download_only=1
root=$(cd "$(dirname "$0")/.." && pwd)
version=1.30.0
tgz_sha256=6e3390d6b783e7be946fad629292799da28d0b42f84856e50d2c1b0383291e75
lib_sha256=ffb75a925ba05e47b235bb66e3e3911714a80b328a9c9425539feb204aa32a23
dest=$root/third_party/onnxruntime/lib
lib=$dest/libonnxruntime.so.1
cache=${FW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fw}
tgz=$cache/onnxruntime-node-$version.tgz

case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64) arch=arm64; lib_sha256= ;; # arm64 library: checked by the tarball's checksum only
  *) echo "fetch-ort: unsupported machine $(uname -m)" >&2; exit 1 ;;
esac

if [ $download_only = 0 ] && [ -f "$lib" ] && { [ -z "$lib_sha256" ] || echo "$lib_sha256  $lib" | sha256sum -c --status; }; then
  echo "fetch-ort: $lib (ONNX Runtime $version) is in place"
  exit 0
fi
mkdir -p "$cache" "$dest"
if [ ! -f "$tgz" ] || ! echo "$tgz_sha256  $tgz" | sha256sum -c --status; then
  echo "fetch-ort: downloading onnxruntime-node@$version from the npm registry (113 MB)"
  tmp=$(mktemp -d)
  if command -v npm >/dev/null; then
    (cd "$tmp" && npm pack "onnxruntime-node@$version" --silent >/dev/null)
  else # the same tarball, where npm is not installed (the image's build stage)
    curl -fsSL --retry 3 -o "$tmp/onnxruntime-node-$version.tgz" \
      "${NPM_CONFIG_REGISTRY:-https://registry.npmjs.org}/onnxruntime-node/-/onnxruntime-node-$version.tgz"
  fi
  mv "$tmp/onnxruntime-node-$version.tgz" "$tgz"
  rm -rf "$tmp"
fi
echo "$tgz_sha256  $tgz" | sha256sum -c --status || { echo "fetch-ort: checksum mismatch for $tgz" >&2; rm -f "$tgz"; exit 1; }
[ $download_only = 0 ] || exit 0
echo "fetch-ort: extracting libonnxruntime.so.1 ($arch) without running install scripts"
tar -xzf "$tgz" -C "$dest" --strip-components=5 "package/bin/napi-v6/linux/$arch/libonnxruntime.so.1"
if [ -n "$lib_sha256" ]; then
  echo "$lib_sha256  $lib" | sha256sum -c --status || { echo "fetch-ort: checksum mismatch for $lib" >&2; rm -f "$lib"; exit 1; }
fi
echo "fetch-ort: $lib ready"
