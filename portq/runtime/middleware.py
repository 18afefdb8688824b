"""Worker middleware: callables wrapped around every handler call, on both fronts.

A middleware is ``mw(job, call_next)``: it sees the :class:`portq.Job` (id, queue,
attempt, payload, ``job.task``), calls ``call_next()`` to run the rest of the chain and
the handler, and gets the handler's result or its exception; it returns the attempt's
result (usually what ``call_next()`` returned) or raises its failure, and may return
without calling ``call_next()`` at all (the handler does not run). An ``async def``
middleware awaits ``await call_next()``. Both kinds work on both fronts
(:class:`portq.Worker`, :class:`portq.aio.AsyncWorker`): an async one on the handler
thread's event loop (``Worker``), a plain one on a thread while the rest of the chain runs
on the loop (``AsyncWorker``: prefer ``async def`` there, it costs no thread hand-off).
An object with both a plain ``__call__`` and an ``async def acall(job, call_next)`` is
called plainly on the thread front and through ``acall`` on the asyncio front.

Order, outermost first: the queue's (:meth:`portq.Queue.add_middleware`, e.g. OpenTelemetry
from :func:`portq.contrib.otel.instrument`), the worker's (``middleware=[...]`` and
:meth:`WorkerFront.use`, e.g. metrics), the task's (``@portq.task(middleware=[...])``).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from portq.errors import ConfigurationError
from portq.job import Job

#: what a plain middleware is given: runs the rest of the chain, returns its result
CallNext = Callable[[], Any]
#: ``def mw(job, call_next) -> result`` or ``async def mw(job, call_next) -> result``
Middleware = Callable[[Job, Callable[[], Any]], Any]
#: what an async middleware is given: ``await call_next()``
AsyncCallNext = Callable[[], Awaitable[Any]]


@dataclass(frozen=True)
class Step:
    """One middleware, its kind decided once."""

    fn: Middleware
    is_async: bool
    #: the async form of a middleware that has both (its ``acall``), else None
    afn: Callable[[Job, AsyncCallNext], Awaitable[Any]] | None = None


def steps_of(middleware: Iterable[Middleware] | None, what: str) -> tuple[Step, ...]:
    """Check ``middleware`` (for ``what``, in errors): a list of callables taking
    ``(job, call_next)``; one that cannot be is a :class:`ConfigurationError` naming it."""
    if middleware is None:
        return ()
    if callable(middleware) or isinstance(middleware, str | bytes) or \
            not isinstance(middleware, Iterable):
        raise ConfigurationError(f"{what} must be a list of middleware, got "
                                 f"{middleware!r}: pass middleware=[mw]")
    return tuple(step_of(mw, what) for mw in middleware)


def step_of(mw: Any, what: str) -> Step:
    name = getattr(mw, "__qualname__", None) or repr(mw)
    if not callable(mw):
        raise ConfigurationError(f"{what}: {name} is not callable; a middleware is "
                                 f"mw(job, call_next)")
    call = getattr(mw, "__call__", None)  # noqa: B004 - async __call__ too
    if inspect.isgeneratorfunction(mw) or inspect.isasyncgenfunction(mw) or \
            inspect.isasyncgenfunction(call):
        raise ConfigurationError(f"{what}: {name} is a generator function; a middleware "
                                 f"returns the result of call_next()")
    try:
        inspect.signature(mw).bind(None, None)
    except TypeError:
        raise ConfigurationError(f"{what}: {name} must take two arguments (job, "
                                 f"call_next)") from None
    except ValueError:  # no signature to read (some builtins): trust it
        pass
    is_async = inspect.iscoroutinefunction(mw) or inspect.iscoroutinefunction(call)
    afn = getattr(mw, "acall", None)
    if afn is not None and (is_async or not inspect.iscoroutinefunction(afn)):
        raise ConfigurationError(f"{what}: {name}.acall must be async def, beside a plain "
                                 f"__call__")
    return Step(mw, is_async, afn)
