#!/usr/bin/env bash
# Puts the Go toolchain go.mod asks for into DEST (DEST/bin/go), for machines
# without it (the CPU image's build stage, Dockerfile). It comes from the Go
# module proxy as the module golang.org/toolchain, the same zip `go` itself
# downloads when it switches toolchains, checked against a pinned sha256
# (`go mod download -json golang.org/toolchain@v0.0.1-goVERSION.linux-amd64`
# verifies it against sum.golang.org; add the zip's sha256 below for a new
# version). The zip is cached in FW_CACHE_DIR/go. Idempotent.
#
#   scripts/fetch-go.sh DEST
#   scripts/fetch-go.sh --download    only the zip, into the cache
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:?usage: fetch-go.sh DEST | --download}
version=$(awk '$1 == "toolchain" {sub(/^go/, "", $2); print $2; exit} $1 == "go" {v = $2} END {if (v) print v}' "$root/go.mod" | head -1)
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  *) echo "fetch-go: only linux-amd64 toolchains are pinned (this is $(uname -m))" >&2; exit 1 ;;
esac
case "$version-$arch" in
  1.26.8-amd64) sha256=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7 ;;
  *) echo "fetch-go: no pinned sha256 for go$version linux-$arch; add it to scripts/fetch-go.sh" >&2; exit 1 ;;
esac
if [ "$dest" != --download ] && [ -x "$dest/bin/go" ] && [ "$("$dest/bin/go" env GOVERSION 2>/dev/null)" = "go$version" ]; then
  echo "fetch-go: $dest holds go$version"
  exit 0
fi
mod=v0.0.1-go$version.linux-$arch
cache=${FW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fw}/go
zip=$cache/golang.org-toolchain-$mod.zip
mkdir -p "$cache"
if [ ! -f "$zip" ] || ! echo "$sha256  $zip" | sha256sum -c --status; then
  proxy=${GOPROXY:-https://proxy.golang.org}
  proxy=${proxy%%[,|]*}
  [ "$proxy" = direct ] || [ "$proxy" = off ] && proxy=https://proxy.golang.org
  echo "fetch-go: downloading go$version (golang.org/toolchain $mod, 72 MB) from $proxy"
  curl -fsSL --retry 3 -o "$zip.part" "$proxy/golang.org/toolchain/@v/$mod.zip"
  mv "$zip.part" "$zip"
fi
echo "$sha256  $zip" | sha256sum -c --status || { echo "fetch-go: checksum mismatch for $zip" >&2; rm -f "$zip"; exit 1; }
[ "$dest" != --download ] || exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$zip" "$tmp"
# Module zips keep no file modes: the tools must be made executable (as go does).
src=$tmp/golang.org/toolchain@$mod
chmod -R a+rX "$src"
chmod a+x "$src"/bin/* "$src"/pkg/tool/*/*
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
mv "$src" "$dest"
echo "fetch-go: $("$dest/bin/go" version) in $dest"
