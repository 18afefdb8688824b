"""A small thread-safe connection pool shared by every backend.

Policy: connections are reused LIFO; at most ``max_size`` exist at once (callers wait,
bounded by ``timeout``); a connection on which the backend saw a connection-level error
is closed and replaced on next use instead of being returned.

Dead connections: there is no ping on checkout (it would cost a round trip on every
operation). Instead, when the backend sees a connection-level error, that connection is
released as broken and every *idle* connection is closed with it: a server restart, a
failover or a network cut kills them all, and a fresh connection costs only a handshake.
:meth:`portq.backends.base.SqlBackend.run` then retries the operation once on a fresh
connection when the error came before ``COMMIT`` was sent, since the server rolled that
transaction back; an error during ``COMMIT`` leaves the outcome unknown and surfaces as
:class:`portq.errors.ConnectionLost` (claims and guarded updates are safe either way: an
unknown claim is recovered by lease expiry, an unknown complete/fail is fenced).
So callers see no error from a connection that died while idle in the pool, and at most
one ``ConnectionLost`` per connection that dies in use.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from portq.errors import DatabaseError


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
        #: brings a connection to the current session settings (:meth:`settings_changed`)
        self.renew: Callable[[Any], None] | None = None
        self._version = 0  # of the session settings
        self._version_of: dict[int, int] = {}  # id(connection) -> the version it has
        self._cond = threading.Condition()
        self._closed = False

    @property
    def max_size(self) -> int:
        return self._max_size

    def resize(self, max_size: int) -> None:
        """Allow up to ``max_size`` connections (used when a worker needs more)."""
        with self._cond:
            self._max_size = max(self._max_size, max_size)
            self._cond.notify_all()

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
                if self._size < self._max_size:
                    self._size += 1
                    conn = None
                    version = self._version
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DatabaseError(
                        f"no free database connection after {self._timeout:.0f}s "
                        f"(pool max_size={self._max_size})")
                self._cond.wait(left)
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
        except BaseException:
            with self._cond:
                self._size -= 1
                self._cond.notify()
            raise
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


def close_quietly(resource: Any) -> None:
    """Close a connection or cursor that may already be dead."""
    with contextlib.suppress(Exception):
        resource.close()
