#!/usr/bin/env bash
# make test-schemathesis: the API contract checked from outside. Starts
# `bin/fw serve` on a reference model (serve), `bin/fw serve` on a temporary
# copy of a few of build/models/triton's models in explicit model control
# (serve-repo: several models, load and unload) and `bin/fw dashboard`
# (temporary data directory, no token, loopback only) as real processes on
# free ports, and runs schemathesis (PyPI, pinned, in its own venv — never one
# of the project's dependencies) against each one's /openapi.json with every
# check: no server error, no crash, every response in the documented status
# codes, content types, headers and schemas, every schema-valid request
# accepted and every schema-violating one rejected. Prints the number of test
# cases per server and exits non-zero on any failure. Every server is stopped
# on every exit path.
#
# Environment:
#   ST_MAX_EXAMPLES  test cases per operation and phase (default 25)
#   ST_WORKERS       concurrent schemathesis workers (default 1: with more,
#                    Hypothesis on CPython 3.11 can fail in ast.parse,
#                    "AST constructor recursion depth mismatch")
#   ST_SEED          a fixed seed, to replay a run (default: random)
#   ST_MODEL         the model fw serve serves (default build/models/digits_cnn.onnx)
#   ST_ONLY          serve, serve-repo or dashboard: check one server only
#   FW_BIN           the fw binary (default bin/fw)
# What schemathesis is told to leave out or take from lists of valid values,
# each with its reason, is in scripts/schemathesis/{serve,serve-repo,dashboard}.toml;
# scripts/schemathesis/hooks.py teaches it JSON lines (fw serve's bulk route)
# and adds fw's own checks (Triton's 500 refusals; with several models, a
# /predict body that fits the model it names must not get 422).
#   FW_CACHE_DIR     where the venv lives (default ~/.cache/fw/schemathesis-venv)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

st_version=4.32.5
max_examples=${ST_MAX_EXAMPLES:-25}
workers=${ST_WORKERS:-1}
model=${ST_MODEL:-build/models/digits_cnn.onnx}
only=${ST_ONLY:-}
# serve-repo: the models of build/models/triton loaded at start, and the one
# left unloaded for load and unload (scripts/schemathesis/serve-repo.toml).
triton=build/models/triton
repo_models="simple simple_int8 simple_identity nobatch"
repo_spare=fixed_batch1
fw=${FW_BIN:-$root/bin/fw}
cache=${FW_CACHE_DIR:-$HOME/.cache/fw}
venv=$cache/schemathesis-venv

[ -x "$fw" ] || { echo "schemathesis: $fw is missing; run make build" >&2; exit 1; }
case "$only" in
"" | serve | serve-repo | dashboard) ;;
*) echo "schemathesis: ST_ONLY=$only: serve, serve-repo or dashboard" >&2; exit 2 ;;
esac
# runs NAME: whether the server NAME is checked in this run.
runs() { [ -z "$only" ] || [ "$only" = "$1" ]; }
! runs serve || [ -f "$model" ] || { echo "schemathesis: $model is missing; run make models (or set ST_MODEL)" >&2; exit 1; }
if runs serve-repo; then
	for m in $repo_models $repo_spare; do
		[ -f "$triton/$m/1/model.onnx" ] || { echo "schemathesis: $triton/$m is missing; run make models" >&2; exit 1; }
	done
fi

# The venv: created once, reused while it holds the pinned version.
if [ "$("$venv/bin/st" --version 2>/dev/null || true)" != "st, version $st_version" ]; then
	echo "==> schemathesis $st_version into $venv (PyPI; first time ~30 s)"
	rm -rf "$venv"
	mkdir -p "$cache"
	python3 -m venv "$venv"
	"$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$st_version"
fi

