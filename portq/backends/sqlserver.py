"""SQL Server 2019+ and Azure SQL: pyodbc (Microsoft's ODBC Driver 18, or FreeTDS) or
Microsoft's mssql-python (its own bundled driver: no system ODBC install).

The claim is one statement: an ordered ``TOP (n)`` CTE read ``WITH (UPDLOCK, READPAST,
ROWLOCK, READCOMMITTEDLOCK)`` and an ``UPDATE`` through it with ``OUTPUT inserted.*``
(``dialects/sqlserver/queries.sql`` explains each hint). READCOMMITTEDLOCK keeps the claim
correct on databases with READ_COMMITTED_SNAPSHOT ON (Azure SQL's default), where READPAST
would otherwise be refused (error 650). Idempotent enqueue is ``INSERT ... SELECT ... WHERE
NOT EXISTS (...)``, which locks only the key it inserts; a key taken by a concurrent
transaction raises 2627/2601, which rolls back that statement only (XACT_ABORT OFF) and is
caught.

Connections portq opens run in ODBC manual-commit mode at READ COMMITTED with
``XACT_ABORT OFF``. The driver is imported only to connect, so this module (its connection
string builder and error mapping) loads without the ODBC libraries.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cache
from typing import Any

from portq.backends.contract import ErrorKind
from portq.backends.sql import SqlBackend
from portq.backends.sql.common import _scrub
from portq.errors import (
    ConfigurationError,
    DatabaseError,
    DriverMissingError,
    PortqError,
    SchemaError,
)
from portq.job import EnqueueResult
from portq.sql import bind
from portq.url import DatabaseURL

DEFAULT_DRIVER = "ODBC Driver 18 for SQL Server"
DEFAULT_LOGIN_TIMEOUT_S = 10
#: ``?driver=`` values (and the ``mssql+mssqlpython://`` scheme) that select mssql-python
MSSQL_PYTHON = frozenset({"mssql-python", "mssql_python", "mssqlpython"})
#: what mssql-python's bundled ODBC driver needs from the system (Debian/Ubuntu names)
MSSQL_PYTHON_LIBRARIES = ("libltdl7", "libkrb5-3", "libgssapi-krb5-2")
#: ODBC's SQL_ATTR_LOGIN_TIMEOUT (sql.h): mssql-python takes the login timeout only as this
#: connection attribute (its connect(timeout=) was a per-statement query timeout before
#: mssql-python 1.x's fix of issue #725)
SQL_ATTR_LOGIN_TIMEOUT = 103
#: ODBC's SQL_WVARCHAR (sqlext.h): with column size 0 pyodbc sends the parameter as
#: nvarchar(max) instead of the legacy ntext it picks for long text
SQL_WVARCHAR = -9
#: pyodbc binds a str of more UTF-16 code units than this as SQL_WLONGVARCHAR (ntext): its
#: length in bytes exceeds the 4000 the driver reports as nvarchar's column size
PYODBC_NTEXT_AFTER = 2000
#: OPENJSON (complete_many, renew_many) needs database compatibility level 130 or higher
MIN_COMPATIBILITY_LEVEL = 130

# A failed login or an unusable account: ErrorKind.LOGIN, raised as portq.LoginFailed
# ("cannot log in to URL: ...", never a raw driver error); 4060 is UNKNOWN_DATABASE.
_LOGIN_CODES: frozenset[object] = frozenset({
    18456,      # Login failed for user
    18452,      # login from an untrusted domain (Windows authentication)
    18486, 18487, 18488,  # account locked out, password expired, must change password
    "28000",    # SQLSTATE: invalid authorization specification (a failed login)
})
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
        "HYT00",    # timeout expired (portq sets no query timeout: the login timed out)
        "HYT01",    # connection timeout expired
    }),
    ErrorKind.LOGIN: frozenset(_LOGIN_CODES),
    ErrorKind.UNKNOWN_DATABASE: frozenset({4060}),  # cannot open database requested by login
    ErrorKind.UNDEFINED_TABLE: frozenset({208}),    # invalid object name
}
# "... message text. (2627) (SQLExecDirectW)": the native error precedes the ODBC call name
_NATIVE = re.compile(r"\((-?\d+)\)\s*\(SQL[A-Za-z]+\)")
# mssql-python does not report the native error number: the server's (English) message
# texts of the errors portq tells apart within one SQLSTATE
_NATIVE_TEXTS: tuple[tuple[re.Pattern[str], int], ...] = tuple(
    (re.compile(text, re.I), number) for text, number in (
        (r"Violation of (UNIQUE KEY|PRIMARY KEY) constraint", 2627),
        (r"Cannot insert duplicate key row", 2601),
        (r"conflicted with the (CHECK|FOREIGN KEY|REFERENCE) constraint", 547),
        (r"Cannot insert the value NULL into column", 515),
        (r"was deadlocked on lock", 1205),
        (r"Lock request time out period exceeded", 1222),
        (r"Snapshot isolation transaction aborted due to update conflict", 3960),
        (r"Login failed for user", 18456),
        (r"Cannot open database", 4060),
        (r"Invalid object name", 208),
    ))
# mssql-python keeps no SQLSTATE on its exceptions, only the description its
# sqlstate_to_exception() gives each one: the SQLSTATEs portq maps, found by that text
_MSSQL_PYTHON_STATES = ("23000", "40001", "28000", "HYT00", "HYT01", "08S01", "08001",
                        "08003", "08004", "08007")
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


def _message(exc: BaseException) -> str:
    return " ".join(str(a) for a in exc.args)


def native_errors(exc: BaseException) -> list[int]:
    """The SQL Server error numbers in a driver exception's message, in order: pyodbc's
    ``(2627) (SQLExecDirectW)`` suffixes, else the known message texts (mssql-python)."""
    text = _message(exc)
    found = [int(n) for n in _NATIVE.findall(text)]
    return found or [number for pattern, number in _NATIVE_TEXTS if pattern.search(text)]


def sqlstate(exc: BaseException) -> str:
    """The SQLSTATE of a pyodbc (``args[0]``) or mssql-python exception (``""`` if none)."""
    first = exc.args[0] if exc.args else ""
    if isinstance(first, str) and re.fullmatch(r"[0-9A-Z]{5}", first):
        return first
    described = getattr(exc, "driver_error", None)
    if isinstance(described, str) and type(exc).__module__.startswith("mssql_python"):
        return _mssql_python_states().get(described, "")
    return ""


@cache
def _mssql_python_states() -> dict[str, str]:
    """mssql-python's description of each SQLSTATE in ``_MSSQL_PYTHON_STATES`` -> the code."""
    exceptions = importlib.import_module("mssql_python.exceptions")
    out: dict[str, str] = {}
    for state in _MSSQL_PYTHON_STATES:
        made = exceptions.sqlstate_to_exception(state, "")
        if made is not None:
            out.setdefault(made.driver_error, state)
    return out


