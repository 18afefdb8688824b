"""SQL Server 2017+ and Azure SQL (pyodbc with Microsoft's ODBC Driver 18, or FreeTDS).

The claim is one statement: an ordered ``TOP (n)`` CTE read ``WITH (UPDLOCK, READPAST,
ROWLOCK, READCOMMITTEDLOCK)`` and an ``UPDATE`` through it with ``OUTPUT inserted.*``
(``dialects/sqlserver/queries.sql`` explains each hint). READCOMMITTEDLOCK keeps the claim
correct on databases with READ_COMMITTED_SNAPSHOT ON (Azure SQL's default), where READPAST
would otherwise be refused (error 650). Idempotent enqueue is ``INSERT ... SELECT ... WHERE
NOT EXISTS (... WITH (UPDLOCK, HOLDLOCK))``, which never raises on a taken key.

Connections portq opens run in ODBC manual-commit mode at READ COMMITTED with
``XACT_ABORT ON``. pyodbc is imported only to connect, so this module (its connection
string builder and error mapping) loads without the ODBC libraries.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from portq.backends.base import ErrorKind, SqlBackend
from portq.errors import ConfigurationError, DriverMissingError
from portq.job import EnqueueResult
from portq.url import DatabaseURL

DEFAULT_DRIVER = "ODBC Driver 18 for SQL Server"
DEFAULT_LOGIN_TIMEOUT_S = 10

# native error numbers and SQLSTATEs (strings) by kind
_ERROR_CODES: dict[ErrorKind, frozenset[object]] = {
    ErrorKind.UNIQUE: frozenset({2627, 2601}),  # unique constraint / unique index violation
    ErrorKind.CHECK: frozenset({547, 515}),     # CHECK/FOREIGN KEY constraint, NULL into NOT NULL
    # deadlock victim, lock timeout, snapshot update conflict, serialization failure
    ErrorKind.RETRYABLE: frozenset({1205, 1222, 3960, "40001"}),
    ErrorKind.CONNECTION: frozenset({
        233, 10053, 10054, 10060, 10061,  # no process on the pipe, TCP reset/abort/timeout/...
        40197, 40501, 40613,              # Azure SQL: service error, busy, database unavailable
        # SQLSTATEs of a lost or unusable connection (08S01 communication link failure, ...)
        "08S01", "08001", "08003", "08004", "08007",
    }),
}
# "... message text. (2627) (SQLExecDirectW)": the native error precedes the ODBC call name
_NATIVE = re.compile(r"\((-?\d+)\)\s*\(SQL[A-Za-z]+\)")
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_ ]*$")
# URL query options with a canonical ODBC keyword; any other key passes through verbatim
_KEYWORDS = {"encrypt": "Encrypt", "trustservercertificate": "TrustServerCertificate",
             "trust_server_certificate": "TrustServerCertificate",
             "applicationintent": "ApplicationIntent", "multisubnetfailover": "MultiSubnetFailover",
             "authentication": "Authentication", "app": "APP"}
_RESERVED = {"server", "database", "uid", "pwd", "user", "password"}


def odbc_value(value: str) -> str:
    """``value`` as an ODBC connection-string value: braced, with ``}`` doubled, when needed
    (MS-ODBCSTR); a NUL cannot be represented and is refused."""
    if "\0" in value:
        raise ConfigurationError("an ODBC connection string value cannot contain NUL")
    if value and not any(c in value for c in ";{}= ") and value == value.strip():
        return value
    return "{" + value.replace("}", "}}") + "}"


def native_errors(exc: BaseException) -> list[int]:
    """The SQL Server error numbers in a pyodbc exception's message, in order."""
    text = " ".join(str(a) for a in exc.args)
    return [int(n) for n in _NATIVE.findall(text)]


def sqlstate(exc: BaseException) -> str:
    """The SQLSTATE pyodbc puts in ``args[0]`` (``""`` when there is none)."""
    first = exc.args[0] if exc.args else ""
    return first if isinstance(first, str) and re.fullmatch(r"[0-9A-Z]{5}", first) else ""


