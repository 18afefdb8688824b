#!/usr/bin/env bash
# Start PgBouncer (Debian's package, installed here if missing) in TRANSACTION pooling mode
# in front of the local PostgreSQL 15 (127.0.0.1:5432), with its own configuration in a
# temporary directory (never the system service), and print the URL portq uses through
# it: the database test_pgbouncer (created if missing) via PgBouncer, with listen_url=
# naming a direct connection for LISTEN. Its pool holds at most 20 server connections, so
# that it and the direct conformance run stay under PostgreSQL's max_connections (100).
#
#   bash .ci/pgbouncer.sh start    start (idempotent: a PgBouncer of ours still running is
#                                  reused) and print the URL
#   bash .ci/pgbouncer.sh stop     stop the PgBouncer this script started
#
#   PGB_ROOT   configuration, log and pid file (default /tmp/portq-pgbouncer)
#   PGB_PORT   port (default 6434)
#   PGB_DB     the database (default test_pgbouncer, created on 5432 if missing)
set -euo pipefail
root=${PGB_ROOT:-/tmp/portq-pgbouncer}
port=${PGB_PORT:-6434}
db=${PGB_DB:-test_pgbouncer}
direct="postgresql://postgres@127.0.0.1:5432/$db"
url="postgresql://postgres@127.0.0.1:${port}/${db}?listen_url=$(python3 -c \
    'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$direct")"

say() { printf '%s\n' "$*" >&2; }

running() { [ -f "$root/pgbouncer.pid" ] && kill -0 "$(cat "$root/pgbouncer.pid")" 2>/dev/null; }

case "${1:-start}" in
    stop)
        if running; then kill "$(cat "$root/pgbouncer.pid")"; fi
        exit 0 ;;
    start) ;;
    *) say "usage: $0 start|stop"; exit 2 ;;
esac

if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
    say "installing Debian's pgbouncer"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer \
        >/dev/null
fi
pgbouncer=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)

psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" \
    postgres | grep -q 1 || psql -q -h 127.0.0.1 -U postgres -c "CREATE DATABASE $db" postgres

if ! running; then
    mkdir -p "$root"
    cat >"$root/pgbouncer.ini" <<EOF
[databases]
$db = host=127.0.0.1 port=5432 dbname=$db

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = $root/userlist.txt
max_client_conn = 500
default_pool_size = 20
logfile = $root/pgbouncer.log
pidfile = $root/pgbouncer.pid
EOF
    echo '"postgres" ""' >"$root/userlist.txt"
    chown -R postgres "$root"
    # PgBouncer refuses to run as root: -u drops to the postgres user
    "$pgbouncer" -d -u postgres "$root/pgbouncer.ini"
fi
for _ in $(seq 1 30); do
    psql -h 127.0.0.1 -p "$port" -U postgres -tAc 'SELECT 1' "$db" >/dev/null 2>&1 && break
    sleep 0.5
done
psql -h 127.0.0.1 -p "$port" -U postgres -tAc 'SELECT 1' "$db" >/dev/null
say "$("$pgbouncer" --version | head -n 1) (transaction mode) on port $port"
echo "$url"
