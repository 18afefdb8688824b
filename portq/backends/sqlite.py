"""SQLite: one writer at a time. A one-statement operation (the claim, complete_many,
renew_many...) runs as its own autocommit write statement; longer write transactions take
the write lock up front with BEGIN IMMEDIATE.

Connections run with ``isolation_level=None`` so that portq, not the sqlite3 module,
decides where transactions start. WAL mode lets readers proceed during a claim;
``busy_timeout`` waits for the lock, and a BEGIN that still gets SQLITE_BUSY is retried
with bounded, jittered backoff (:meth:`SqlBackend.run`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from portq.backends.contract import ErrorKind
from portq.backends.sql import SqlBackend
from portq.backends.sql.common import EPOCH, utc_from_micros
from portq.errors import ConfigurationError, SchemaError
from portq.url import DatabaseURL

#: sqlite3.OperationalError carries no specific code for these (SQLITE_ERROR): message
#: fragments, lower-cased, by kind
_MESSAGES: dict[ErrorKind, tuple[str, ...]] = {
    ErrorKind.RETRYABLE: ("locked", "busy"),
    ErrorKind.CONNECTION: ("disk i/o", "unable to open"),
    ErrorKind.UNDEFINED_TABLE: ("no such table",),
    ErrorKind.TIMEOUT: ("interrupted",),   # the progress handler of limit_statements
}
#: virtual machine instructions between two looks at a statement's deadline
PROGRESS_STEPS = 10_000


#: how often an idle worker's listener reads ``PRAGMA data_version`` (seconds)
DATA_VERSION_POLL_S = 0.002
#: the longest a worker's listener leaves commits in the WAL before it checkpoints them
#: (seconds): short enough that a checkpoint finds a few hundred pages at most at a
#: worker's pace (claims of 20 wrote 0.6 pages a job), so that the committing thread (the
#: worker's one writer) finds next to nothing left to copy at SQLite's auto-checkpoint of
#: 1,000 pages (:class:`SqliteListener`)
CHECKPOINT_EVERY_S = 0.01


class SqliteBackend(SqlBackend):
    engine = "sqlite"
    paramstyle = "named"
    driver_module = "sqlite3"
    max_retries = 3  # each attempt already waits up to busy_timeout_ms for the lock
    #: the data_version listener wakes idle workers; polling the table stays the fallback
    default_idle_max = 2.0
    #: one write lock per database, waited for in a sleeping busy handler (1, 2, 5, 10 ms…)
    single_writer = True

    def __init__(self, url: DatabaseURL, *, busy_timeout_ms: int = 5000, **kw: Any) -> None:
        unknown = sorted(set(url.query) - {"busy_timeout_ms"})
        if unknown:
            raise ConfigurationError(f"unknown SQLite URL option {unknown[0]!r}; portq "
                                     "accepts busy_timeout_ms")
        try:
            self.busy_timeout_ms = int(url.query.get("busy_timeout_ms", busy_timeout_ms))
        except ValueError:
            raise ConfigurationError(
                f"busy_timeout_ms={url.query['busy_timeout_ms']!r} must be a whole number of "
                "milliseconds") from None
        if self.busy_timeout_ms < 0:
            raise ConfigurationError("busy_timeout_ms must not be negative")
        self.in_memory = url.path == ":memory:"
        if self.in_memory:
            # every connection to :memory: is a different database: share exactly one
            kw["pool_size"] = 1
        super().__init__(url, **kw)

    def connect(self) -> Any:
        conn = sqlite3.connect(self.url.path, timeout=self.busy_timeout_ms / 1000,
                               isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms:d}")
        conn.execute("PRAGMA foreign_keys = ON")
        if not self.in_memory:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def bound_statements(self, ms: int | None) -> None:
        """A worker's bound is not applied here: SQLite runs in the worker's process, a
        lock wait is bounded by ``busy_timeout_ms`` already, and the statement deadline's
        callbacks would cost every statement of the one writer thread. An explicit
        ``statement_timeout_ms`` (``portq.connect``) still applies."""

    def limit_statements(self, conn: Any, ms: int | None) -> None:
        """SQLite has no statement timeout: a trace callback notes when each statement
        starts, and a progress handler interrupts one running longer than ``ms``
        (``sqlite3.OperationalError: interrupted``); None removes both."""
        if ms is None:
            conn.set_trace_callback(None)
            conn.set_progress_handler(None, 0)
            return
        limit = ms / 1000
        started = [time.monotonic()]

        def trace(_sql: str) -> None:
            started[0] = time.monotonic()

        def progress() -> int:
            return int(time.monotonic() - started[0] > limit)
        conn.set_trace_callback(trace)
        conn.set_progress_handler(progress, PROGRESS_STEPS)

    def listener(self, queues: Sequence[str]) -> SqliteListener | None:
        """A listener that learns of other connections' commits from ``PRAGMA
        data_version`` (no table read); none for ``:memory:`` (one connection only)."""
        return None if self.in_memory else SqliteListener(self)

    #: every ``single=True`` operation here is one statement: it runs without BEGIN/COMMIT
    #: (SQLite's autocommit takes the write lock, waiting in busy_timeout, for just it)
    autocommit_single = True

    def set_autocommit(self, conn: Any, on: bool) -> None:
        """Nothing to switch: connections are opened with ``isolation_level=None``, so a
        statement outside BEGIN is its own transaction."""

    def begin(self, conn: Any, write: bool) -> None:
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def run_ddl(self, cur: Any, statement: str) -> None:
        """Run one migration statement; after one that rewrites a table's stored SQL
        (``UPDATE sqlite_master``, migration 12), bump ``schema_version`` so that every
        connection reloads the schema (SQLite's documented writable_schema procedure)."""
        cur.execute(statement)
        if statement.lstrip().upper().startswith("UPDATE SQLITE_MASTER"):
            if cur.rowcount != 1:
                raise SchemaError(f"migrate: {self.prefix}job's stored SQL was not found to "
                                  "widen its state constraints")
            version = int(cur.execute("PRAGMA schema_version").fetchone()[0])
            cur.execute(f"PRAGMA schema_version = {version + 1:d}")
            (sql,) = cur.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND "
                                 "name = ?", (f"{self.prefix}job",)).fetchone()
            if str(sql).count("'waiting'") < 2:
                raise SchemaError(f"migrate: {self.prefix}job's state constraints are not "
                                  "the ones portq created; they were left unchanged")

    def classify(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, sqlite3.IntegrityError):
            text = str(exc).upper()
            return ErrorKind.UNIQUE if "UNIQUE" in text else ErrorKind.CHECK
        if isinstance(exc, sqlite3.OperationalError):
            text = str(exc).lower()
            for kind, fragments in _MESSAGES.items():
                if any(fragment in text for fragment in fragments):
                    return kind
        if isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc).lower():
            return ErrorKind.CONNECTION
        return ErrorKind.OTHER

    def busy_message(self, op: str, detail: str, attempts: int) -> str:
        waited = attempts * self.busy_timeout_ms / 1000
        return (f"{op}: the SQLite database {self.url.path} stayed locked by another "
                f"connection for {waited:g}s ({attempts} attempts of busy_timeout_ms="
                f"{self.busy_timeout_ms}); end the long transaction holding it, or wait "
                f"longer with ?busy_timeout_ms=N in the URL (e.g. sqlite:///"
                f"{self.url.path}?busy_timeout_ms={max(30000, 2 * self.busy_timeout_ms)})")

    def to_db_time(self, value: datetime) -> Any:
        return (value - EPOCH) // timedelta(microseconds=1)

    def from_db_time(self, value: Any) -> datetime | None:
        return None if value is None else utc_from_micros(value)