class SqlServerBackend(SqlBackend):
    engine = "sqlserver"
    paramstyle = "qmark"
    error_codes = _ERROR_CODES
    driver_module = "pyodbc"

    def __init__(self, url: DatabaseURL, **kw: Any) -> None:
        self.driver, self.login_timeout_s, self.options = _connect_options(url)
        super().__init__(url, **kw)

    # ---- connecting ---------------------------------------------------------------------

    def connection_string(self) -> str:
        """The ODBC connection string, password included: never log or show it."""
        return self._connection_string(self.url.password)

    def redacted_connection_string(self) -> str:
        """The ODBC connection string with the password replaced by ``***``."""
        return self._connection_string(None if self.url.password is None else "***")

    def _connection_string(self, password: str | None) -> str:
        server = self.url.host or ""
        if self.url.port is not None:
            server += f",{self.url.port}"
        parts = {"DRIVER": self.driver, "SERVER": server}
        if self.url.database:
            parts["DATABASE"] = self.url.database
        if self.url.username is not None:
            parts["UID"] = self.url.username
        if password is not None:
            parts["PWD"] = password
        parts.update(self.options)
        return ";".join(f"{k}={odbc_value(v)}" for k, v in parts.items()) + ";"

    def connect(self) -> Any:
        pyodbc = importlib.import_module("pyodbc")
        try:
            conn = pyodbc.connect(self.connection_string(), autocommit=False,
                                  timeout=self.login_timeout_s)
        except pyodbc.Error as exc:
            state, text = sqlstate(exc), str(exc)
            if state == "IM002" or "Can't open lib" in text:
                raise DriverMissingError(
                    f"the ODBC driver {self.driver!r} is not installed (installed: "
                    f"{', '.join(pyodbc.drivers()) or 'none'}); install Microsoft's "
                    f"'{DEFAULT_DRIVER}', or FreeTDS (tdsodbc) and add ?driver=FreeTDS "
                    "to the URL") from None
            raise
        return self.set_up_session(conn, lambda cur: self.execute(cur, "session_setup"))

    def classify(self, exc: BaseException) -> ErrorKind:
        if type(exc).__module__ != "pyodbc":
            return ErrorKind.OTHER
        kind = self.kind_of(*native_errors(exc), sqlstate(exc))
        text = str(exc).lower()
        if kind is None and ("communication link failure" in text or "closed connection" in text
                             or "connection has been closed" in text):
            kind = ErrorKind.CONNECTION
        return kind or ErrorKind.OTHER

    @contextmanager
    def migration_lock(self, cur: Any) -> Iterator[None]:
        self.execute(cur, "migration_lock")
        yield

    # ---- enqueue ------------------------------------------------------------------------

    def insert_job(self, cur: Any, params: dict[str, Any]) -> EnqueueResult | None:
        try:
            return super().insert_job(cur, params)
        except Exception as exc:
            # a duplicate key despite the UPDLOCK, HOLDLOCK probe (e.g. the caller's
            # session runs at SNAPSHOT): fine while the caller's transaction survives
            if params.get("key") is None or self.classify(exc) is not ErrorKind.UNIQUE:
                raise
            if self.execute(cur, "transaction_state").fetchone()[0] != 1:
                raise
            return None


def _connect_options(url: DatabaseURL) -> tuple[str, int, dict[str, str]]:
    """Driver name, login timeout and extra connection-string keywords from the URL query."""
    driver, timeout = DEFAULT_DRIVER, DEFAULT_LOGIN_TIMEOUT_S
    options: dict[str, str] = {}
    for key, value in url.query.items():
        lower = key.lower()
        if lower == "driver":
            driver = value.strip("{}")
        elif lower in ("login_timeout", "timeout"):
            try:
                timeout = int(value)
            except ValueError:
                raise ConfigurationError(
                    f"{key} must be a whole number of seconds, got {value!r}") from None
        elif lower in _RESERVED:
            raise ConfigurationError(
                f"give {key} in the URL itself (mssql://user:password@host:port/database), "
                "not as a query option")
        elif not _KEY.match(key):
            raise ConfigurationError(f"invalid ODBC connection option name {key!r}")
        else:
            options[_KEYWORDS.get(lower, key)] = value
    if not driver:
        raise ConfigurationError("?driver= names no ODBC driver")
    return driver, timeout, options
