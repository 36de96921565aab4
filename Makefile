# fw: one Go binary (bin/fw) plus the Python package that exports models.
# `make demo` and `make test` bootstrap everything they need, idempotently:
# first the system packages (scripts/system-deps.sh: installs the missing ones
# as root, else prints the one apt-get line and stops), then the rest.
# Caches: FW_VENV (the Python venv, default .venv), FW_CACHE_DIR (downloads,
# default ~/.cache/fw) and Go's module cache.

SHELL := /bin/bash
ROOT := $(abspath .)
FW_VENV ?= $(ROOT)/.venv
PY := $(FW_VENV)/bin/python
export FW_VENV
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GOFLAGS_BUILD := -trimpath -ldflags "-s -w -X main.version=$(VERSION)"
MODELS := build/models
ORT_LIB := third_party/onnxruntime/lib/libonnxruntime.so.1
SHIM := build/lib/libfwtorch.so
HELM := build/tools/helm
OTELCOL := build/tools/otelcol
GO_SOURCES := $(shell find . -name '*.go' -not -path './third_party/*' -not -path './.venv/*' -not -path './web/node_modules/*' 2>/dev/null) $(wildcard engine/*.c engine/*.h pybackend/*.py) go.mod go.sum
PY_SOURCES := $(filter-out python/fw/triton_samples.py,$(shell find python/fw -name '*.py' 2>/dev/null))
# Triton's sample models rebuilt as ONNX, in a Triton-layout model repository (fw serve --model-repository).
TRITON_REPO := $(MODELS)/triton
# The web UI (web/, built into dashboard/webui/dist and embedded in bin/fw).
WEB_SOURCES := $(shell find web/src -type f -not -name schema.d.ts 2>/dev/null) web/index.html web/vite.config.ts web/tsconfig.json web/package.json web/package-lock.json
WEB_DIST := dashboard/webui/dist/index.html
WEB_DEPS := web/node_modules/.package-lock.json
WEB_SCHEMA := web/src/api/schema.d.ts
FUZZTIME ?= 10s

.PHONY: all sysdeps setup build shim models demo image helm test-deploy test test-steps fuzz-smoke bench-scale bench-scale-pg bench-wide bench-scale-smoke test-go test-postgres test-replicas test-s3 bench-replicas test-python test-mlflow test-export-models test-ray test-schemathesis test-soak test-web bench-soak bench-overload bench-repository bench-instances bench-tracing bench-pybackend otelcol test-e2e fuzz proto lint fmt bench-engine bench-serve bench-store bench-track bench-ui bench-scale-ui gpu-check test-gpu-check-cpu clean help venv ort gomod swagger-ui web web-deps

all: build

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

sysdeps: ## the system packages (apt) the tests and demo need: installs the missing ones as root, else prints the apt-get line
	@bash scripts/system-deps.sh

# `make test` and `make demo` check the system packages before any long step
# (Go modules, ONNX Runtime, the venv, npm), also under make -j.
ifneq ($(filter test demo,$(MAKECMDGOALS)),)
gomod $(ORT_LIB) internal/docsite/ui/dist/swagger-ui-bundle.js $(FW_VENV)/.fw-requirements.sha256 $(WEB_DEPS): | sysdeps
endif

setup: gomod ort swagger-ui venv shim web-deps ## install everything: Go modules, ONNX Runtime, Swagger UI, .venv with torch, the libtorch shim, the web UI's npm packages

gomod:
	@echo "==> Go modules"
	@$(GO) mod download

ort: $(ORT_LIB)
$(ORT_LIB): scripts/fetch-ort.sh
	@echo "==> ONNX Runtime C library (npm onnxruntime-node, checksum-verified)"
	@bash scripts/fetch-ort.sh

swagger-ui: internal/docsite/ui/dist/swagger-ui-bundle.js
internal/docsite/ui/dist/swagger-ui-bundle.js: scripts/fetch-swagger-ui.sh
	@echo "==> Swagger UI (npm swagger-ui-dist, checksum-verified) for /docs"
	@bash scripts/fetch-swagger-ui.sh

venv: $(FW_VENV)/.fw-requirements.sha256
$(FW_VENV)/.fw-requirements.sha256: python/requirements.txt scripts/setup-venv.sh python/pyproject.toml
	@echo "==> Python venv $(FW_VENV) (torch 2.13.0 and friends; first time: several minutes)"
	@bash scripts/setup-venv.sh
	@touch $@

shim: $(SHIM) ## build the libtorch shim into build/lib
$(SHIM): cmake/fwtorch.cpp cmake/fwtorch.h cmake/CMakeLists.txt scripts/build-shim.sh | venv
	@echo "==> libtorch shim"
	@bash scripts/build-shim.sh

web-deps: $(WEB_DEPS)
$(WEB_DEPS): web/package-lock.json
	@echo "==> web UI npm packages (npm ci from web/package-lock.json)"
	@cd web && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

$(WEB_SCHEMA): dashboard/api/openapi.json | $(WEB_DEPS)
	@echo "==> web UI API types from dashboard/api/openapi.json"
	@cd web && npm run --silent gen:api >/dev/null

web: $(WEB_DIST) ## build the web UI (web/) into dashboard/webui/dist, which bin/fw embeds
$(WEB_DIST): $(WEB_SOURCES) $(WEB_SCHEMA) | $(WEB_DEPS)
	@echo "==> web UI (tsc + vite build) into dashboard/webui/dist"
	@rm -rf dashboard/webui/dist/assets dashboard/webui/dist/index.html
	@cd web && npx --no-install tsc -b && npx --no-install vite build --logLevel warn

build: bin/fw ## build bin/fw (with the web UI embedded)
bin/fw: $(GO_SOURCES) httpapi/openapi.json $(wildcard internal/docsite/ui/*.html) $(WEB_DIST) | swagger-ui
	@echo "==> go build bin/fw"
	@$(GO) build $(GOFLAGS_BUILD) -o bin/fw ./cmd/fw

# AOTInductor (fw.export.aoti) compiles C++; its compile cache (precompiled
# headers, kernels) lives with the other caches so a fresh clone reuses it.
export TORCHINDUCTOR_CACHE_DIR ?= $(or $(FW_CACHE_DIR),$(HOME)/.cache/fw)/inductor

models: $(MODELS)/manifest.json $(TRITON_REPO)/.built ## train and export the reference models into build/models, and Triton's sample models into build/models/triton
$(MODELS)/manifest.json: $(PY_SOURCES) | venv
	@echo "==> reference models (digits_mlp, digits_cnn, textcls, resnet18) into $(MODELS)"
	@$(PY) -m fw.reference --out $(MODELS)

$(TRITON_REPO)/.built: python/fw/triton_samples.py | venv
	@echo "==> Triton's sample models as ONNX, a model repository in $(TRITON_REPO)"
	@$(PY) -m fw.triton_samples --out $(TRITON_REPO)
	@touch $@

# resnet18.pt2 (AOTInductor) is left out of `make models` (see AOTI_SKIP_RESNET
# in python/fw/reference.py); make bench-engine builds it.
$(MODELS)/resnet18.pt2: $(MODELS)/manifest.json
	@echo "==> resnet18.pt2 (AOTInductor; about a minute on 2 cores)"
	@$(PY) -m fw.reference --out $(MODELS) --only resnet18_pt2
	@touch $@

demo: sysdeps setup build models ## the main job (see README)
	@bash scripts/demo.sh

helm: $(HELM) ## build helm (Go module helm.sh/helm/v3) into build/tools, for deploy/helm/fw
$(HELM): scripts/fetch-helm.sh
	@echo "==> helm v3.22.0 from the Go module proxy into build/tools"
	@bash scripts/fetch-helm.sh

otelcol: $(OTELCOL) ## build the OpenTelemetry Collector (its builder, from the Go module proxy) into build/tools, for the tracing tests and make bench-tracing
$(OTELCOL): scripts/fetch-otelcol.sh scripts/otelcol-builder.yaml
	@bash scripts/fetch-otelcol.sh

test-deploy: build models $(HELM) | venv ## deploy/: the Helm chart linted, rendered and validated against Kubernetes' and the CRDs' schemas; the Prometheus rules (promtool) and Grafana dashboard against a real Prometheus scraping fw
	@echo "==> pytest python/tests/test_deploy.py test_observability.py"
	@cd python && FW_REQUIRE=1 FW_MODELS_DIR=$(ROOT)/$(MODELS) FW_BIN=$(ROOT)/bin/fw $(PY) -m pytest -q tests/test_deploy.py tests/test_observability.py

image: $(WEB_DIST) models | venv ## build the CPU image (Dockerfile) with buildah from a debootstrapped Debian base, then run its fw serve in a chroot and predict through it (scripts/image.sh; as root)
	@VERSION=$(VERSION) bash scripts/image.sh

# Every process the suite starts inherits FW_TEST_SESSION; after the steps,
# passed or failed (or interrupted), scripts/check-leftovers.sh fails the run
# if one of them is still alive, and kills it.
test: export FW_TEST_SESSION := $(or $(FW_TEST_SESSION),$(shell od -An -N8 -tx8 /dev/urandom | tr -d ' '))
test: sysdeps ## the whole test suite (what CI runs)
	@rc=0; trap 'rc=130' INT TERM; \
	$(MAKE) --no-print-directory test-steps || rc=$$?; \
	bash scripts/check-leftovers.sh || rc=1; \
	if [ $$rc -eq 0 ]; then echo "==> all tests passed"; fi; exit $$rc

# make test's steps in order; scripts/timed-steps.sh runs them and prints each
# one's time at the end. The fuzz step is a smoke (FUZZ_SMOKE_TIME per target:
# an execution count, which has no wall-clock deadline for Go's fuzzing
# coordinator to race, go.dev/issue/75804); `make fuzz` runs each target for FUZZTIME.
TEST_STEPS := setup build models lint test-go test-postgres test-replicas test-s3 test-python test-mlflow test-ray test-schemathesis test-soak test-web test-e2e bench-scale-smoke test-gpu-check-cpu fuzz-smoke image
FUZZ_SMOKE_TIME ?= 2000x
test-steps:
	@bash scripts/timed-steps.sh $(MAKE) $(TEST_STEPS)

fuzz-smoke: ## every fuzz target for FUZZ_SMOKE_TIME (2000 executions): make test's share of `make fuzz`
	@echo "==> go fuzz targets, $(FUZZ_SMOKE_TIME) each (make fuzz: $(FUZZTIME) each)"
	@FUZZTIME=$(FUZZ_SMOKE_TIME) GO=$(GO) bash scripts/fuzz.sh

test-go:
	@echo "==> go test -race ./..."
	@FW_REQUIRE_MODELS=1 FW_MODELS_DIR=$(ROOT)/$(MODELS) FW_PYTHON=$(PY) $(GO) test -race -count=1 ./...
	@echo "==> go test -run TestPeakMemoryPerRequest ./cmd/fw (without -race, which multiplies memory)"
	@FW_REQUIRE_MODELS=1 FW_MODELS_DIR=$(ROOT)/$(MODELS) $(GO) test -count=1 -run '^TestPeakMemoryPerRequest$$' ./cmd/fw

# The packages whose tests open the tracking store; their SQLite halves ran
# in test-go (FW_TEST_ONLY_POSTGRES=1 leaves them out here).
PG_PACKAGES := ./dashboard/store ./dashboard/api ./dashboard/jobs ./dashboard/mlflow ./dashboard/registry ./dashboard/replica
test-postgres: ## the tracking store's suites (store, API, jobs, MLflow, registry, replicas) against a throwaway PostgreSQL cluster
	@echo "==> go test -race $(PG_PACKAGES) on PostgreSQL (scripts/pg-test.sh)"
	@FW_REQUIRE_POSTGRES=1 FW_TEST_ONLY_POSTGRES=1 bash scripts/pg-test.sh $(GO) test -race -count=1 $(PG_PACKAGES)

test-replicas: models | venv ## two real fw dashboard processes on one throwaway PostgreSQL (a shared directory, then an S3 bucket on moto's server): the stream across them, deploy from one, SIGKILL one (docs/replicas.md)
	@echo "==> two dashboard replicas on one PostgreSQL (scripts/pg-test.sh), model files on a shared directory and on S3 (moto)"
	@moto=$$(bash scripts/setup-moto-venv.sh) && FW_MOTO_SERVER=$$moto FW_REQUIRE_S3=1 FW_REQUIRE_POSTGRES=1 FW_REQUIRE_MODELS=1 FW_MODELS_DIR=$(ROOT)/$(MODELS) FW_PYTHON=$(PY) \
		bash scripts/pg-test.sh $(GO) test -race -count=1 -run '^TestReplicas(S3)?$$' ./cmd/fw

test-s3: ## the dashboard's file stores (dashboard/blob), payload logging to a bucket (payloadlog) and MLflow runs' files in an s3:// default artifact root and artifacts destination (dashboard/mlflow) on a directory and on a real S3-protocol server (moto 5.2.5's server mode, its own venv: scripts/setup-moto-venv.sh)
	@echo "==> go test ./dashboard/blob ./payloadlog ./dashboard/mlflow (client-written artifacts) on a directory and on S3 (moto_server)"
	@moto=$$(bash scripts/setup-moto-venv.sh) && FW_MOTO_SERVER=$$moto FW_REQUIRE_S3=1 $(GO) test -race -count=1 ./dashboard/blob ./payloadlog && \
		FW_MOTO_SERVER=$$moto FW_REQUIRE_S3=1 $(GO) test -race -count=1 -run 'TestClientWrittenArtifacts|TestArtifactsDestination' ./dashboard/mlflow

test-python: $(HELM) $(OTELCOL) | venv
	@echo "==> pytest python/tests"
	@cd python && FW_REQUIRE=1 FW_MODELS_DIR=$(ROOT)/$(MODELS) FW_BIN=$(ROOT)/bin/fw $(PY) -m pytest

test-export-models: build | venv ## torchvision's resnet18, mobilenet_v3_large and efficientnet_b0 (random weights) through fw.export.onnx's default exporter, served by fw (~1 min; make test keeps a smoke)
	@echo "==> pytest python/slow_tests (torchvision models through the dynamo ONNX exporter, served by fw)"
	@cd python && FW_BIN=$(ROOT)/bin/fw $(PY) -m pytest -q -s -p no:cacheprovider slow_tests

test-mlflow: build | venv ## MLflow's own client and Lightning's MLFlowLogger against a real fw dashboard (own venv: scripts/setup-mlflow-venv.sh; moto's S3 server for an s3:// artifact root)
	@echo "==> pytest python/mlflow_tests (MLflow 3.17.2's client in its own venv)"
	@py=$$(bash scripts/setup-mlflow-venv.sh) && moto=$$(bash scripts/setup-moto-venv.sh) && cd python/mlflow_tests && FW_REQUIRE=1 FW_MOTO_SERVER=$$moto FW_PYTHON=$(PY) FW_BIN=$(ROOT)/bin/fw $$py -m pytest -q

test-ray: | venv ## training jobs on a real Ray head: ray 2.60.0 in its own venv (scripts/setup-ray-venv.sh), started and killed by the tests
	@echo "==> go test -run Ray ./dashboard/jobs/ray ./cmd/fw against a real Ray head (PyPI's ray in its own venv)"
	@rpy=$$(bash scripts/setup-ray-venv.sh) && FW_RAY_HEAD_PYTHON=$$rpy FW_REQUIRE_RAY=1 FW_REQUIRE_MODELS=1 FW_PYTHON=$(PY) $(GO) test -race -count=1 -p 1 -run 'Ray' ./dashboard/jobs/ray ./cmd/fw

test-schemathesis: build models ## /openapi.json of fw serve (one model; a repository of several, explicit control) and fw dashboard checked from outside by schemathesis (own venv; ST_MAX_EXAMPLES=25)
	@bash scripts/schemathesis.sh

test-soak: build models ## 20 s of mixed good and hostile traffic against a real fw serve (make bench-soak runs 10 minutes)
	@echo "==> soak smoke: 20 s of mixed good and hostile traffic (no 5xx, no dropped connection, RSS flat)"
	@$(GO) run ./bench/soak -duration 20s -warmup 5s -md ""

test-web: $(WEB_SCHEMA) | $(WEB_DEPS) ## the web UI's component tests (Vitest, jsdom)
	@echo "==> vitest (web UI components)"
	@cd web && npx --no-install vitest run --silent

test-e2e: build models | venv ## the web UI end to end in Debian's chromium (playwright-core) against a real dashboard
	@echo "==> browser journey (web/e2e/journey.mjs; screenshots in build/screenshots)"
	@mlpy=$$(bash scripts/setup-mlflow-venv.sh) && FW_BIN=$(ROOT)/bin/fw FW_PYTHON=$(PY) FW_MLFLOW_PYTHON=$$mlpy FW_MODELS_DIR=$(ROOT)/$(MODELS) node web/e2e/journey.mjs

proto: ## regenerate grpcapi/inferencepb from its .proto files (protoc from Debian, plugins from the Go module proxy); scripts/gen-proto.sh
	@bash scripts/gen-proto.sh

fuzz: ## run each fuzz target briefly (FUZZTIME=10s); scripts/fuzz.sh
	@echo "==> go fuzz targets, $(FUZZTIME) each"
	@GO=$(GO) FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

lint: $(WEB_SCHEMA) | venv ## go vet, gofmt, staticcheck, ruff, the web UI's type check
	@echo "==> go vet"
	@$(GO) vet ./...
	@echo "==> gofmt"
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@bash scripts/staticcheck.sh
	@echo "==> ruff"
	@$(PY) -m ruff check python bench scripts pybackend
	@$(PY) -m ruff format --check python bench scripts pybackend
	@echo "==> tsc (web UI type check) and the API types rule (web/scripts/check-api-types.mjs)"
	@cd web && npx --no-install tsc -b --noEmit && node scripts/check-api-types.mjs

fmt: ## format Go and Python sources
	@gofmt -w $$(git ls-files '*.go')
	@$(PY) -m ruff format python bench scripts pybackend

gpu-check: setup ## pack what a lent GPU machine needs into build/gpu/bundle.tgz; there, `bash scripts/gpu-check.sh run` does the whole check in one call (docs/gpu-check.md)
	@bash scripts/gpu-check.sh pack

test-gpu-check-cpu: gpu-check models | venv ## the GPU check's CPU half: scripts/gpu-check.sh run on the CPU with the venv's torch (~40 s; make test runs it)
	@GPU_CHECK_DEVICE=cpu GPU_CHECK_PYTHON=$(PY) GPU_CHECK_SECONDS=0.5 GPU_CHECK_WARMUP=0.3 GPU_CHECK_BATCHES=1,8 GPU_CHECK_EAGER_SECONDS=0.2 bash scripts/gpu-check.sh run

bench-engine: setup build models $(MODELS)/resnet18.pt2 ## engine latency/throughput table into docs/benchmarks.md
	@bash bench/engine.sh

bench-serve: setup build models ## wrk (and ghz for gRPC) on loopback: fw vs the HTTP, gRPC and engine ceilings, LitServe, FastAPI, TorchServe, Triton
	@bash bench/serve.sh

bench-store: ## tracking store: ingest, downsampling, listing on SQLite and PostgreSQL
	@$(GO) run ./bench/storebench

bench-replicas: ## ingest points/s through one dashboard vs two on one PostgreSQL, and the stream's latency across them (docs/benchmarks.md)
	@FW_PG_DURABLE=1 bash scripts/pg-test.sh $(GO) run ./bench/replicabench

SCALE_RUNS ?= 1000000
bench-scale: ## issue #22's sizes: SCALE_RUNS (1,000,000) generated runs in one SQLite experiment (FW_BENCH_DATABASE_URL: PostgreSQL), every read of the experiment page timed, into docs/benchmarks.md (bench:scale); minutes and ~8 GB of disk at the default
	@$(GO) run ./bench/expbench -runs $(SCALE_RUNS) -reps 30 -doc docs/benchmarks.md

bench-scale-pg: ## bench-scale on a throwaway PostgreSQL cluster (scripts/pg-test.sh, fsync on), into docs/benchmarks.md (bench:scale-postgres); tens of minutes and ~15 GB of disk at the default
	@FW_PG_DURABLE=1 bash scripts/pg-test.sh sh -c 'FW_BENCH_DATABASE_URL="$$FW_TEST_DATABASE_URL" $(GO) run ./bench/expbench -runs $(SCALE_RUNS) -reps 30 -doc docs/benchmarks.md'

WIDE_EXPERIMENTS ?= 2
WIDE_STEPS ?= 2
bench-wide: ## issue #22's FastTrackML shape, fewer experiments and steps: WIDE_EXPERIMENTS (2) experiments x 1,500 runs x 1,500 metric keys x WIDE_STEPS (2), 150 params, 50 tags; the reads of a wide experiment's pages (summary, runs table, run page, charts, compare) into docs/benchmarks.md (bench:wide)
	@$(GO) run ./bench/expbench -experiments $(WIDE_EXPERIMENTS) -runs 1500 -keys 1500 -steps $(WIDE_STEPS) -params 150 -tags 50 -reps 30 -deep 1000 -doc docs/benchmarks.md

bench-scale-smoke: ## make test's share of bench-scale and bench-wide: 2,000 runs, then 50 runs of 300 metric keys, every read once or twice (nothing timed or asserted: the generator and reads run)
	@echo "==> bench-scale smoke (go run ./bench/expbench -runs 2000, then -runs 50 -keys 300)"
	@$(GO) run ./bench/expbench -runs 2000 -reps 2 -deep 1000 > /dev/null
	@$(GO) run ./bench/expbench -runs 50 -keys 300 -steps 2 -params 20 -tags 5 -reps 1 -deep 20 > /dev/null

bench-ui: build ## the experiments table with 10,000 seeded runs in chromium, into docs/benchmarks.md
	@FW_BIN=$(ROOT)/bin/fw node web/e2e/bench-runs.mjs

bench-scale-ui: build ## issue #22's experiment page in chromium on BENCH_DIR, a store filled by `go run ./bench/expbench -runs 1000000 -reps 0 -dir DIR`: first rows (fresh and cached), a metric sort, a filter, a name search link, the dashboard's RSS (docs/benchmarks.md)
	@test -n "$(BENCH_DIR)" || { echo "make bench-scale-ui: set BENCH_DIR (go run ./bench/expbench -runs 1000000 -reps 0 -dir DIR)"; exit 2; }
	@FW_BIN=$(ROOT)/bin/fw BENCH_DIR=$(BENCH_DIR) node web/e2e/bench-scale-ui.mjs

bench-overload: build models ## 4x the sustainable load on resnet18: 503/504 per second, connections closed, goodput (docs/benchmarks.md)
	@$(GO) run ./bench/overload

bench-repository: build models ## a model repository: load/unload time, 1,000 models on demand, ten models in one server vs ten processes, shm vs binary vs JSON (docs/benchmarks.md)
	@$(GO) run ./bench/repository

bench-pybackend: build | venv ## a Python model (Triton's Python backend) in fw serve vs tritonserver's own Python backend, same model.py and config.pbtxt (docs/benchmarks.md)
	@bash bench/pybackend.sh

bench-tracing: build models $(OTELCOL) ## OpenTelemetry tracing's cost: server CPU per request with tracing off, 1 % and 100 % sampling, exported to a real collector (docs/benchmarks.md)
	@$(GO) run ./bench/tracing

bench-instances: build models ## --instances 1 vs 2 on resnet18 and the digits MLP (docs/benchmarks.md)
	@$(GO) run ./bench/instances

bench-soak: build models ## 10 minutes of mixed good and hostile traffic against fw serve: no 5xx, RSS growth under 5 % (docs/benchmarks.md)
	@$(GO) run ./bench/soak -duration 10m

bench-track: ## tracking: fw.track ingest vs MLflow's client and store; MLflow's client against fw dashboard vs mlflow server
	@bash bench/track.sh

clean: ## remove build outputs (keeps .venv and third_party; the image storage stays in FW_CACHE_DIR/image)
	rm -rf bin build/lib build/shim build/models build/screenshots build/image build/tools dashboard/webui/dist/assets dashboard/webui/dist/index.html