class SqliteListener:
    """Wakes an idle worker when another connection commits to the database file.

    ``PRAGMA data_version`` changes, on a connection, whenever another connection has
    committed a change since it was last read; reading it touches no table (about 15 us
    here). :meth:`wait` reads it every :data:`DATA_VERSION_POLL_S` on a connection of its
    own (opened on first use): any commit wakes the worker, which then claims (and finds
    nothing when the commit was not a new job). An empty write transaction (a claim that
    found nothing) does not change it.

    It also checkpoints the WAL, after the wake-up and at most every
    :data:`CHECKPOINT_EVERY_S` while commits come (``PRAGMA wal_checkpoint(PASSIVE)``,
    which never waits for a lock): a commit that finds 1,000 pages in the WAL copies them
    into the database file itself, and on a worker that is its one writer thread, which
    then claims nothing meanwhile. Copied here, on this thread (sqlite3 lets go of the GIL
    inside SQLite), that auto-checkpoint finds little or nothing left to copy, and once a
    checkpoint has copied every frame the next write transaction starts the WAL over.
    What a checkpoint cannot copy (a reader holds old pages) stays for the next one or for
    the writers' own auto-checkpoint, as without it."""

    def __init__(self, backend: SqliteBackend) -> None:
        self._backend = backend
        self._conn: sqlite3.Connection | None = None
        self._seen: int | None = None
        #: commits seen since the last checkpoint, and when that one ran (monotonic)
        self._uncopied = False
        self._checkpointed_at = 0.0

    def _version(self) -> int:
        if self._conn is None:
            self._conn = self._backend.connect()
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        try:
            if self._seen is None:
                self._seen = self._version()
            while True:
                if self._uncopied and \
                        time.monotonic() - self._checkpointed_at >= CHECKPOINT_EVERY_S:
                    self._checkpoint()
                version = self._version()
                if version != self._seen:
                    self._seen = version
                    self._uncopied = True
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                time.sleep(min(DATA_VERSION_POLL_S, left))
        except BaseException:
            self.close()
            raise

    def _checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database file (see the class)."""
        assert self._conn is not None
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self._uncopied = False
        self._checkpointed_at = time.monotonic()

    def take_cancelled(self) -> list[tuple[int, int]]:
        return []  # cancellations reach the worker through its heartbeat

    def close(self) -> None:
        conn, self._conn = self._conn, None
        self._seen = None
        self._uncopied = False
        if conn is not None:
            conn.close()
