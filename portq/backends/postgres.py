"""PostgreSQL (psycopg 3): the claim is one UPDATE ... FROM (SELECT ... FOR UPDATE SKIP
LOCKED) RETURNING statement; idempotent enqueue is INSERT ... ON CONFLICT DO NOTHING."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from portq.backends.base import ErrorKind, SqlBackend

_RETRYABLE = {"40P01", "40001", "55P03"}   # deadlock, serialization failure, lock not available


class PostgresBackend(SqlBackend):
    engine = "postgres"
    paramstyle = "pyformat"
    driver_module = "psycopg"

    def connect(self) -> Any:
        kw: dict[str, Any] = {k: v for k, v in {
            "host": self.url.host, "port": self.url.port, "user": self.url.username,
            "password": self.url.password, "dbname": self.url.database}.items()
            if v is not None}
        kw.update(self.url.query)
        kw.setdefault("connect_timeout", 10)
        kw.setdefault("application_name", "portq")
        return psycopg.connect(autocommit=False, **kw)

    def classify(self, exc: BaseException) -> ErrorKind:
        if not isinstance(exc, psycopg.Error):
            return ErrorKind.OTHER
        state = exc.sqlstate or ""
        if state == "23505":
            return ErrorKind.UNIQUE
        if state in ("23514", "23502"):
            return ErrorKind.CHECK
        if state in _RETRYABLE:
            return ErrorKind.RETRYABLE
        if (state.startswith("08") or state in ("57P01", "57P02", "57P03")
                or isinstance(exc, psycopg.OperationalError) and not state):
            return ErrorKind.CONNECTION
        return ErrorKind.OTHER

    @contextmanager
    def migration_lock(self, cur: Any) -> Iterator[None]:
        self.execute(cur, "migration_lock")
        yield

    def notify(self, cur: Any, queue: str) -> None:
        """Wake idle workers of ``queue`` (LISTEN portq_<queue>) when the transaction commits."""
        self.execute(cur, "notify", {"queue": queue})
