#!/usr/bin/env bash
# Start every database server of compose/docker-compose.yml, wait until all are healthy,
# and run portq's conformance suite against each of them. Exit status: non-zero if any
# engine failed. Usage: compose/run-conformance.sh [--down]   (--down: remove them after)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/.."
compose() { docker compose -f "$here/docker-compose.yml" "$@"; }
portq="${PORTQ:-portq}"
command -v "$portq" >/dev/null || portq=".venv/bin/portq"

compose up -d --wait

# SQL Server starts with system databases only: create the two test databases, portq with
# READ_COMMITTED_SNAPSHOT OFF (the on-premises default: plain reads take shared locks) and
# portq_rcsi with it ON (Azure SQL's default: READPAST needs READCOMMITTEDLOCK).
compose exec -T mssql bash -c '
  sqlcmd=/opt/mssql-tools18/bin/sqlcmd; [ -x "$sqlcmd" ] || sqlcmd=/opt/mssql-tools/bin/sqlcmd
  "$sqlcmd" -C -b -S localhost -U sa -P "$MSSQL_SA_PASSWORD" -Q "
    IF DB_ID(N'"'"'portq'"'"') IS NULL CREATE DATABASE portq;
    ALTER DATABASE portq SET READ_COMMITTED_SNAPSHOT OFF WITH ROLLBACK IMMEDIATE;
    IF DB_ID(N'"'"'portq_rcsi'"'"') IS NULL CREATE DATABASE portq_rcsi;
    ALTER DATABASE portq_rcsi SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE;"'

# SQL Server driver: Microsoft's mssql-python by default (its ODBC driver is bundled), or
# MSSQL_DRIVER="ODBC Driver 18 for SQL Server" / FreeTDS for pyodbc
mssql_driver="${MSSQL_DRIVER:-mssql-python}"
mssql_driver="${mssql_driver// /%20}"
urls=(
  "postgresql://postgres:portq@127.0.0.1:15432/test"
  "mysql://root:portq@127.0.0.1:13306/test"
  "mariadb://root:portq@127.0.0.1:13307/test"
  "mssql://sa:Portq_Test_Passw0rd@127.0.0.1:11433/portq?TrustServerCertificate=yes&driver=$mssql_driver"
  "mssql://sa:Portq_Test_Passw0rd@127.0.0.1:11433/portq_rcsi?TrustServerCertificate=yes&driver=$mssql_driver"
  "oracle://portq:portq@127.0.0.1:11521/FREEPDB1"
)
failed=()
for url in "${urls[@]}"; do
  db="${url##*/}"; label="${url%%://*}/${db%%\?*}"   # e.g. mssql/portq_rcsi, no password
  printf '\n== portq conformance %s\n' "$label"
  "$portq" conformance "$url" || failed+=("$label")
done

[ "${1:-}" = "--down" ] && compose down -v
if [ "${#failed[@]}" -gt 0 ]; then
  echo "conformance FAILED on: ${failed[*]}" >&2
  exit 1
fi
echo "conformance passed on all engines"