tmp=$(mktemp -d /tmp/fw-schemathesis.XXXXXX)
pids=()
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME ARGS...: runs bin/fw ARGS (which listens on --port 0, a free
# port the kernel picks) and sets $url from its "ready on URL" line once
# /health answers.
start() {
	local name=$1
	shift
	"$fw" "$@" >"$tmp/$name.out" 2>"$tmp/$name.log" &
	pids+=($!)
	local pid=$! deadline=$((SECONDS + 60))
	url=
	while [ "$SECONDS" -lt "$deadline" ]; do
		if ! kill -0 "$pid" 2>/dev/null; then
			cat "$tmp/$name.out" "$tmp/$name.log" >&2
			echo "schemathesis: fw $name exited before it was ready" >&2
			return 1
		fi
		url=$(grep -o 'ready on http://[0-9.:]*' "$tmp/$name.out" 2>/dev/null | head -n 1 | sed 's/^ready on //' || true)
		if [ -n "$url" ] && curl -sf "$url/health" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	cat "$tmp/$name.out" "$tmp/$name.log" >&2
	echo "schemathesis: fw $name was not ready within 60 s" >&2
	return 1
}

# check NAME URL [st run options...]: schemathesis against URL/openapi.json;
# prints the number of test cases and records a failure.
failed=()
summary=()
check() {
	local name=$1 url=$2
	shift 2
	echo "==> schemathesis on fw $name ($url/openapi.json, --max-examples $max_examples)"
	local args=(--config-file "$root/scripts/schemathesis/$name.toml" run "$url/openapi.json" --max-examples "$max_examples" --workers "$workers"
		--request-timeout 30 --no-color)
	[ -n "${ST_SEED:-}" ] && args+=(--seed "$ST_SEED")
	local rc
	set +e
	# From the temp dir: st keeps a cache (.schemathesis/) in its working directory.
	(cd "$tmp" && SCHEMATHESIS_HOOKS=hooks PYTHONPATH="$root/scripts/schemathesis" "$venv/bin/st" "${args[@]}" "$@") 2>&1 | tee "$tmp/$name.st"
	rc=${PIPESTATUS[0]}
	set -e
	local cases
	# The summary's "Test cases:" heading is followed by "  N generated, ...".
	cases=$(awk '/^Test cases:/{getline; sub(/^ +/, ""); print; exit}' "$tmp/$name.st")
	summary+=("fw $name: ${cases:-test cases unknown}")
	if [ "$rc" -ne 0 ]; then
		failed+=("$name")
		echo "--- fw $name's log (stderr):" >&2
		tail -n 40 "$tmp/$name.log" >&2 || true
	fi
}

if runs serve; then
	# A trace file, so that every trace setting the document allows can be
	# set (TIMESTAMPS needs one).
	# --allow-client-shm=true: shared memory registration is checked working
	# (off, tritonserver's default, it is a 501 the Go and Python tests check).
	start serve serve --model "$model" --host 127.0.0.1 --port 0 --trace-config "triton,file=$tmp/trace.json" --allow-client-shm=true
	serve_url=$url
	check serve "$serve_url"
fi

if runs serve-repo; then
	# Several models at once, in explicit model control: the repository
	# extension's load and unload really load and unload ($repo_spare, not
	# loaded at start: serve-repo.toml says why), every model has its own
	# /v2/models/NAME paths, and the served document describes each one's
	# inputs. A copy, so that nothing a request does touches build/.
	mkdir -p "$tmp/repo"
	load=()
	for m in $repo_models; do
		cp -R "$triton/$m" "$tmp/repo/"
		load+=(--load-model "$m")
	done
	cp -R "$triton/$repo_spare" "$tmp/repo/"
	start serve-repo serve --model-repository "$tmp/repo" --model-control-mode explicit "${load[@]}" \
		--host 127.0.0.1 --port 0 --trace-config "triton,file=$tmp/trace-repo.json" --allow-client-shm=true
	check serve-repo "$url"
fi

if runs dashboard; then
	export FW_EXPERIMENT_DIR=$tmp/experiments FW_CHECKPOINT_DIR=$tmp/checkpoints FW_ARTIFACT_DIR=$tmp/artifacts
	unset FW_DASHBOARD_TOKEN FW_DATABASE_URL FW_RECIPES
	start dashboard dashboard --host 127.0.0.1 --port 0
	dash_url=$url
	# Excluded: operations that start processes on this machine. Each one
	# spawns a real child (python training, python export, fw serve) per test
	# case; they are covered by the Go and pytest suites on real models.
	#   POST /api/training/start       -> a training process per case
	#   POST /api/models/export        -> a python export process per case
	#   POST /api/models/{name}/deploy -> an fw serve process per case
	#   POST /api/shared-server        -> the shared fw serve, on a generated port
	check dashboard "$dash_url" \
		--exclude-operation-id startTrainingJob \
		--exclude-operation-id startExport \
		--exclude-operation-id deployModel \
		--exclude-operation-id startSharedServer
fi

echo "==> schemathesis summary"
for line in "${summary[@]}"; do
	echo "    $line"
done
if [ "${#failed[@]}" -ne 0 ]; then
	echo "schemathesis: failures on ${failed[*]} (see above)" >&2
	exit 1
fi
echo "==> schemathesis: no failures"
