"""Running one sync operation on an asyncio driver connection, through greenlets.

portq writes each operation once, synchronously (:mod:`portq.backends.sql`). A caller's
psycopg ``AsyncConnection`` cannot be used from another thread, so :func:`run_sync` runs
the sync operation in a greenlet on the event loop's own thread, and
:class:`BridgedConnection` makes the async connection look like a DB-API one to it: each
driver call switches back to the loop, which awaits the coroutine and switches the result
in (the technique of SQLAlchemy's asyncio extension). Nothing blocks the loop but the
Python between two awaits.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from portq.errors import ConfigurationError

T = TypeVar("T")


def _greenlet() -> Any:
    try:
        import greenlet
    except ImportError:
        raise ConfigurationError(
            "writing through a psycopg AsyncConnection needs the greenlet package: "
            "pip install 'portq[postgres]'") from None
    return greenlet


class _Await:
    """What the bridged greenlet hands the loop: an awaitable to await for it."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self.awaitable = awaitable


def await_(awaitable: Awaitable[T]) -> T:
    """Inside :func:`run_sync`: the result of ``awaitable``, awaited on the event loop."""
    current = _greenlet().getcurrent()
    if not getattr(current, "portq_bridge", False):
        raise RuntimeError("await_ called outside portq.aio_bridge.run_sync")
    result: T = current.parent.switch(_Await(awaitable))
    return result


def in_bridge() -> bool:
    """True inside :func:`run_sync` (its greenlet is the current one)."""
    greenlet = sys.modules.get("greenlet")  # never imported: no bridge is running
    return greenlet is not None and getattr(greenlet.getcurrent(), "portq_bridge", False)


def pause(seconds: float) -> None:
    """Wait ``seconds``: inside :func:`run_sync` an awaited ``asyncio.sleep`` (the loop
    runs other tasks meanwhile), elsewhere ``time.sleep``."""
    if in_bridge():
        await_(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


async def run_sync(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a greenlet of this thread, awaiting each :func:`await_` it makes;
    the caller's context variables (a trace's span) are ``fn``'s."""
    child = _greenlet().greenlet(fn)
    child.portq_bridge = True
    child.gr_context = contextvars.copy_context()
    step = child.switch(*args)
    while not child.dead:
        try:
            value = await step.awaitable
        except BaseException as exc:  # noqa: BLE001 - raised inside fn, where it waits
            step = child.throw(exc)
        else:
            step = child.switch(value)
    result: T = step
    return result


class BridgedCursor:
    """A DB-API cursor over a psycopg ``AsyncCursor`` (inside :func:`run_sync`)."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def execute(self, sql: Any, params: Any = None) -> BridgedCursor:
        await_(self._cursor.execute(sql, params))
        return self

    def fetchone(self) -> Any:
        return await_(self._cursor.fetchone())

    def fetchall(self) -> list[Any]:
        rows: list[Any] = await_(self._cursor.fetchall())
        return rows

    def close(self) -> None:
        await_(self._cursor.close())

    def __enter__(self) -> BridgedCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def rowcount(self) -> int:
        return int(self._cursor.rowcount)

    def __getattr__(self, name: str) -> Any:  # adapters, description, ...
        value = getattr(self._cursor, name)
        if inspect.iscoroutinefunction(value):  # would return an un-awaited coroutine
            raise AttributeError(f"{name}() is not bridged (the async cursor's is a "
                                 "coroutine)")
        return value


class BridgedConnection:
    """A psycopg ``AsyncConnection`` as the DB-API connection portq's sync operations use
    (inside :func:`run_sync`): a caller's (never committed here) or one of an async
    runner's own (:mod:`portq.aio_runner`)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def cursor(self) -> BridgedCursor:
        return BridgedCursor(self._conn.cursor())

    def commit(self) -> None:
        await_(self._conn.commit())

    def rollback(self) -> None:
        await_(self._conn.rollback())

    def close(self) -> None:
        await_(self._conn.close())

    async def aclose(self) -> None:
        """Close it from a coroutine (outside the bridge)."""
        await self._conn.close()

    @property
    def autocommit(self) -> bool:
        return bool(self._conn.autocommit)

    @autocommit.setter
    def autocommit(self, on: bool) -> None:
        await_(self._conn.set_autocommit(on))

    @property
    def prepare_threshold(self) -> int | None:
        value: int | None = self._conn.prepare_threshold
        return value

    @prepare_threshold.setter
    def prepare_threshold(self, value: int | None) -> None:
        self._conn.prepare_threshold = value

    @property
    def info(self) -> Any:  # backend_pid, ...
        return self._conn.info

    @property
    def closed(self) -> bool:
        return bool(self._conn.closed)


def is_async_psycopg(conn: Any) -> bool:
    """True for a psycopg ``AsyncConnection`` (without importing psycopg)."""
    return any(c.__module__.startswith("psycopg") and c.__name__ == "AsyncConnection"
               for c in type(conn).__mro__)
