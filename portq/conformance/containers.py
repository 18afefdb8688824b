"""Throwaway database servers for the conformance suite, through testcontainers.

:func:`container_url` starts one only where a Docker daemon answers; everywhere else it
returns None at once (no image pull, no waiting), and the plugin skips that engine.
The SQL Server container gets two databases, :data:`SQLSERVER_DATABASES`: ``portq`` with
READ_COMMITTED_SNAPSHOT OFF (the on-premises default: plain reads wait on locks) and
``portq_rcsi`` with it ON (Azure SQL's default: READPAST needs READCOMMITTEDLOCK); the
plugin runs the suite on both. The Oracle one gets an ``APP_USER`` in FREEPDB1. Images can
be overridden with ``PORTQ_TEST_<ENGINE>_IMAGE``; the SQL Server driver with
``PORTQ_TEST_MSSQL_DRIVER`` (``mssql-python``, the default when it is installed, or an ODBC
driver name for pyodbc).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from portq.engines import ENGINES

log = logging.getLogger("portq.conformance")

#: engine -> the image started for it (portq.engines)
IMAGES = {e.name: e.image for e in ENGINES if e.image is not None}
#: SQL Server test databases -> their READ_COMMITTED_SNAPSHOT setting
SQLSERVER_DATABASES = {"portq": "OFF", "portq_rcsi": "ON"}


def docker_available(timeout: float = 3.0) -> bool:
    """True when a Docker daemon answers a ping within ``timeout`` seconds."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host and not Path("/var/run/docker.sock").exists():
        return False
    try:
        docker = importlib.import_module("docker")
        client = docker.from_env(timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - no docker package, no daemon, no permission
        return False


def container_url(engine: str) -> tuple[str, Callable[[], None]] | None:
    """``(url, stop)`` of a fresh server for ``engine``, or None without Docker (or when the
    container cannot be started; the reason is logged)."""
    start = _STARTERS.get(engine)
    if start is None or not docker_available():
        return None
    image = os.environ.get(f"PORTQ_TEST_{engine.upper()}_IMAGE", IMAGES[engine])
    started: list[Any] = []      # the starter registers its container before starting it
    try:
        url = start(image, started)
    except Exception as exc:  # noqa: BLE001 - report and let the plugin skip the engine
        log.warning("could not start a %s container (%s): %s", engine, image, exc)
        for container in started:
            _stop(container)
        return None
    return url, lambda: _stop(started[0])


def _module(name: str) -> Any:
    """testcontainers 4.9+ moved most modules to ``testcontainers.community``."""
    try:
        return importlib.import_module(f"testcontainers.community.{name}")
    except ImportError:
        return importlib.import_module(f"testcontainers.{name}")


def _stop(container: Any) -> None:
    try:
        container.stop()
    except Exception as exc:  # noqa: BLE001
        log.warning("could not stop container: %s", exc)


def _password() -> str:
    # SQL Server's policy wants upper, lower, digit and symbol; fine for the others too
    return f"Pq_{secrets.token_hex(8)}_9!"


def _address(container: Any, port: int) -> str:
    return f"{container.get_container_host_ip()}:{container.get_exposed_port(port)}"


def sqlserver_driver_option() -> str:
    """The ``driver=`` URL option for test servers: mssql-python when it is installed (it
    needs no system ODBC), else pyodbc with Microsoft's ODBC Driver 18."""
    chosen = os.environ.get("PORTQ_TEST_MSSQL_DRIVER")
    if chosen is None:
        chosen = "mssql-python" if importlib.util.find_spec("mssql_python") else \
            "ODBC Driver 18 for SQL Server"
    return quote(chosen, safe="")


def _sqlserver(image: str, started: list[Any]) -> str:
    password = _password()
    container = _module("mssql").SqlServerContainer(image, password=password)
    container.with_env("MSSQL_PID", "Developer")
    started.append(container)
    container.start()
    sql = " ".join(f"IF DB_ID(N'{db}') IS NULL CREATE DATABASE {db}; ALTER DATABASE {db} SET "
                   f"READ_COMMITTED_SNAPSHOT {rcsi} WITH ROLLBACK IMMEDIATE;"
                   for db, rcsi in SQLSERVER_DATABASES.items())
    code, output = container.exec(
        ["bash", "-c", 'for d in /opt/mssql-tools18 /opt/mssql-tools; do '
         '[ -x "$d/bin/sqlcmd" ] && exec "$d/bin/sqlcmd" -C -b -S localhost -U sa '
         f'-P "$SA_PASSWORD" -Q "{sql}"; done; exit 127'])
    if code != 0:
        raise RuntimeError(f"creating databases {', '.join(SQLSERVER_DATABASES)} failed: "
                           f"{output!r}")
    first = next(iter(SQLSERVER_DATABASES))
    return (f"mssql://sa:{quote(password, safe='')}@{_address(container, 1433)}/{first}"
            f"?TrustServerCertificate=yes&driver={sqlserver_driver_option()}")


def sqlserver_rcsi_url(url: str) -> str:
    """The URL of the READ_COMMITTED_SNAPSHOT ON database beside ``url``'s (a container's)."""
    off, on = SQLSERVER_DATABASES
    head, sep, tail = url.partition(f"/{off}?")
    if not sep:
        raise ValueError("not a test container's SQL Server URL")
    return f"{head}/{on}?{tail}"


def _oracle(image: str, started: list[Any]) -> str:
    password = _password()
    container = _module("oracle").OracleDbContainer(
        image, oracle_password=password, username="portq", password=password)
    started.append(container)
    container.start()
    return f"oracle://portq:{quote(password, safe='')}@{_address(container, 1521)}/FREEPDB1"


def _mysql(image: str, started: list[Any]) -> str:
    password = _password()
    container = _module("mysql").MySqlContainer(image, root_password=password, dbname="test")
    started.append(container)
    container.start()
    return f"mysql://root:{quote(password, safe='')}@{_address(container, 3306)}/test"


def _postgres(image: str, started: list[Any]) -> str:
    password = _password()
    container = importlib.import_module("testcontainers.postgres").PostgresContainer(
        image, username="portq", password=password, dbname="test")
    started.append(container)
    container.start()
    return f"postgresql://portq:{quote(password, safe='')}@{_address(container, 5432)}/test"


_STARTERS: dict[str, Callable[[str, list[Any]], str]] = {
    "sqlserver": _sqlserver, "oracle": _oracle, "mysql": _mysql, "postgres": _postgres,
}
