# syntax=docker/dockerfile:1
# fw for CPUs: `fw serve` (and `fw dashboard`) with ONNX Runtime and libtorch's
# CPU libraries, in a runtime image of ~0.5 GB holding nothing else (no shell,
# no package manager). Dockerfile.cuda is the GPU image.
#
#   make image        # builds it with buildah (no Docker engine needed) and
#                     # runs it: scripts/image.sh
#   docker build -t fw:cpu .          # where a Docker engine and registry are
#   docker run -p 8000:8000 -v $PWD/build/models:/app/models:ro fw:cpu \
#       --model /app/models/digits_cnn.onnx
#
# BASE is the Debian bookworm image both stages' files come from. `make image`
# makes it with debootstrap from Debian's packages and passes it here (no
# registry is needed); elsewhere the default pulls debian:bookworm-slim.
#
# Stages:
#   toolchain  BASE + Debian's updates + compilers (apt), Go (scripts/fetch-go.sh, the Go module
#              proxy) and libtorch's CPU part (scripts/fetch-libtorch.sh, PyPI's
#              torch wheel: headers and 5 libraries, not the 5 GB CUDA venv).
#              Changes only with this file, go.mod's Go version or the pins.
#   build      the repository's own set-up scripts: fetch-ort.sh,
#              fetch-swagger-ui.sh, build-shim.sh (CPU only), go build; then
#              image-rootfs.sh puts bin/fw, the libraries and exactly the system
#              libraries `ldd` resolves for them into /out.
#   (final)    FROM scratch + /out.
#
# The web UI (web/, Node.js 20.19+) is built on the host (`make web`) and comes
# in with the build context (dashboard/webui/dist), so `fw dashboard` in this
# image serves it. The dashboard's export jobs and local training jobs run
# Python, which this image does not have: run those where the Python package is.

ARG BASE=debian:bookworm-slim
# The build stage starts from this: the toolchain stage below, or (`make image`)
# that stage built once and kept as an image, so the build itself is one step.
ARG TOOLCHAIN=toolchain

FROM ${BASE} AS toolchain
ENV DEBIAN_FRONTEND=noninteractive GOTOOLCHAIN=local PATH=/usr/local/go/bin:$PATH \
    FW_CACHE_DIR=/var/cache/fw
COPY go.mod scripts/fetch-go.sh scripts/fetch-libtorch.sh /src/
RUN cd /src && mkdir scripts && mv fetch-go.sh fetch-libtorch.sh scripts/ \
    && apt-get update && apt-get -y upgrade \
    && apt-get install -y --no-install-recommends ca-certificates curl g++ make cmake ninja-build \
       python3 python3-pip \
    && rm -rf /var/lib/apt/lists/* \
    && bash scripts/fetch-go.sh /usr/local/go \
    && bash scripts/fetch-libtorch.sh /opt/libtorch

FROM ${TOOLCHAIN} AS build
ARG VERSION=dev
# `make image` sets GOPROXY=off: it downloads every module on the host first and
# mounts Go's module cache, so the build needs no network beyond Debian's mirror.
ARG GOPROXY
WORKDIR /src
COPY . .
RUN bash scripts/fetch-ort.sh \
    && bash scripts/fetch-swagger-ui.sh \
    && FW_TORCH_DIR=/opt/libtorch FW_SHIM_CPU_ONLY=1 bash scripts/build-shim.sh \
    && go build -buildvcs=false -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o bin/fw ./cmd/fw \
    && bash scripts/image-rootfs.sh /out /opt/libtorch

FROM scratch
COPY --from=build /out/ /
ENV PATH=/opt/fw/bin FW_HOST=0.0.0.0 FW_PORT=8000 LD_LIBRARY_PATH=/opt/fw/lib \
    FW_ORT_LIB=/opt/fw/lib/libonnxruntime.so.1 FW_TORCH_SHIM=/opt/fw/lib/libfwtorch.so
USER 10001:10001
WORKDIR /app
VOLUME /app/models
EXPOSE 8000 8001
ENTRYPOINT ["/opt/fw/bin/fw", "serve"]
CMD ["--model", "/app/models/model.onnx"]
