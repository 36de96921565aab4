#!/usr/bin/env bash
# Regenerates grpcapi/inferencepb/*.pb.go from the .proto files beside them
# (make proto). The generated code is committed, so building fw needs no
# protoc; this script is for changing the .proto files. protoc comes from
# Debian (protobuf-compiler), the Go plugins from the Go module proxy at the
# versions pinned here (protoc-gen-go matches google.golang.org/protobuf in
# go.mod).
set -euo pipefail
cd "$(dirname "$0")/.."
PROTOC_GEN_GO=v1.36.12
PROTOC_GEN_GO_GRPC=v1.5.1
bin="${FW_CACHE_DIR:-$HOME/.cache/fw}/protoc-bin"
if ! command -v protoc >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get install -y -q protobuf-compiler >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q protobuf-compiler >/dev/null; }
  else
    echo "gen-proto: protoc is missing; run: sudo apt-get install -y protobuf-compiler" >&2
    exit 1
  fi
fi
mkdir -p "$bin"
[ -x "$bin/protoc-gen-go" ] && "$bin/protoc-gen-go" --version | grep -q "${PROTOC_GEN_GO}" ||
  GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO}"
[ -x "$bin/protoc-gen-go-grpc" ] && "$bin/protoc-gen-go-grpc" --version | grep -q "${PROTOC_GEN_GO_GRPC#v}" ||
  GOBIN="$bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC}"
cd grpcapi/inferencepb
PATH="$bin:$PATH" protoc -I . \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  model_config.proto grpc_service.proto
echo "gen-proto: $(protoc --version), protoc-gen-go ${PROTOC_GEN_GO}, protoc-gen-go-grpc ${PROTOC_GEN_GO_GRPC}: grpcapi/inferencepb regenerated"
