#!/usr/bin/env bash
# Puts the Swagger UI assets that fw embeds for GET /docs (the model server's
# and the dashboard's, both through internal/docsite) into
# internal/docsite/ui/dist (git-ignored except its README.md). They come from the
# npm package swagger-ui-dist, pinned and checksum-verified; the tarball is
# only unpacked (no install scripts run) and only these files are taken:
#   swagger-ui-bundle.js, swagger-ui.css            the UI
#   LICENSE, NOTICE, swagger-ui-bundle.js.LICENSE.txt  its licence (Apache-2.0,
#                                                   whose NOTICE must travel
#                                                   with it) and the bundled
#                                                   third-party notices
# Idempotent: verified files already in place are kept. Rebuild bin/fw after it
# (go:embed picks the files up at build time).
set -euo pipefail
download_only=0 # --download: only put the checked tarball into the cache (FW_CACHE_DIR)
[ "${1:-}" != --download ] || download_only=1
root=$(cd "$(dirname "$0")/.." && pwd)
version=5.35.0
tgz_sha256=1b8e891893404ea4c3558b6a87e2a3e494e7eedba41168c2ece5800a391a6ea6
# sha256 of each extracted file (what the tarball above holds).
files_sha256="e6a898692f2d768e807c3ba4626068a69a2c5dd960dd6c76f3e4d3a3de180af2  swagger-ui-bundle.js
5ed08757e53da3e026d6cbecc61fe5d43585c9560b302d534ad56692519a273d  swagger-ui.css
cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30  LICENSE
0d20d1adef18aee3f40dd258172155521ce702ac445cb5f7b7d60ed32dad2fb2  NOTICE
37eb6e7e59aed57b2c1acf076574b818ea07b74265717e0bd67b59e0baf9abbb  swagger-ui-bundle.js.LICENSE.txt"
dest=$root/internal/docsite/ui/dist
cache=${FW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fw}
tgz=$cache/swagger-ui-dist-$version.tgz

verified() { (cd "$dest" && echo "$files_sha256" | sha256sum -c --status 2>/dev/null); }

if [ $download_only = 0 ] && [ -d "$dest" ] && verified; then
  echo "fetch-swagger-ui: $dest holds swagger-ui-dist $version (verified)"
  exit 0
fi
mkdir -p "$cache" "$dest"
if [ ! -f "$tgz" ] || ! echo "$tgz_sha256  $tgz" | sha256sum -c --status; then
  echo "fetch-swagger-ui: downloading swagger-ui-dist@$version from the npm registry (3.4 MB) into $cache"
  tmp=$(mktemp -d)
  if command -v npm >/dev/null; then
    (cd "$tmp" && npm pack "swagger-ui-dist@$version" --silent >/dev/null)
  else # the same tarball, where npm is not installed (the image's build stage)
    curl -fsSL --retry 3 -o "$tmp/swagger-ui-dist-$version.tgz" \
      "${NPM_CONFIG_REGISTRY:-https://registry.npmjs.org}/swagger-ui-dist/-/swagger-ui-dist-$version.tgz"
  fi
  mv "$tmp/swagger-ui-dist-$version.tgz" "$tgz"
  rm -rf "$tmp"
fi
if ! echo "$tgz_sha256  $tgz" | sha256sum -c --status; then
  echo "fetch-swagger-ui: checksum mismatch for $tgz (want sha256 $tgz_sha256); removed it" >&2
  rm -f "$tgz"
  exit 1
fi
[ $download_only = 0 ] || exit 0
names=$(echo "$files_sha256" | awk '{print $2}')
echo "fetch-swagger-ui: extracting $(echo $names) into $dest (no install scripts run)"
stage=$(mktemp -d "$cache/swagger-ui-stage.XXXXXX") # outside dest: go:embed must never see it
trap 'rm -rf "$stage"' EXIT
# shellcheck disable=SC2046
tar -xzf "$tgz" -C "$stage" --strip-components=1 --no-same-owner --no-same-permissions $(printf 'package/%s ' $names)
if ! (cd "$stage" && echo "$files_sha256" | sha256sum -c --status); then
  echo "fetch-swagger-ui: an extracted file does not match its recorded checksum" >&2
  exit 1
fi
for n in $names; do
  chmod 0644 "$stage/$n"
  mv -f "$stage/$n" "$dest/$n"
done
echo "fetch-swagger-ui: $dest ready (swagger-ui-dist $version); rebuild bin/fw to embed it"
