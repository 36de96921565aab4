#!/usr/bin/env bash
# `make image`: builds the CPU image (Dockerfile) for real with Debian's buildah
# and runs it. No Docker engine and no registry are needed:
#
#   1. base     Debian bookworm (minbase) made by debootstrap from Debian's
#               packages, from the mirror this machine's apt sources name
#               (FW_DEBIAN_MIRROR overrides), imported as localhost/fw-base and
#               passed to the Dockerfile as its BASE build argument. The .debs
#               and the base's tarball are cached in FW_CACHE_DIR/image.
#   2. build    buildah bud (storage driver vfs, chroot isolation: what works as
#               root here) with layer caching: the toolchain stage is kept
#               (tagged localhost/fw-toolchain) while the Dockerfile, go.mod's Go
#               version and the libtorch pins stay; FW_CACHE_DIR, Go's module
#               cache and build cache are mounted into the build so nothing is
#               downloaded twice. Result: localhost/fw:cpu.
#   3. export   buildah push to an OCI layout in build/image/oci (what a
#               registry would get).
#   4. run      scripts/image-check.py unpacks that export into
#               build/image/rootfs and runs the image's own `fw serve` in a
#               chroot (podman, crun and runc cannot start containers here:
#               setrlimit and the cgroup layout are refused), with the models at
#               /app/models, and predicts through it on 127.0.0.1.
#
# Needs root, buildah, debootstrap (scripts/system-deps.sh installs them) and
# `make web models` done (the Makefile's image target sees to it). Storage:
# FW_CACHE_DIR/image/storage (~4 GB; one build at a time, under a lock).
#
#   scripts/image.sh            all four steps
#   IMAGE_STEPS="base build" scripts/image.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${FW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fw}
icache=$cache/image
out=$root/build/image
suite=bookworm
steps=${IMAGE_STEPS:-base build export run}
py=${PYTHON:-${FW_VENV:-$root/.venv}/bin/python}
tag=localhost/fw:cpu

[ "$(id -u)" -eq 0 ] || { echo "image: debootstrap and buildah (vfs, chroot isolation) need root here" >&2; exit 1; }
for t in buildah debootstrap go; do
  command -v "$t" >/dev/null || { echo "image: $t is missing (scripts/system-deps.sh installs it)" >&2; exit 1; }
done
mkdir -p "$icache" "$out"
exec 9>"$icache/.lock"
flock 9 # one build at a time on this storage
B=(buildah --root "$icache/storage" --runroot "$icache/run" --storage-driver vfs)
declare -A took
step() { # step NAME: runs do_NAME when asked for, timing it
  case " $steps " in *" $1 "*) ;; *) return 0 ;; esac
  local t0=$SECONDS
  echo "==> image: $1"
  "do_$1"
  took[$1]=$((SECONDS - t0))
}

# The first URI of this machine's apt sources (one-line or deb822) that serves
# SUITE; empty when none does.
apt_mirror() {
  local want=$1
  {
    [ ! -f /etc/apt/sources.list ] || awk -v s="$want" '
      $1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == s) print $i }' /etc/apt/sources.list
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -f "$f" ] || continue
      awk -v s="$want" 'BEGIN { RS = ""; FS = "\n" } { uri = ""; ok = 0; deb = 0
        for (i = 1; i <= NF; i++) { if ($i ~ /^URIs:/) { split($i, a, " "); uri = a[2] }
          if ($i ~ /^Types:/ && $i ~ / deb( |$)/) deb = 1
          if ($i ~ /^Suites:/) { n = split($i, b, " "); for (j = 2; j <= n; j++) if (b[j] == s) ok = 1 } }
        if (uri != "" && ok && deb) print uri }' "$f"
    done
  } | head -1
}

