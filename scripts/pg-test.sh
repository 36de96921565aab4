#!/usr/bin/env bash
# Runs a command against a throwaway PostgreSQL cluster:
#   scripts/pg-test.sh go test -race -count=1 ./dashboard/...
# Starts a cluster with Debian's binaries (/usr/lib/postgresql/<v>/bin; run
# `apt-get install -y postgresql` when missing, or set PG_BIN) in a temporary
# directory, listening on a free port of 127.0.0.1 only, creates database
# fwtest, exports FW_TEST_DATABASE_URL and runs the command. The cluster and
# its directory are removed afterwards, also when the command fails or is
# interrupted. PostgreSQL refuses to run as root: as root, the server runs as
# the unprivileged system user fwpg (created when missing).
# Durability is off (fsync=off) unless FW_PG_DURABLE=1: the cluster is thrown
# away anyway, and tests then run faster.
set -euo pipefail

if [ "$#" -eq 0 ]; then
	echo "usage: $0 COMMAND [ARGS...]" >&2
	exit 2
fi

bin="${PG_BIN:-}"
if [ -z "$bin" ]; then
	bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
fi
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
	echo "pg-test: PostgreSQL server binaries not found (looked in /usr/lib/postgresql/*/bin)." >&2
	echo "Hint: apt-get install -y postgresql, or set PG_BIN to the directory holding initdb and pg_ctl." >&2
	exit 1
fi

run_as=()
tmp="$(mktemp -d /tmp/fw-pg.XXXXXX)"
if [ "$(id -u)" -eq 0 ]; then
	if ! id fwpg >/dev/null 2>&1; then
		useradd --system --no-create-home --shell /usr/sbin/nologin fwpg
	fi
	chown fwpg "$tmp"
	run_as=(runuser -u fwpg --)
fi
chmod 700 "$tmp"

cleanup() {
	status=$?
	if [ -f "$tmp/data/postmaster.pid" ]; then
		"${run_as[@]}" "$bin/pg_ctl" -D "$tmp/data" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	rm -rf "$tmp"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"

"${run_as[@]}" "$bin/initdb" -D "$tmp/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$tmp/initdb.log" 2>&1 || {
	cat "$tmp/initdb.log" >&2
	exit 1
}
opts="-p $port -k $tmp -c listen_addresses=127.0.0.1 -c max_connections=300"
if [ "${FW_PG_DURABLE:-0}" != "1" ]; then
	opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
fi
"${run_as[@]}" "$bin/pg_ctl" -D "$tmp/data" -o "$opts" -l "$tmp/server.log" -w -t 60 start >/dev/null || {
	cat "$tmp/server.log" >&2
	exit 1
}
"$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres fwtest

export FW_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/fwtest?sslmode=disable"
echo "pg-test: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, FW_TEST_DATABASE_URL=$FW_TEST_DATABASE_URL" >&2
set +e
"$@"
rc=$?
set -e
exit "$rc"
