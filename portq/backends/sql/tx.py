"""Transactions: named statements, one short transaction on a pooled connection, the
retry policy (transient conflicts; a connection lost before COMMIT), and a caller's
connection."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from portq.aio_bridge import pause
from portq.backends.contract import ErrorKind
from portq.backends.sql.common import T, TxProgress, _scrub, conflict_delay, one_line
from portq.backends.sql.session import SqlSession
from portq.errors import DatabaseError, PortqError, SchemaMissingError
from portq.pool import ConnectionSource, close_quietly, context_pool
from portq.sql import bind

log = logging.getLogger("portq.backend")


class Transactions(SqlSession):
    """Statements and transactions."""

    def execute(self, cur: Any, name_or_sql: str, params: dict[str, Any] | None = None) -> Any:
        """Run a named statement (or raw SQL) with ``:name`` parameters bound for the driver."""
        sql = self.queries.get(name_or_sql, name_or_sql)
        bound = bind(sql, params or {}, self.paramstyle)
        cur.execute(bound.sql, bound.params)
        return cur

    #: True where :meth:`set_autocommit` lets a one-statement operation (``single=True``)
    #: run as one autocommit round trip instead of BEGIN, statement, COMMIT (psycopg sends
    #: BEGIN as a round trip of its own). Only for engines whose every ``single`` operation
    #: is one statement.
    autocommit_single: ClassVar[bool] = False

    def set_autocommit(self, conn: Any, on: bool) -> None:
        """Switch a pooled connection's autocommit (only where ``autocommit_single``)."""
        conn.autocommit = on

    #: True where a pooled connection keeps one cursor for every transaction run on it
    #: (:meth:`pooled_cursor`), instead of a new cursor each: psycopg makes a cursor's
    #: row loaders anew for each cursor, a share of every claim's client CPU
    keeps_cursor: ClassVar[bool] = False

    def pooled_cursor(self, conn: Any) -> Any:
        """A cursor for one transaction on a pooled connection: the connection's kept
        one where :attr:`keeps_cursor` (made on first use, and again once closed), else a
        new one, which :meth:`transaction` closes."""
        if not self.keeps_cursor:
            return conn.cursor()
        cur = getattr(conn, "_portq_cursor", None)
        if cur is None or cur.closed:
            # kept on the connection (psycopg's, or an async runner's bridged one): it
            # goes when the pool drops the connection
            cur = conn._portq_cursor = conn.cursor()
        return cur

    def connections(self) -> ConnectionSource:
        """Where this context's transactions take their connections: the backend's own
        pool, or an async runner's inside its operations (:mod:`portq.aio_runner`)."""
        borrowed = context_pool.get()
        return borrowed if borrowed is not None and borrowed.backend is self else self.pool

    @contextmanager
    def transaction(self, write: bool = True, progress: TxProgress | None = None,
                    commit: bool = True, single: bool = False) -> Iterator[Any]:
        """A cursor in one short transaction on a pooled connection; commit or roll back.
        ``progress.committing`` is set once COMMIT is about to be sent. With
        ``commit=False`` the transaction is always rolled back (plans, measurements).
        With ``single`` (the caller runs one statement) and ``autocommit_single``, the
        statement runs in autocommit mode: it is its own transaction and its own commit,
        so ``progress.committing`` is set before it is sent (a connection lost during it
        leaves the outcome unknown, exactly as one lost during COMMIT)."""
        pool = self.connections()
        conn = pool.acquire()
        broken = False
        auto = single and commit and self.autocommit_single
        try:
            if auto:
                self.set_autocommit(conn, True)
                if progress is not None:
                    progress.committing = True
            else:
                self.begin(conn, write)
            cur = self.pooled_cursor(conn)
            try:
                yield cur
            finally:
                if not self.keeps_cursor:
                    close_quietly(cur)
            if auto:
                return
            if not commit:
                broken = self._rollback(conn, None)
                return
            if progress is not None:
                progress.committing = True
            conn.commit()
        except BaseException as exc:
            broken = self._rollback(conn, exc)
            raise
        finally:
            if auto and not broken:
                try:
                    self.set_autocommit(conn, False)
                except Exception:  # noqa: BLE001 - unusable: replace it
                    broken = True
            pool.release(conn, broken=broken)

    def _rollback(self, conn: Any, exc: BaseException | None) -> bool:
        """Roll back after ``exc``; return True when the connection must be discarded."""
        broken = exc is not None and (not isinstance(exc, Exception)
                                      or self.classify(exc) is ErrorKind.CONNECTION)
        try:
            conn.rollback()
        except Exception:  # noqa: BLE001 - a failed rollback: the connection is unusable
            broken = True
        return broken

    def run(self, op: str, fn: Callable[[Any], T], *, retry: bool = True,
            write: bool = True, single: bool = False) -> T:
        """Run ``fn(cursor)`` in a transaction, retrying transient conflicts a bounded time
        and, once, a connection that died before COMMIT was sent (see :mod:`portq.pool`)."""
        attempt = 0
        reconnected = False
        while True:
            progress = TxProgress()
            try:
                with self.transaction(write, progress, single=single) as cur:
                    return fn(cur)
            except DatabaseError:
                raise
            except Exception as exc:
                kind = self.classify(exc)
                if kind is ErrorKind.CONNECTION and not progress.committing and not reconnected:
                    reconnected = True  # the server rolled it back: safe to run again
                    log.info("%s: connection lost before commit (%s: %s); retrying on a "
                             "new connection", op, type(exc).__name__,
                             one_line(_scrub(str(exc), self.url)))
                    continue
                if kind is ErrorKind.RETRYABLE and retry and attempt < self.max_retries:
                    attempt += 1
                    delay = conflict_delay(attempt)
                    log.debug("%s: transient conflict (%s), retry %d in %.3fs",
                              op, exc, attempt, delay)
                    pause(delay)  # awaited where an async runner runs this
                    continue
                error = self.translate(op, exc, kind, attempts=attempt + 1)
                if error is None:
                    raise
                raise error from exc

    def on_connection(self, conn: Any, fn: Callable[[Any], T]) -> T:
        """``fn(cursor)`` on a caller's connection, in whatever transaction it has open
        (never committed or rolled back here)."""
        cur = self.caller_cursor(conn)
        try:
            return fn(cur)
        except Exception as exc:
            # the caller's transaction: only a missing table becomes portq's error; a
            # deadlock or a lost connection stays the driver's, for the caller to handle
            if not isinstance(exc, PortqError) and \
                    self.classify(exc) is ErrorKind.UNDEFINED_TABLE:
                raise SchemaMissingError(self.missing_schema_message()) from exc
            raise
        finally:
            close_quietly(cur)

    def ensure_row(self, cur: Any, name: str, params: dict[str, Any]) -> None:
        """Run the make-if-missing statement ``name``; a unique violation (Oracle's MERGE
        meeting a concurrent first insert, which rolls back only the statement) means the
        row exists now."""
        try:
            self.execute(cur, name, params)
        except Exception as exc:
            if self.classify(exc) is not ErrorKind.UNIQUE:
                raise

    def caller_cursor(self, conn: Any) -> Any:
        """A cursor on a caller's connection (an engine may undo the caller's type
        adaptations there, so that values read back as on portq's own connections)."""
        return conn.cursor()

    def read(self, op: str, fn: Callable[[Any], T], conn: Any | None = None) -> T:
        """``fn(cursor)`` in a read transaction of portq's own, or with ``conn`` on that
        caller's connection (seeing its open transaction's uncommitted writes)."""
        if conn is None:
            return self.run(op, fn, write=False)
        return self.on_connection(conn, fn)