mirror=${FW_DEBIAN_MIRROR:-$(apt_mirror "$suite")}
mirror=${mirror:-http://deb.debian.org/debian}
security=${FW_DEBIAN_SECURITY_MIRROR:-$(apt_mirror "$suite-security")}
key=$(printf '%s\n' "$suite" minbase "$mirror" "$security" 1 | sha256sum | cut -c1-12)
base_ref=localhost/fw-base:$suite-$key

do_base() {
  if "${B[@]}" inspect --type image "$base_ref" >/dev/null 2>&1; then
    echo "image: base $base_ref is in the storage"
    return
  fi
  local debs=$icache/debootstrap-$suite-minbase-$key.tgz tarball=$icache/base-$suite-$key.tar
  if [ ! -f "$tarball" ]; then
    if [ ! -f "$debs" ]; then
      echo "image: debootstrap: downloading $suite (minbase) from $mirror into $debs"
      rm -rf "$out/debootstrap"
      debootstrap --variant=minbase --make-tarball="$debs.part" "$suite" "$out/debootstrap" "$mirror" >"$out/debootstrap.log" 2>&1 ||
        { tail -20 "$out/debootstrap.log" >&2; exit 1; }
      mv "$debs.part" "$debs"
    fi
    echo "image: debootstrap: unpacking $suite into build/image/base-rootfs"
    rm -rf "$out/base-rootfs" "$out/debootstrap"
    debootstrap --variant=minbase --unpack-tarball="$debs" "$suite" "$out/base-rootfs" "$mirror" >"$out/debootstrap.log" 2>&1 ||
      { tail -20 "$out/debootstrap.log" >&2; exit 1; }
    {
      echo "deb $mirror $suite main"
      echo "deb $mirror $suite-updates main"
      [ -z "$security" ] || echo "deb $security $suite-security main"
    } >"$out/base-rootfs/etc/apt/sources.list"
    rm -rf "$out"/base-rootfs/var/cache/apt/archives/*.deb "$out"/base-rootfs/var/lib/apt/lists/*
    tar --numeric-owner -C "$out/base-rootfs" -cf "$tarball.part" .
    mv "$tarball.part" "$tarball"
    rm -rf "$out/base-rootfs"
  fi
  echo "image: importing $tarball as $base_ref"
  local c
  c=$("${B[@]}" from scratch)
  "${B[@]}" add "$c" "$tarball" / >/dev/null
  "${B[@]}" config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
  "${B[@]}" commit -q "$c" "$base_ref" >/dev/null
  "${B[@]}" rm "$c" >/dev/null
}

do_build() {
  "${B[@]}" inspect --type image "$base_ref" >/dev/null 2>&1 || { echo "image: no base image $base_ref; run the base step" >&2; exit 1; }
  [ -f "$root/dashboard/webui/dist/index.html" ] || { echo "image: the web UI is not built (make web)" >&2; exit 1; }
  # Every download first, here, into the caches the build mounts: with this
  # machine's trust store and proxy settings (an intercepting proxy's CA is not
  # in the image's), so the build itself needs only Debian's mirror.
  (cd "$root" && bash scripts/fetch-go.sh --download && bash scripts/fetch-libtorch.sh --download &&
    bash scripts/fetch-ort.sh --download && bash scripts/fetch-swagger-ui.sh --download && go mod download)
  local gomod gocache
  gomod=$(go env GOMODCACHE) gocache=$(go env GOCACHE)
  mkdir -p "$gomod" "$gocache"
  local mounts=(-v "$cache:/var/cache/fw" -v "$gomod:/root/go/pkg/mod" -v "$gocache:/root/.cache/go-build")
  # The toolchain stage, built once and tagged by what it is made of (its
  # Dockerfile lines, the base, go.mod's Go version, the two fetch scripts)
  # and the month: it is rebuilt monthly for Debian's security updates (the
  # runtime's glibc, libstdc++ and CA certificates come from it).
  local tkey toolchain
  tkey=$({ awk '/^FROM .* AS toolchain/ {on = 1} /^FROM / && !/AS toolchain/ {on = 0} on' "$root/Dockerfile"
    echo "$base_ref"; grep -E '^(go|toolchain) ' "$root/go.mod"; cat "$root/scripts/fetch-go.sh" "$root/scripts/fetch-libtorch.sh"
    date -u +%Y-%m; } |
    sha256sum | cut -c1-12)
  toolchain=localhost/fw-toolchain:$tkey
  if "${B[@]}" inspect --type image "$toolchain" >/dev/null 2>&1; then
    echo "image: toolchain $toolchain is in the storage"
  else
    "${B[@]}" bud --isolation chroot --layers=false --build-arg "BASE=$base_ref" -f "$root/Dockerfile" "${mounts[@]}" \
      --target toolchain -t "$toolchain" "$root"
  fi
  # The rest in one go, without a layer per instruction: with vfs every layer
  # is a full copy of the file system.
  "${B[@]}" bud --isolation chroot --layers=false --build-arg "TOOLCHAIN=$toolchain" -f "$root/Dockerfile" "${mounts[@]}" \
    --build-arg "VERSION=${VERSION:-dev}" --build-arg GOPROXY=off -t "$tag" "$root"
  # Left over: working containers, the previous image, older toolchains.
  "${B[@]}" rm --all >/dev/null
  "${B[@]}" images --format '{{.Name}}:{{.Tag}}' | grep '^localhost/fw-toolchain:' | grep -vx "$toolchain" |
    xargs -r "${B[@]}" rmi >/dev/null 2>&1 || true
  "${B[@]}" rmi --prune >/dev/null 2>&1 || true
  "${B[@]}" images
}

do_export() {
  rm -rf "$out/oci"
  "${B[@]}" push -q "$tag" "oci:$out/oci:cpu" >/dev/null
  echo "image: exported $tag to build/image/oci ($(du -sh "$out/oci" | cut -f1), compressed)"
}

do_run() {
  [ -f "$out/oci/index.json" ] || { echo "image: nothing exported in build/image/oci; run the export step" >&2; exit 1; }
  PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" "$py" "$root/scripts/image-check.py" \
    --oci "$out/oci" --rootfs "$out/rootfs" --models "$root/build/models"
}

step base
step build
step export
step run
for s in base build export run; do
  [ -z "${took[$s]:-}" ] || printf 'image: %-7s %4ss\n' "$s" "${took[$s]}"
done
