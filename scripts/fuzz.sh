#!/usr/bin/env bash
# make fuzz: every Go fuzz target of the module for FUZZTIME (default 10s; a
# count such as 2000x runs that many executions, as make fuzz-smoke does).
# A target fails on a real finding: a failing input written to
# testdata/fuzz/, a panic or a test error. A bare "context deadline exceeded"
# at the -fuzztime boundary with no failing input is a race in Go's fuzzing
# coordinator (go.dev/issue/75804, fixed in Go 1.27), not a finding: that
# target is run up to twice more, and fails only if every run fails so. A
# count (Nx) has no deadline to race; CI's smoke uses one.
set -euo pipefail
go=${GO:-go}
fuzztime=${FUZZTIME:-10s}
log=$(mktemp /tmp/fw-fuzz.XXXXXX)
trap 'rm -f "$log"' EXIT

run() { "$go" test -run '^$' -fuzz "^$2\$" -fuzztime "$fuzztime" "$1" >"$log" 2>&1; }
boundary_race() {
	grep -q 'context deadline exceeded' "$log" && ! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$log"
}

for pkg in $("$go" list ./...); do
	dir=$("$go" list -f '{{.Dir}}' "$pkg")
	for t in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/func //'); do
		echo "    $pkg $t"
		if run "$pkg" "$t"; then
			continue
		fi
		if boundary_race; then
			echo "      Go's -fuzztime shutdown race (go.dev/issue/75804), no failing input: running it again"
			run "$pkg" "$t" && continue
			if boundary_race; then
				echo "      the same race again: a third run"
				run "$pkg" "$t" && continue
			fi
		fi
		cat "$log"
		exit 1
	done
done