def dbapi_module(url: DatabaseURL) -> str:
    """The DB-API module a SQL Server URL asks for: ``mssql_python`` for
    ``mssql+mssqlpython://`` or ``?driver=mssql-python``, else ``pyodbc``."""
    if url.driver == "mssqlpython":
        return "mssql_python"
    for key, value in url.query.items():
        if key.lower() == "driver" and value.strip("{}").lower() in MSSQL_PYTHON:
            return "mssql_python"
    return "pyodbc"


def drain(cur: Any) -> list[Any]:
    """Read every result of the batch just executed, in order, and return the rows of the
    last result set. pyodbc (and mssql-python) report results after the first only through
    ``nextset()``, and an error raised later in a batch only when it is reached."""
    rows: list[Any] = []
    while True:
        if cur.description is not None:
            rows = list(cur.fetchall())
        if not cur.nextset():
            return rows


class SqlServerBackend(SqlBackend):
    engine = "sqlserver"
    paramstyle = "qmark"
    error_codes = _ERROR_CODES
    driver_module = "pyodbc"

    def __init__(self, url: DatabaseURL, **kw: Any) -> None:
        self.dbapi = dbapi_module(url)
        self.driver, self.login_timeout_s, self.options = _connect_options(url)
        super().__init__(url, **kw)

    def execute(self, cur: Any, name_or_sql: str, params: dict[str, Any] | None = None) -> Any:
        """Run a statement; on pyodbc, text longer than :data:`PYODBC_NTEXT_AFTER` UTF-16
        code units goes as nvarchar(max) (:func:`long_text_sizes`), never as ntext."""
        bound = bind(self.queries.get(name_or_sql, name_or_sql), params or {}, self.paramstyle)
        if self.dbapi == "pyodbc":
            cur.setinputsizes(long_text_sizes(bound.params))  # None clears the last ones
        cur.execute(bound.sql, bound.params)
        return cur

    def to_db_time(self, value: datetime) -> Any:
        """ISO 8601 text with microseconds, read by ``CAST(... AS DATETIME2(6))``: exact
        whatever a driver does with a datetime parameter's fraction."""
        return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds")

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
        # mssql-python names its bundled driver itself and refuses a DRIVER keyword
        parts = {"SERVER": server} if self.dbapi == "mssql_python" else \
            {"DRIVER": self.driver, "SERVER": server}
        if self.url.database:
            parts["DATABASE"] = self.url.database
        if self.url.username is not None:
            parts["UID"] = self.url.username
        if password is not None:
            parts["PWD"] = password
        parts.update(self.options)
        return ";".join(f"{k}={odbc_value(v)}" for k, v in parts.items()) + ";"

    def accepts_connection(self, conn: Any) -> bool:
        return type(conn).__module__.split(".")[0] == self.dbapi

    def connect(self) -> Any:
        from portq.backends import import_driver
        module = import_driver(self.engine, self.dbapi)
        try:
            conn = module.connect(self.connection_string(), autocommit=False,
                                  **self.login_timeout_kwargs())
        except Exception as exc:
            self._raise_setup_error(module, exc)
            raise
        return self.set_up_session(conn, lambda cur: self.execute(cur, "session_setup"))

    def login_timeout_kwargs(self) -> dict[str, Any]:
        """How the login timeout reaches the driver: pyodbc's ``timeout=`` is the login
        timeout; mssql-python's was a per-statement query timeout (which cancelled the
        migration lock's 60 s wait, long prunes and blocked claims after 10 s), so there it
        is the connection attribute SQL_ATTR_LOGIN_TIMEOUT, which every version honours."""
        if self.dbapi == "mssql_python":
            return {"attrs_before": {SQL_ATTR_LOGIN_TIMEOUT: self.login_timeout_s}}
        return {"timeout": self.login_timeout_s}

    def _raise_setup_error(self, module: Any, exc: Exception) -> None:
        """A missing driver or a bad connection option as one clear portq error."""
        state, text = sqlstate(exc), _message(exc)
        if self.dbapi == "mssql_python":
            if type(exc).__name__ == "ConnectionStringParseError":
                raise ConfigurationError(
                    "mssql-python refused the connection options: "
                    f"{_scrub(text, self.url)}") from None
            if "Failed to load the driver" in text:
                raise DriverMissingError(
                    "mssql-python could not load its bundled ODBC driver: it needs the "
                    f"system libraries {', '.join(MSSQL_PYTHON_LIBRARIES)} (Debian/Ubuntu: "
                    f"apt-get install {' '.join(MSSQL_PYTHON_LIBRARIES)})") from None
            return
        if state == "IM002" or "Can't open lib" in text:
            raise DriverMissingError(
                f"the ODBC driver {self.driver!r} is not installed (installed: "
                f"{', '.join(module.drivers()) or 'none'}); install Microsoft's "
                f"'{DEFAULT_DRIVER}', or FreeTDS (tdsodbc) and add ?driver=FreeTDS "
                "to the URL, or use Microsoft's mssql-python (?driver=mssql-python)") from None

    def classify(self, exc: BaseException) -> ErrorKind:
        if type(exc).__module__.split(".")[0] not in ("pyodbc", "mssql_python"):
            return ErrorKind.OTHER
        kind = self.kind_of(*native_errors(exc), sqlstate(exc))
        text = str(exc).lower()
        if kind is None and ("communication link failure" in text or "closed connection" in text
                             or "connection has been closed" in text):
            kind = ErrorKind.CONNECTION
        if kind is ErrorKind.CONNECTION and self.statement_timeout_ms is not None and \
                sqlstate(exc) == "HYT00" and "login" not in text:
            kind = ErrorKind.TIMEOUT   # the query timeout of limit_statements expired
        return kind or ErrorKind.OTHER

    def translate(self, op: str, exc: BaseException, kind: ErrorKind, *,
                  connecting: bool = False, attempts: int = 1) -> PortqError | None:
        # below compatibility level 130 OPENJSON is "Invalid object name" (208), which is
        # not a missing portq table
        if kind is ErrorKind.UNDEFINED_TABLE and "openjson" in _message(exc).lower():
            return SchemaError(f"{op}: {self.url.redacted()} does not know OPENJSON: "
                               f"{COMPATIBILITY_HINT.format(name=self.url.database)}")
        return super().translate(op, exc, kind, connecting=connecting, attempts=attempts)

    def check_compatibility(self, cur: Any) -> None:
        """Raise :class:`SchemaError` when the database's compatibility level is below
        :data:`MIN_COMPATIBILITY_LEVEL` (a database restored from an older server)."""
        level, name = self.execute(cur, "compatibility_level").fetchone()
        if int(level) < MIN_COMPATIBILITY_LEVEL:
            raise SchemaError(
                f"database {name!r} on {self.url.redacted()} has compatibility level {level}; "
                f"{COMPATIBILITY_HINT.format(name=name)}")

    def migrate(self) -> int:
        self.run("migrate", self.check_compatibility, retry=False, write=False)
        return super().migrate()

    def check_schema(self) -> None:
        super().check_schema()
        self.run("check_schema", self.check_compatibility, retry=False, write=False)

    def limit_statements(self, conn: Any, ms: int | None) -> None:
        """The connection's query timeout (pyodbc and mssql-python: ``Connection.timeout``,
        whole seconds, SQLSTATE HYT00 when it expires) and ``SET LOCK_TIMEOUT`` in ms (an
        int literal: the statement takes no parameter; error 1222 when it expires). None:
        timeout 0 and LOCK_TIMEOUT -1 (wait for ever, the default)."""
        conn.timeout = 0 if ms is None else max(1, -(-ms // 1000))
        lock = -1 if ms is None else int(ms)
        self.set_up_session(conn, lambda cur: cur.execute(f"SET LOCK_TIMEOUT {lock:d}"))

    @contextmanager
    def migration_lock(self, cur: Any) -> Iterator[None]:
        rows = drain(self.execute(cur, "migration_lock"))
        code = int(rows[0][0]) if rows and rows[0][0] is not None else -999
        if code < 0:
            meaning = {-1: "timed out after 60 s (another migrate() holds it)", -2: "was "
                       "cancelled", -3: "was chosen as a deadlock victim"}.get(
                           code, "failed (a parameter or call error)")
            raise DatabaseError(f"migrate: the migration lock on {self.url.redacted()} "
                                f"{meaning}: sp_getapplock returned {code}")
        yield

    # ---- enqueue ------------------------------------------------------------------------

    def insert_job(self, cur: Any, params: dict[str, Any]) -> EnqueueResult | None:
        try:
            return super().insert_job(cur, params)
        except Exception as exc:
            # a concurrent transaction inserted the key after the NOT EXISTS probe: only
            # this statement is rolled back while XACT_ABORT is OFF (the default)
            if params.get("key") is None or self.classify(exc) is not ErrorKind.UNIQUE:
                raise
            self.check_committable(cur, exc, f"job key {params['key']!r}")
            return None

    def ensure_row(self, cur: Any, name: str, params: dict[str, Any]) -> None:
        """``unique_ensure`` / ``ensure_queue``: insert unless present; a concurrent first
        insert of the same key raises 2627, which rolled back this statement only."""
        try:
            self.execute(cur, name, params)
        except Exception as exc:
            if self.classify(exc) is not ErrorKind.UNIQUE:
                raise
            self.check_committable(cur, exc, "a scoped job key" if name == "unique_ensure"
                                   else f"the row of queue {params.get('queue')!r}")

    def check_committable(self, cur: Any, exc: Exception, what: str) -> None:
        """After a duplicate key: the transaction goes on only while XACT_STATE() = 1
        (XACT_ABORT OFF, portq's own sessions); on a caller's XACT_ABORT ON connection SQL
        Server rolled the whole transaction back, which is one clear error."""
        if self.execute(cur, "transaction_state").fetchone()[0] != 1:
            raise DatabaseError(
                f"enqueue: {what} was taken by a concurrent transaction, and SQL Server "
                "rolled back the calling transaction because its connection has "
                "XACT_ABORT ON; run the transaction again, or enqueue keyed jobs on a "
                "connection with XACT_ABORT OFF") from exc


COMPATIBILITY_HINT = (f"portq needs compatibility level {MIN_COMPATIBILITY_LEVEL} or higher "
                      "(SQL Server 2016+) for OPENJSON: ALTER DATABASE [{name}] SET "
                      f"COMPATIBILITY_LEVEL = {MIN_COMPATIBILITY_LEVEL}")


def long_text_sizes(params: Sequence[Any] | Mapping[str, Any]) -> list[Any] | None:
    """pyodbc ``setinputsizes`` for ``params``: ``(SQL_WVARCHAR, 0, 0)`` (nvarchar(max)) for
    each str of more than :data:`PYODBC_NTEXT_AFTER` UTF-16 code units, None (pyodbc's own
    choice) for the rest; None when there is no such str. pyodbc would send those as ntext,
    which databases whose default collation is ``_SC`` or ``_UTF8`` refuse (error 4189)."""
    if isinstance(params, Mapping):
        return None  # positional (qmark) parameters only
    sizes = [(SQL_WVARCHAR, 0, 0) if isinstance(p, str) and utf16_units(p) > PYODBC_NTEXT_AFTER
             else None for p in params]
    return sizes if any(sizes) else None


def utf16_units(text: str) -> int:
    """The length of ``text`` in UTF-16 code units (a character outside the BMP is two)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


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
