"""SQLite: one writer at a time. Claims take the write lock up front with BEGIN IMMEDIATE.

Connections run with ``isolation_level=None`` so that portq, not the sqlite3 module,
decides where transactions start. WAL mode lets readers proceed during a claim;
``busy_timeout`` waits for the lock, and a BEGIN that still gets SQLITE_BUSY is retried
with bounded, jittered backoff (:meth:`SqlBackend.run`).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

from portq.backends.base import ErrorKind, SqlBackend, utc_from_micros
from portq.errors import ConfigurationError
from portq.url import DatabaseURL

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: sqlite3.OperationalError carries no specific code for these (SQLITE_ERROR): message
#: fragments, lower-cased, by kind
_MESSAGES: dict[ErrorKind, tuple[str, ...]] = {
    ErrorKind.RETRYABLE: ("locked", "busy"),
    ErrorKind.CONNECTION: ("disk i/o", "unable to open"),
    ErrorKind.UNDEFINED_TABLE: ("no such table",),
}


class SqliteBackend(SqlBackend):
    engine = "sqlite"
    paramstyle = "named"
    driver_module = "sqlite3"
    max_retries = 3  # each attempt already waits up to busy_timeout_ms for the lock

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

    def begin(self, conn: Any, write: bool) -> None:
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")

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
