"""How :class:`portq.aio.AsyncQueue` runs one sync operation without blocking the loop.

Each operation is written once, synchronously (:class:`portq.Queue` over
:mod:`portq.backends.sql`). A :class:`Runner` runs it for the event loop:

- :class:`BridgeRunner`, where the backend opens a driver's asyncio connection
  (``native_async``: psycopg on PostgreSQL): the operation runs in a greenlet on the
  loop's own thread (:mod:`portq.aio_bridge`), its transactions on a pool of the runner's
  own ``AsyncConnection``\\ s (:class:`BridgedPool`), each driver call and each retry's
  sleep awaited;
- :class:`ThreadRunner` elsewhere: the operation runs on a bounded pool of threads, on
  the backend's own connections.

Either way the operation is the sync one: the same statements, round trips and retries
(transient conflicts; once, a connection lost before COMMIT), and the caller's context
variables (a trace's span) go with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from portq.aio_bridge import BridgedConnection, await_, run_sync
from portq.backends.sql import SqlBackend
from portq.errors import DatabaseError
from portq.pool import FULL_HOLD_S, close_quietly, context_pool, server_full

T = TypeVar("T")
log = logging.getLogger("portq.pool")


class Runner(Protocol):
    """Runs a sync operation for an event loop; what :class:`portq.aio.AsyncQueue` uses."""

    async def call(self, fn: Callable[..., T], /, *args: Any, **kw: Any) -> T:
        """``fn(*args, **kw)``, awaited, in a copy of the caller's context."""
        ...

    async def close(self) -> None:
        """Wait for running calls, then free the runner's threads or connections."""
        ...


def runner_for(backend: SqlBackend) -> Runner:
    """The backend's runner: :class:`BridgeRunner` where it is ``native_async`` (and the
    greenlet package is installed), else :class:`ThreadRunner`."""
    if backend.native_async:
        try:
            import greenlet  # noqa: F401 - the bridge's one dependency
        except ImportError:
            pass
        else:
            return BridgeRunner(backend)
    return ThreadRunner(backend.pool_size)


class ThreadRunner:
    """Each call on one of at most ``size`` threads (started when first used)."""

    def __init__(self, size: int) -> None:
        self._threads = ThreadPoolExecutor(max_workers=max(1, size),
                                           thread_name_prefix="portq-aio")

    async def call(self, fn: Callable[..., T], /, *args: Any, **kw: Any) -> T:
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(
            self._threads, functools.partial(context.run, fn, *args, **kw))

    async def close(self) -> None:
        await asyncio.to_thread(self._threads.shutdown, True)


class BridgeRunner:
    """Each call in a greenlet on the loop's thread, its transactions on the runner's
    :class:`BridgedPool`."""

    def __init__(self, backend: SqlBackend) -> None:
        self.pool = BridgedPool(backend, backend.pool_size, backend.pool.timeout)
        self._running: set[asyncio.Future[Any]] = set()

    async def call(self, fn: Callable[..., T], /, *args: Any, **kw: Any) -> T:
        if self.pool.closed:
            raise DatabaseError("connection pool is closed")
        task: asyncio.Future[T] = asyncio.ensure_future(
            run_sync(self._inside, functools.partial(fn, *args, **kw)))
        self._running.add(task)
        try:
            return await task
        finally:
            self._running.discard(task)

    def _inside(self, op: Callable[[], T]) -> T:
        context_pool.set(self.pool)  # in the greenlet's own copy of the context
        return op()

    async def close(self) -> None:
        await asyncio.gather(*self._running, return_exceptions=True)
        await self.pool.close()


