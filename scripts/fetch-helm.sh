#!/usr/bin/env bash
# Builds helm (the Helm 3 CLI) into build/tools/helm from its Go module,
# helm.sh/helm/v3 at the pinned version, through the Go module proxy (go.sum
# checks by sum.golang.org; Go's build cache makes later builds quick). The
# deploy tests render (`helm template`) and lint (`helm lint`) deploy/helm/fw
# with it, offline. Idempotent: a helm of the pinned version is kept.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=v3.22.0
bin=$root/build/tools/helm
if [ -x "$bin" ] && [ "$("$bin" version --template '{{.Version}}' 2>/dev/null)" = "$version" ]; then
  echo "fetch-helm: $bin is helm $version"
  exit 0
fi
echo "fetch-helm: building helm $version from the Go module proxy into build/tools (about 2 minutes the first time)"
mkdir -p "$root/build/tools"
GOBIN=$root/build/tools GOFLAGS=-mod=mod go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" "helm.sh/helm/v3/cmd/helm@$version"
echo "fetch-helm: $("$bin" version --short)"
