"""``statement_timeout_ms`` on SQL Server and Oracle (no server here): the driver attribute
each backend sets on a new connection, and how the drivers' timeout errors classify."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import portq.errors
from portq.backends.base import ErrorKind
from portq.errors import StatementTimeout
from portq.url import parse_url

oracledb = pytest.importorskip("oracledb")
oracle_errors = pytest.importorskip("oracledb.errors")

from portq.backends import import_driver  # noqa: E402
from portq.backends.oracle import OracleBackend  # noqa: E402
from portq.backends.sqlserver import SqlServerBackend  # noqa: E402

MSSQL_URL = "mssql://sa:pw@db.example:1433/portq?TrustServerCertificate=yes"
ORACLE_URL = "oracle://app:pw@db.example:1521/FREEPDB1"


@pytest.mark.parametrize(("ms", "seconds"), [(1, 1), (999, 1), (1000, 1), (1001, 2),
                                             (5000, 5)])
def test_sqlserver_sets_the_connection_query_timeout_in_whole_seconds(ms: int,
                                                                      seconds: int) -> None:
    backend = SqlServerBackend(parse_url(MSSQL_URL), statement_timeout_ms=ms)
    sent: list[str] = []

    class Recorded:  # what a DB-API connection gets: no server here, so it is recorded
        timeout = 0

        def cursor(self) -> SimpleNamespace:
            return SimpleNamespace(execute=sent.append, close=lambda: None)

        def commit(self) -> None:
            sent.append("COMMIT")
    conn = Recorded()
    backend.limit_statements(conn, ms)
    assert conn.timeout == seconds
    # lock waits too, in milliseconds, as an int literal (SET takes no parameter)
    assert sent == [f"SET LOCK_TIMEOUT {ms}", "COMMIT"]


def _hyt00(text: str) -> BaseException:
    try:  # pyodbc's wheel needs unixODBC's libodbc.so.2: a skip naming it, not an error
        pyodbc = import_driver("sqlserver")
    except portq.errors.DriverMissingError as exc:
        pytest.skip(str(exc))
    error: BaseException = pyodbc.OperationalError(
        "HYT00", f"[HYT00] [Microsoft][ODBC Driver 18 for SQL Server]{text} (0) "
                 "(SQLExecDirectW)")
    return error


def test_sqlserver_query_timeout_is_a_statement_timeout_only_when_one_is_set() -> None:
    limited = SqlServerBackend(parse_url(MSSQL_URL), statement_timeout_ms=300)
    plain = SqlServerBackend(parse_url(MSSQL_URL))
    expired = _hyt00("Query timeout expired")
    assert limited.classify(expired) is ErrorKind.TIMEOUT
    assert plain.classify(expired) is ErrorKind.CONNECTION
    assert limited.classify(_hyt00("Login timeout expired")) is ErrorKind.CONNECTION
    error = limited.translate("jobs", expired, ErrorKind.TIMEOUT)
    assert isinstance(error, StatementTimeout) and "statement_timeout_ms=300" in str(error)
    assert "pw" not in str(error)


def test_oracle_sets_the_call_timeout_in_milliseconds() -> None:
    backend = OracleBackend(parse_url(ORACLE_URL), statement_timeout_ms=2500)
    conn = SimpleNamespace(call_timeout=0)
    backend.limit_statements(conn, 2500)
    assert conn.call_timeout == 2500


def test_oracle_call_timeout_classifies_as_a_statement_timeout() -> None:
    backend = OracleBackend(parse_url(ORACLE_URL), statement_timeout_ms=300)
    err = oracle_errors._create_err(oracle_errors.ERR_CALL_TIMEOUT_EXCEEDED, timeout=300)
    exc = err.exc_type(err)
    assert str(exc).startswith("DPY-4024")
    assert backend.classify(exc) is ErrorKind.TIMEOUT
    closed = oracle_errors._create_err(oracle_errors.ERR_CONNECTION_CLOSED)
    assert backend.classify(closed.exc_type(closed)) is ErrorKind.CONNECTION