class BridgedPool:
    """The async runner's connections: at most ``max_size`` psycopg ``AsyncConnection``\\ s
    (each a :class:`portq.aio_bridge.BridgedConnection`), reused LIFO; a broken one is
    closed with every idle one (as :class:`portq.pool.Pool` does). :meth:`acquire` and
    :meth:`release` are called by the sync operation inside the bridge: waiting for a free
    connection, opening one (with the backend's session setup: statement timeout, server
    identity check) and closing one are awaited on the loop. A server at its connection
    limit makes an operation wait for one of this pool's connections, as there."""

    def __init__(self, backend: SqlBackend, max_size: int, timeout: float) -> None:
        self.backend = backend
        self.max_size = max_size
        self._timeout = timeout
        self._slots = asyncio.Semaphore(max_size)
        self._loop: asyncio.AbstractEventLoop | None = None  # the one _slots waits on
        self._in_use = 0
        self._idle: list[BridgedConnection] = []
        self._timeouts: dict[int, int | None] = {}  # id(conn) -> its statement timeout
        self.size = 0  # connections open now (idle or handed out)
        self.closed = False
        # the server refused a connection for being full: until _full_until no more than
        # _full_size are tried; operations wait in _waiters for one to be released
        self._full_until, self._full_size, self._full_said = 0.0, 0, False
        self._waiters: list[asyncio.Future[BridgedConnection | None]] = []

    def acquire(self) -> BridgedConnection:
        """A connection, waiting (awaited) up to the pool timeout for a free one."""
        if self.closed:
            raise DatabaseError("connection pool is closed")
        try:
            await_(asyncio.wait_for(self._slots_of_this_loop().acquire(), self._timeout))
        except TimeoutError:
            raise DatabaseError(f"no free database connection after {self._timeout:.0f}s "
                                f"(async pool max_size={self.max_size})") from None
        self._in_use += 1
        try:
            return self._take()
        except BaseException:
            self._give_slot()
            raise

    def _slots_of_this_loop(self) -> asyncio.Semaphore:
        """The slots, waited on in the running loop: a queue used by one loop after
        another (``asyncio.run`` twice) gets slots of the new loop for those not in use."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop
            self._slots = asyncio.Semaphore(self.max_size - self._in_use)
        return self._slots

    def _give_slot(self) -> None:
        self._in_use -= 1
        self._slots.release()

    def _take(self) -> BridgedConnection:
        """An idle connection, else a new one; where the server refused one for being
        full and others of ours are open, the next one released (as :class:`Pool`)."""
        while True:
            if self._idle:
                return self._ready(self._idle.pop())
            if not self._held_full():
                try:
                    opened: BridgedConnection = self.backend.open_connection(self._connect)
                except BaseException as exc:
                    if not self._refused_for_full(exc):
                        raise
                else:
                    self.size += 1
                    self._timeouts[id(opened)] = self.backend.statement_timeout_ms
                    return opened
            handed = self._wait_for_release()
            if handed is not None:
                return self._ready(handed)

    def _ready(self, conn: BridgedConnection) -> BridgedConnection:
        """``conn`` with the backend's statement timeout (``bound_statements`` may have
        changed it since it was opened)."""
        wanted = self.backend.statement_timeout_ms
        if self._timeouts.get(id(conn)) != wanted:
            try:
                self.backend.limit_statements(conn, wanted)
            except BaseException:
                self._discard([conn])
                raise
            self._timeouts[id(conn)] = wanted
        return conn

    def _refused_for_full(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the server refusing a connection for having as many as it
        allows while this pool holds some: then no new one is tried for FULL_HOLD_S."""
        if self.size == 0 or self.closed or not server_full(exc):
            return False
        self._full_until, self._full_size = time.monotonic() + FULL_HOLD_S, self.size
        if not self._full_said:
            self._full_said = True
            log.warning("pool.server_full size=%d: the server refused another connection "
                        "(%s); this async pool waits for one of its %d for %.0fs",
                        self.size + 1, type(exc).__name__, self.size, FULL_HOLD_S)
        return True

    def _held_full(self) -> bool:
        return self.size >= self._full_size and time.monotonic() < self._full_until

    def _wait_for_release(self) -> BridgedConnection | None:
        """The next connection released (None: one was closed, try opening one)."""
        waiter: asyncio.Future[BridgedConnection | None] = \
            asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await_(asyncio.wait_for(waiter, self._timeout))
        except TimeoutError:
            raise DatabaseError(f"no free database connection after {self._timeout:.0f}s "
                                f"(async pool max_size={self.max_size}, server full)"
                                ) from None
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.result() is not None:
                self._hand_over(waiter.result())  # handed over as this one gave up
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _hand_over(self, conn: BridgedConnection | None) -> None:
        """Give ``conn`` to the first operation waiting for one, else keep it idle."""
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(conn)
                return
        if conn is not None:
            self._idle.append(conn)

    def _connect(self) -> BridgedConnection:
        return BridgedConnection(await_(self.backend.connect_async()))

    def release(self, conn: Any, broken: bool = False) -> None:
        """Return ``conn``; a ``broken`` one is closed together with every idle one."""
        self._give_slot()
        if broken or self.closed:
            dead = [conn]
            if broken:
                dead, self._idle = dead + self._idle, []
            self._discard(dead)
            self._hand_over(None)  # room for a new one: a waiter may open it
        else:
            self._hand_over(conn)

    def _discard(self, conns: list[Any]) -> None:
        self.size -= len(conns)
        for conn in conns:
            self._timeouts.pop(id(conn), None)
            close_quietly(conn)

    async def close(self) -> None:
        """Close the idle connections; one in use is closed when it is released."""
        self.closed = True
        idle, self._idle = self._idle, []
        self.size -= len(idle)
        for conn in idle:
            self._timeouts.pop(id(conn), None)
            with contextlib.suppress(Exception):  # already dead
                await conn.aclose()
