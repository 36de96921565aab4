#!/usr/bin/env bash
# make test's driver: runs each make target named on the command line in
# order, stops at the first that fails, and prints how long each took (also
# when one failed), so the suite's time budget is visible in every CI log.
#   bash scripts/timed-steps.sh make setup build test-go ...
set -uo pipefail
make=$1
shift
names=()
secs=()
rc=0
total_start=$(date +%s)
for step in "$@"; do
	start=$(date +%s)
	"$make" --no-print-directory "$step"
	rc=$?
	names+=("$step")
	secs+=($(($(date +%s) - start)))
	[ "$rc" -eq 0 ] || break
done
echo "==> time per step (s)"
for i in "${!names[@]}"; do
	printf '    %-20s %5d\n' "${names[$i]}" "${secs[$i]}"
done
printf '    %-20s %5d\n' total $(($(date +%s) - total_start))
[ "$rc" -eq 0 ] || echo "==> step ${names[-1]} failed (exit $rc)"
exit "$rc"
