"""A small thread-safe connection pool shared by every backend.

Policy: connections are reused LIFO; at most ``max_size`` exist at once (callers wait,
bounded by ``timeout``); a connection on which the backend saw a connection-level error
is closed and replaced on next use instead of being returned.

Dead connections: there is no ping on checkout (it would cost a round trip on every
operation). Instead, when the backend sees a connection-level error, that connection is
released as broken and every *idle* connection is closed with it: a server restart, a
failover or a network cut kills them all, and a fresh connection costs only a handshake.
:meth:`portq.backends.sql.tx.Transactions.run` then retries the operation once on a fresh
connection when the error came before ``COMMIT`` was sent, since the server rolled that
transaction back; an error during ``COMMIT`` leaves the outcome unknown and surfaces as
:class:`portq.errors.ConnectionLost` (claims and guarded updates are safe either way: an
unknown claim is recovered by lease expiry, an unknown complete/fail is fenced).
So callers see no error from a connection that died while idle in the pool, and at most
one ``ConnectionLost`` per connection that dies in use.

Size: ``max_size`` bounds the connections one pool (one ``Queue``, so one process's
worker) opens; a worker raises it to what its threads use at once (:meth:`resize`) unless
the size was given (``connect(url, pool_size=N)``: :attr:`Pool.bounded`), which then bounds
them: its threads take turns on the connections (each holds one for one transaction). A
server at its connection limit (PostgreSQL "too many clients", MySQL/MariaDB error 1040, or
a user's limit) refuses a new connection: while this pool holds others, the caller waits
for one of them instead of failing, and the pool stays at the size it had for
:data:`FULL_HOLD_S` seconds (logged once per pool).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol

from portq.errors import DatabaseError

log = logging.getLogger("portq.pool")

#: how long a pool that found the server full stays at the size it had then
FULL_HOLD_S = 30.0
#: what a server at its connection limit says (PostgreSQL 53300, for the server, a role or a
#: database; MySQL/MariaDB 1040 for the server, 1203/1226 for a user's max_user_connections)
_FULL_TEXTS = ("too many clients", "remaining connection slots are reserved",
               "too many connections", "'max_user_connections'")


class ConnectionSource(Protocol):
    """What a backend's transactions take connections from (:class:`Pool`, or an async
    runner's pool: :class:`portq.aio_runner.BridgedPool`)."""

    def acquire(self) -> Any: ...

    def release(self, conn: Any, broken: bool = False) -> None: ...


class BorrowedSource(ConnectionSource, Protocol):
    """A :class:`ConnectionSource` one backend's operations use in one context."""

    @property
    def backend(self) -> object: ...


#: set inside an async runner's operations: its pool, used by its backend's transactions
#: instead of the backend's own :class:`Pool` (see ``Transactions.connections``)
context_pool: ContextVar[BorrowedSource | None] = ContextVar("portq_context_pool",
                                                              default=None)


class Pool:
    """Hands out DB-API connections made by ``connect``; see the module docstring."""

    def __init__(self, connect: Callable[[], Any], max_size: int = 10,
                 timeout: float = 30.0) -> None:
        if max_size < 1:
            raise ValueError("pool max_size must be at least 1")
        self._connect = connect
        self._max_size = max_size
        self._timeout = timeout
        self._idle: list[Any] = []
        self._size = 0
        #: the size was given by the caller: :meth:`resize` does not grow past it
        self.bounded = False
        self._full_until = 0.0  # until then, no connection beyond _full_size is opened
        self._full_size = 0
        self._full_said = False
        #: brings a connection to the current session settings (:meth:`settings_changed`)
        self.renew: Callable[[Any], None] | None = None
        self._version = 0  # of the session settings
        self._version_of: dict[int, int] = {}  # id(connection) -> the version it has
        self._cond = threading.Condition()
        self._closed = False

    @property
    def max_size(self) -> int:
        return self._max_size

    @property
    def timeout(self) -> float:
        """How long :meth:`acquire` waits for a free connection."""
        return self._timeout

    @property
    def size(self) -> int:
        """Connections open now (idle or handed out)."""
        return self._size

    def resize(self, max_size: int) -> int:
        """Allow up to ``max_size`` connections (used when a worker needs more), unless
        the pool is :attr:`bounded`; the size it has now."""
        with self._cond:
            if not self.bounded:
                self._max_size = max(self._max_size, max_size)
                self._cond.notify_all()
            return self._max_size

    def _room_locked(self) -> bool:
        """Whether one more connection may be opened (``_cond`` held)."""
        if self._size >= self._max_size:
            return False
        return self._size < self._full_size or time.monotonic() >= self._full_until

    def acquire(self) -> Any:
        deadline = time.monotonic() + self._timeout
        with self._cond:
            while True:
                if self._closed:
                    raise DatabaseError("connection pool is closed")
                if self._idle:
                    conn = self._idle.pop()
                    version = self._version
                    if self._version_of.get(id(conn)) == version or self.renew is None:
                        return conn
                    break
                if self._room_locked():
                    self._size += 1
                    conn = None
                    version = self._version
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DatabaseError(
                        f"no free database connection after {self._timeout:.0f}s "
                        f"(pool max_size={self._max_size})")
                self._cond.wait(min(left, max(0.01, self._full_until - time.monotonic()))
                                if self._size < self._max_size else left)
        if conn is not None:  # idle, with older session settings: brought up to date
            assert self.renew is not None
            try:
                self.renew(conn)
            except BaseException:
                self.release(conn, broken=True)
                raise
            self._version_of[id(conn)] = version
            return conn
        try:
            conn = self._connect()
        except BaseException as exc:
            with self._cond:
                self._size -= 1
                full = self._size > 0 and not self._closed and server_full(exc)
                if full:  # wait for one of ours instead of failing
                    self._full_until = time.monotonic() + FULL_HOLD_S
                    self._full_size = self._size
                    said, self._full_said = self._full_said, True
                self._cond.notify()
            if not full:
                raise
            if not said:
                log.warning("pool.server_full size=%d: the server refused another connection "
                            "(%s); this pool waits for one of its %d for %.0fs",
                            self._size + 1, type(exc).__name__, self._full_size, FULL_HOLD_S)
            return self.acquire()
        self._version_of[id(conn)] = version  # opened with the settings of then, or later
        return conn

    def release(self, conn: Any, broken: bool = False) -> None:
        """Return ``conn``; a ``broken`` one is closed together with every idle one."""
        dead: list[Any] = []
        with self._cond:
            if broken or self._closed:
                self._size -= 1
                dead.append(conn)
                if broken:
                    dead += self._idle
                    self._size -= len(self._idle)
                    self._idle = []
            else:
                self._idle.append(conn)
            self._cond.notify_all()
        for one in dead:
            self._version_of.pop(id(one), None)
            close_quietly(one)

    def settings_changed(self) -> None:
        """The session settings changed: each connection gets them (:attr:`renew`) when it
        is next handed out, instead of being opened anew."""
        with self._cond:
            self._version += 1

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._size -= len(idle)
            self._cond.notify_all()
        for conn in idle:
            self._version_of.pop(id(conn), None)
            close_quietly(conn)


def server_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a server refusing a connection because it
    has as many as it allows."""
    seen: BaseException | None = exc
    while seen is not None:
        if getattr(seen, "args", None) and seen.args[0] == 1040:  # MySQL ER_CON_COUNT_ERROR
            return True
        if any(text in str(seen).lower() for text in _FULL_TEXTS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def close_quietly(resource: Any) -> None:
    """Close a connection or cursor that may already be dead."""
    with contextlib.suppress(Exception):
        resource.close()
