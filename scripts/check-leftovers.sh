#!/usr/bin/env bash
# Fails when a process started by this test run is still alive: `make test`
# exports FW_TEST_SESSION=<random> and every process the suite starts (fw
# serve, fw dashboard, node, chromium, python training jobs, PostgreSQL)
# inherits it, so any process other than this script's own ancestors whose
# environment carries it is a leftover. Leftovers are listed, killed
# (SIGTERM, then SIGKILL after 5 s) and the script exits 1.
#   FW_TEST_SESSION=abc scripts/check-leftovers.sh
# Reads /proc/<pid>/environ, so it sees the processes of its own user (all,
# as root).
set -euo pipefail
session=${1:-${FW_TEST_SESSION:-}}
if [ -z "$session" ]; then
  echo "check-leftovers: FW_TEST_SESSION is unset; nothing identifies this run's processes" >&2
  exit 2
fi

# This script and its ancestors (the make recipe's shell, make) carry the
# variable too and are not leftovers.
declare -A mine=()
pid=$$
while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
  mine[$pid]=1
  pid=$(awk '/^PPid:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
done

leftovers() {
  local d p pp
  mine[$BASHPID]=1 # the process substitution running this function
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ -n "${mine[$p]:-}" ] && continue
    # environ is NUL-separated; unreadable (another user's, ended) is no match.
    if { tr '\0' '\n' <"$d/environ" | grep -qxF "FW_TEST_SESSION=$session"; } 2>/dev/null; then
      # This script's own short-lived helpers (tr, grep, awk) are not leftovers.
      pp=$(awk '/^PPid:/ {print $2}' "$d/status" 2>/dev/null || true)
      [ -n "${mine[$pp]:-}" ] && continue
      echo "$p"
    fi
  done
}

mapfile -t left < <(leftovers)
if [ ${#left[@]} -eq 0 ]; then
  echo "==> no test processes left running"
  exit 0
fi
echo "check-leftovers: ${#left[@]} process(es) started by this test run are still alive:" >&2
ps -o pid=,ppid=,etime=,args= -p "$(IFS=,; echo "${left[*]}")" >&2 || true
kill -TERM "${left[@]}" 2>/dev/null || true
for _ in $(seq 50); do
  mapfile -t left < <(leftovers)
  [ ${#left[@]} -eq 0 ] && break
  sleep 0.1
done
if [ ${#left[@]} -gt 0 ]; then
  kill -KILL "${left[@]}" 2>/dev/null || true
fi
echo "check-leftovers: killed them; a test's cleanup is missing on some exit path (see above)" >&2
exit 1
