"""MySQL 8.0.16+ and MariaDB 10.6+ (InnoDB, PyMySQL).

Neither engine has ``UPDATE ... RETURNING``, so a claim is three statements in one short
READ COMMITTED transaction: lock ids with ``FOR UPDATE SKIP LOCKED``, update them, read
them back (``dialects/mysql/queries.sql``). Idempotent enqueue is a plain ``INSERT``:
a taken key raises 1062, which rolls back only that statement (the caller's transaction
goes on), and the existing id is read with a locking read; ``created`` is decided by the
insert itself.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pymysql
from pymysql.charset import charset_by_name
from pymysql.constants import CLIENT

from portq.backends.contract import ErrorKind
from portq.backends.sql import SqlBackend
from portq.errors import ConfigurationError, DatabaseError
from portq.job import EnqueueResult, ServerInfo
from portq.protocol import NewJob
from portq.sql import bind, split_statements
from portq.url import DatabaseURL, connect_kwargs

_ERROR_CODES: dict[ErrorKind, frozenset[object]] = {
    ErrorKind.UNIQUE: frozenset({1062, 1586}),  # ER_DUP_ENTRY, ER_DUP_ENTRY_WITH_KEY_NAME
    # check violation (MySQL 3819, MariaDB 4025), NOT NULL, invalid JSON (MySQL)
    ErrorKind.CHECK: frozenset({3819, 4025, 1048, 3140}),
    # deadlock, lock wait timeout, NOWAIT lock not available
    ErrorKind.RETRYABLE: frozenset({1213, 1205, 3572}),
    ErrorKind.CONNECTION: frozenset({
        2002, 2003, 2006, 2013, 2055,   # client: cannot connect, gone away, lost connection
        1040, 1053,                     # too many connections, server shutdown in progress
        1927, 4031,                     # connection killed (MariaDB), idle disconnect (MySQL)
    }),
    # access denied (user/password), access denied to the database
    ErrorKind.LOGIN: frozenset({1045, 1044}),
    ErrorKind.UNKNOWN_DATABASE: frozenset({1049}),   # ER_BAD_DB_ERROR
    ErrorKind.UNDEFINED_TABLE: frozenset({1146}),    # ER_NO_SUCH_TABLE
    # MariaDB ER_STATEMENT_TIMEOUT (max_statement_time), MySQL ER_QUERY_TIMEOUT
    # (max_execution_time)
    ErrorKind.TIMEOUT: frozenset({1969, 3024}),
}
#: most jobs in one multi-row INSERT (each row binds 7 values, escaped by the client)
BULK_ROWS = 1000
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
# URL query options passed to pymysql.connect, converted to the type it expects.
_INT_OPTIONS = {"connect_timeout", "read_timeout", "write_timeout", "max_allowed_packet"}
_BOOL_OPTIONS = {"ssl_verify_cert", "ssl_verify_identity", "ssl_disabled"}
_STR_OPTIONS = {"charset", "collation", "unix_socket", "ssl_ca", "ssl_cert", "ssl_key",
                "program_name"}
# Run on every connection portq opens: no gap locks for the claim's locking read, a UTC
# session (DATETIME values are UTC) and strict mode (never truncate a value silently).
INIT_COMMAND = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
SESSION_SETUP = ("SET time_zone = '+00:00', "
                 "sql_mode = CONCAT_WS(',', NULLIF(@@sql_mode, ''), 'STRICT_TRANS_TABLES')")


class MysqlBackend(SqlBackend):
    engine = "mysql"
    paramstyle = "pyformat"
    error_codes = _ERROR_CODES
    driver_module = "pymysql"
    #: seconds migrate() waits for another process's migration to finish
    migration_lock_timeout_s = 60

    def __init__(self, url: DatabaseURL, **kw: Any) -> None:
        self.connect_options = _connect_options(url)
        super().__init__(url, **kw)
        # multi-statement operations (see queries.sql): name -> statements, in order
        self.steps = {name: split_statements(sql) for name, sql in self.queries.items()}
        # insert_jobs_bulk as (INSERT head, one VALUES row with %s placeholders, the
        # parameter names in placeholder order): rows are repeated and bound positionally
        head, row = self.queries["insert_jobs_bulk"].rstrip().rstrip(";").split("VALUES", 1)
        one = bind(row, {name: name for name in _NAMED.findall(row)}, "qmark")
        self._bulk_row = (head, one.sql.strip().replace("?", "%s"), list(one.params))
        self._server_is_mariadb: bool | None = None

    def connect(self) -> Any:
        conn = pymysql.connect(**self.connect_options)
        _keepalive(conn)
        return self.set_up_session(conn, lambda cur: cur.execute(SESSION_SETUP))

    def limit_statements(self, conn: Any, ms: int | None) -> None:
        """MariaDB: ``max_statement_time`` (seconds, every statement); MySQL:
        ``max_execution_time`` (milliseconds, read-only SELECTs only); both:
        ``innodb_lock_wait_timeout`` (whole seconds) for lock waits. None: 0 (no limit)
        and the server's lock wait default."""
        limit = 0 if ms is None else int(ms)
        lock_wait = "DEFAULT" if ms is None else f"{max(1, -(-limit // 1000)):d}"

        def setup(cur: Any) -> None:
            if self.is_mariadb(cur):
                cur.execute(f"SET SESSION max_statement_time = {limit / 1000:.3f}")
            else:
                cur.execute(f"SET SESSION max_execution_time = {limit:d}")
            cur.execute(f"SET SESSION innodb_lock_wait_timeout = {lock_wait}")
        self.set_up_session(conn, setup)

    def classify(self, exc: BaseException) -> ErrorKind:
        # the package's own names, bound when it was imported: its connections raise
        # those classes. ``pymysql.err`` can name a second copy of the module: Django
        # with PyMySQL installed as MySQLdb imports ``MySQLdb.err``, which loads err.py
        # again and sets the package's ``err`` attribute to it
        if isinstance(exc, pymysql.InterfaceError):
            return ErrorKind.CONNECTION      # e.g. (0, '') on a closed connection
        if not isinstance(exc, pymysql.MySQLError):
            return ErrorKind.OTHER
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        kind = self.kind_of(code)
        if kind is None and code == 0 and isinstance(exc, pymysql.OperationalError):
            kind = ErrorKind.CONNECTION
        return kind or ErrorKind.OTHER

    @contextmanager
    def migration_lock(self, cur: Any) -> Iterator[None]:
        acquire, release = self.steps["migration_lock"]
        row = self.execute(cur, acquire, {"timeout_s": self.migration_lock_timeout_s}).fetchone()
        if not row or row[0] != 1:
            raise DatabaseError(f"migrate: another portq migration of {self.url.redacted()} "
                                f"held the lock for {self.migration_lock_timeout_s}s")
        try:
            yield
            cur.connection.commit()  # commit the recorded version before another may look
        finally:
            self.execute(cur, release).fetchall()

    def run_ddl(self, cur: Any, statement: str) -> None:
        """Run one migration statement; an ``ALTER TABLE`` that meets a column or index
        it adds (1060 duplicate column, 1061 duplicate key name) was applied whole by a run
        cut short (one ALTER is atomic on InnoDB): skip it."""
        try:
            cur.execute(statement)
        except pymysql.MySQLError as exc:
            if not (exc.args and exc.args[0] in (1060, 1061)
                    and statement.lstrip().upper().startswith("ALTER TABLE")):
                raise

    def insert_jobs(self, cur: Any, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Runs of jobs without a key go in one multi-row INSERT each (up to
        ``BULK_ROWS``); a keyed job is one ``INSERT`` (:meth:`insert_job`: the new id,
        or the existing one when the key is taken). Ids come back in the order given."""
        results: list[EnqueueResult] = []
        start = 0
        while start < len(jobs):
            end = start
            while end < len(jobs) and jobs[end].key is None and end - start < BULK_ROWS:
                end += 1
            if end - start >= 2:
                results += self._insert_unkeyed(cur, jobs[start:end])
            else:
                end = start + 1
                results += super().insert_jobs(cur, jobs[start:end])
            start = end
        return results

    def _insert_unkeyed(self, cur: Any, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """One INSERT of ``jobs`` (none has a key); their ids, in order. Auto-increment
        values are assigned row by row as a statement inserts, so they ascend in VALUES
        order: MariaDB returns them (RETURNING), MySQL has the first and the step."""
        head, row, order = self._bulk_row
        values: list[Any] = []
        for job in jobs:
            params = self.job_params(job)
            values += [params[name] for name in order]
        sql = f"{head}VALUES {', '.join([row] * len(jobs))}"
        if self.is_mariadb(cur):
            cur.execute(sql + " RETURNING job_id", values)
            ids = sorted(int(r[0]) for r in cur.fetchall())
        else:
            mode, step = self.execute(cur, "autoinc_settings").fetchone()
            if int(mode) not in (0, 1):  # interleaved: one statement's ids may have gaps
                return super().insert_jobs(cur, jobs)
            cur.execute(sql, values)
            ids = [int(cur.lastrowid) + i * int(step) for i in range(len(jobs))]
        if len(ids) != len(jobs):
            raise DatabaseError(f"inserted {len(jobs)} jobs but got {len(ids)} ids back")
        return [EnqueueResult(job_id, True) for job_id in ids]

    def is_mariadb(self, cur: Any) -> bool:
        """True when the connection of ``cur`` talks to MariaDB (not MySQL): PyMySQL's
        connection says; an adapter's cursor (SQLAlchemy async) is asked once per backend."""
        conn = getattr(cur, "connection", None)
        if conn is not None and hasattr(conn, "get_server_info"):
            return "mariadb" in str(conn.get_server_info()).lower()
        if self._server_is_mariadb is None:
            version = self.execute(cur, "server_version").fetchone()[0]
            self._server_is_mariadb = "mariadb" in str(version).lower()
        return self._server_is_mariadb

    def accepts_connection(self, conn: Any) -> bool:
        """PyMySQL's connections, and mysqlclient's (``MySQLdb``: Django's MySQL driver),
        whose cursors take the same ``%(name)s`` parameters."""
        return type(conn).__module__.split(".")[0] in ("pymysql", "MySQLdb")

    def insert_job(self, cur: Any, params: dict[str, Any]) -> EnqueueResult:
        """Insert one job; ``created`` is True exactly when this INSERT made the row. A key
        already taken raises 1062 (only the statement is rolled back): the existing id is
        then read with a locking read (it sees the committed row whatever the caller's
        snapshot). Never decided by a read before the insert: two enqueuers of a new key
        would both see nothing and both report created (8 processes x 300 keys on
        MariaDB 10.11: 244 keys twice)."""
        try:
            self.execute(cur, "insert_job", params)
        except Exception as exc:
            if params.get("key") is None or not is_duplicate_key(exc):
                raise
            # the failed insert holds a shared lock on the key's index entry: the row
            # cannot be deleted before this read
            row = self.execute(cur, "job_id_by_key_locked", {"key": params["key"]}).fetchone()
            if row is None:
                raise DatabaseError(
                    f"job key {params['key']!r} conflicted but no job holds it") from exc
            return EnqueueResult(int(row[0]), False)
        return EnqueueResult(int(cur.lastrowid), True)

    def server_info(self) -> ServerInfo:
        # @@transaction_isolation exists on MySQL 8 and MariaDB 11.1+; @@tx_isolation on
        # MariaDB before 11.1 (MySQL 8 removed it)
        try:
            return super().server_info()
        except pymysql.OperationalError:
            version, isolation = self.run("server_info", lambda cur: self.execute(
                cur, "server_info_tx").fetchone(), write=False)
            return self.make_server_info(version, isolation)

    def claim_rows(self, cur: Any, params: dict[str, Any], name: str = "claim"
                   ) -> list[Sequence[Any]]:
        lock, update, read = self.steps[name]
        ids = self._lock_ids(cur, lock, params)
        if not ids:
            return []
        self.execute(cur, update, {**params, "ids": ids})
        return list(self.execute(cur, read, {"ids": ids}).fetchall())

    def fenced_rows(self, cur: Any, op: str, params: dict[str, Any]) -> set[tuple[int, int]]:
        """Two statements for any number of claims (no UPDATE ... RETURNING here): lock the
        rows the claims still own, then update exactly those while the locks hold (and,
        after ``complete_many``, release the dependents of those with ``has_dependents``)."""
        lock, update = self.steps[op]
        rows = self.execute(cur, lock, params).fetchall()
        owned = {(int(r[0]), int(r[1])) for r in rows}
        if owned:
            self.execute(cur, update, {**params, "ids": tuple(sorted(i for i, _ in owned))})
            self.completed_dependencies(cur, [int(r[0]) for r in rows if len(r) > 2 and r[2]])
        return owned

    def reap_rows(self, cur: Any, params: dict[str, Any]) -> int:
        lock, update = self.steps["reap"]
        ids = self._lock_ids(cur, lock, params)
        return int(self.execute(cur, update, {**params, "ids": ids}).rowcount) if ids else 0

    def prune_rows(self, cur: Any, params: dict[str, Any]) -> int:
        return self.batch_rows(cur, "prune", params)

    def batch_rows(self, cur: Any, name: str, params: dict[str, Any]) -> int:
        """Lock a bounded batch of ids (first step), then change those rows (second)."""
        return self._locked_change(cur, name, params)[1]

    def batch_ids(self, cur: Any, name: str, params: dict[str, Any]) -> list[int]:
        """:meth:`batch_rows`, returning the ids locked and changed."""
        return list(self._locked_change(cur, name, params)[0])

    def dependents_update(self, cur: Any, name: str, params: dict[str, Any]) -> None:
        """Lock the dependents' ids through the edge index (an UPDATE ... WHERE job_id IN
        (subquery) walks the whole job table here), then update those rows."""
        self._locked_change(cur, name, params)

    def _locked_change(self, cur: Any, name: str, params: dict[str, Any]
                       ) -> tuple[tuple[int, ...], int]:
        """Run two-step statement ``name``: lock ids, then change those rows; the ids and
        the rows changed."""
        lock, change = self.steps[name]
        ids = self._lock_ids(cur, lock, params)
        if not ids:
            return ids, 0
        return ids, int(self.execute(cur, change, {**params, "ids": ids}).rowcount)

    def _lock_ids(self, cur: Any, sql: str, params: dict[str, Any]) -> tuple[int, ...]:
        return tuple(int(row[0]) for row in self.execute(cur, sql, params).fetchall())


#: ER_DUP_ENTRY, ER_DUP_ENTRY_WITH_KEY_NAME
DUPLICATE_KEY_CODES = (1062, 1586)


def is_duplicate_key(exc: BaseException) -> bool:
    """A duplicate-key error from any MySQL driver portq writes through: PyMySQL (and
    aiomysql, which raises PyMySQL's errors), mysqlclient (``MySQLdb``, Django's driver) and
    asyncmy all raise an ``IntegrityError`` whose ``args[0]`` is the server's error number."""
    return type(exc).__name__ == "IntegrityError" and bool(exc.args) and \
        exc.args[0] in DUPLICATE_KEY_CODES


def _keepalive(conn: Any) -> None:
    """TCP keepalives on a PyMySQL connection's socket (PyMySQL has no option for them):
    the first probe after 30 s idle, then every 10 s, dead after 3 unanswered, so that a
    server that vanished is noticed within about a minute. A Unix socket has none."""
    sock = getattr(conn, "_sock", None)
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):  # Linux; macOS names the first TCP_KEEPALIVE
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def _connect_options(url: DatabaseURL) -> dict[str, Any]:
    """pymysql.connect keyword arguments for ``url``; unknown URL options are an error."""
    kw: dict[str, Any] = connect_kwargs(url)
    for name, value in url.query.items():
        if name in _INT_OPTIONS:
            try:
                kw[name] = int(value)
            except ValueError:
                raise ConfigurationError(
                    f"MySQL URL option {name}={value!r} must be an integer") from None
        elif name in _BOOL_OPTIONS:
            if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ConfigurationError(
                    f"MySQL URL option {name}={value!r} must be true or false")
            kw[name] = value.lower() in ("1", "true", "yes")
        elif name in _STR_OPTIONS:
            if name == "charset" and charset_by_name(value) is None:
                raise ConfigurationError(f"MySQL URL option charset={value!r} is not a "
                                         "character set PyMySQL knows (e.g. utf8mb4)")
            if name in ("ssl_ca", "ssl_cert", "ssl_key") and not os.path.isfile(value):
                raise ConfigurationError(f"MySQL URL option {name}={value!r}: no such file")
            kw[name] = value
        else:
            known = sorted(_INT_OPTIONS | _BOOL_OPTIONS | _STR_OPTIONS)
            raise ConfigurationError(
                f"unknown MySQL URL option {name!r}; portq accepts {', '.join(known)}")
    kw.setdefault("charset", "utf8mb4")
    kw.setdefault("connect_timeout", 10)
    kw.update(autocommit=False, init_command=INIT_COMMAND,
              # rowcount = rows matched, not rows changed (as on every other engine)
              client_flag=CLIENT.FOUND_ROWS)
    return kw
