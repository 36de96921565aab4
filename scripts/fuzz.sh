#!/usr/bin/env bash
# make fuzz: every Go fuzz target of the module for FUZZTIME (default 10s; a
# count such as 2000x runs that many executions, as make fuzz-smoke does).
# Each package's fuzz-instrumented test binary is built once (`go test -c
# -fuzz .`) and run for each of its targets, in the package's directory so a
# failing input lands in its testdata/fuzz/ as `go test -fuzz` puts it: a
# `go test -fuzz` per target would link the binary again each time (about a
# second per target, most of make fuzz-smoke's time).
# A target fails on a real finding: a failing input written to
# testdata/fuzz/, a panic or a test error. A bare "context deadline exceeded"
# at the -fuzztime boundary with no failing input is a race in Go's fuzzing
# coordinator (go.dev/issue/75804, fixed in Go 1.27), not a finding: that
# target is run up to twice more, and fails only if every run fails so. A
# count (Nx) has no deadline to race; CI's smoke uses one.
set -euo pipefail
go=${GO:-go}
fuzztime=${FUZZTIME:-10s}
work=$(mktemp -d /tmp/fw-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
log=$work/log
cache=$("$go" env GOCACHE)/fuzz

run() { (cd "$1" && "$2" -test.run '^$' -test.fuzz "^$3\$" -test.fuzztime "$fuzztime" -test.fuzzcachedir "$cache/$4/$3") >"$log" 2>&1; }
boundary_race() {
	grep -q 'context deadline exceeded' "$log" && ! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$log"
}

for pkg in $("$go" list ./...); do
	dir=$("$go" list -f '{{.Dir}}' "$pkg")
	targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/func //' || true)
	[ -n "$targets" ] || continue
	bin=$work/$(echo "$pkg" | tr '/' '_').test
	"$go" test -c -fuzz . -o "$bin" "$pkg"
	for t in $targets; do
		echo "    $pkg $t"
		if run "$dir" "$bin" "$t" "$pkg"; then
			continue
		fi
		if boundary_race; then
			echo "      Go's -fuzztime shutdown race (go.dev/issue/75804), no failing input: running it again"
			run "$dir" "$bin" "$t" "$pkg" && continue
			if boundary_race; then
				echo "      the same race again: a third run"
				run "$dir" "$bin" "$t" "$pkg" && continue
			fi
		fi
		cat "$log"
		exit 1
	done
done
