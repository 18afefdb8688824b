"""How both workers call a handler, whichever kind it is.

A handler is a plain function (``def``) or an async one (``async def``; also a callable
object whose ``__call__`` is async), taking a :class:`portq.Job`. Its kind is decided once,
when the worker is made, so that a handler that cannot run is refused before any job is
claimed. The sync :class:`portq.Worker` runs an async handler on an event loop owned by
the handler thread (an :class:`asyncio.Runner`, kept for the thread's next jobs); the
:class:`portq.aio.AsyncWorker` runs a plain handler on threads kept for it
(:class:`HandlerThreads`), so that it neither blocks the event loop nor takes the threads
portq's own calls run on. A plain function that returns an awaitable (a decorator that
forgot to be async) has it awaited on either worker, so its work is never skipped. The
task that awaits a handler (its own on the sync worker, the job's on the async one) is
cancelled when the worker learns that an operator cancelled its job.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from portq.errors import ConfigurationError
from portq.job import Job


class HandlerRunner:
    """Calls ``handler`` from either worker; raises :class:`ConfigurationError` for an
    object that cannot be a handler (not callable, or a generator function, whose body a
    call would never run)."""

    def __init__(self, handler: Callable[[Job], Any]) -> None:
        name = getattr(handler, "__qualname__", None) or repr(handler)
        if not callable(handler):
            raise ConfigurationError(f"handler {name} is not callable: pass a function "
                                     f"(def or async def) taking a portq.Job")
        call = getattr(handler, "__call__", None)  # noqa: B004 - async __call__ too
        for kind, test in (("an async generator", inspect.isasyncgenfunction),
                           ("a generator", inspect.isgeneratorfunction)):
            if test(handler) or test(call):
                raise ConfigurationError(
                    f"handler {name} is {kind} function: calling it would not run its "
                    f"body; use def or async def without yield")
        self.handler = handler
        #: True for ``async def`` handlers (and objects with an async ``__call__``)
        self.is_async = inspect.iscoroutinefunction(handler) or \
            inspect.iscoroutinefunction(call)
        self._local = threading.local()
        self._threads = HandlerThreads()

    # ---- from a thread (portq.Worker) ---------------------------------------------------

    def run(self, job: Job) -> Any:
        """Run the handler to its end on this thread (on this thread's event loop when it
        is async or returns an awaitable); return its result or raise what it raised."""
        result = self.handler(job)
        if inspect.isawaitable(result):
            return self._runner().run(_cancellable(result, job))
        return result

    def _runner(self) -> asyncio.Runner:
        runner: asyncio.Runner | None = getattr(self._local, "runner", None)
        if runner is None:
            runner = self._local.runner = asyncio.Runner()
        return runner

    def close_thread(self) -> None:
        """Close this thread's event loop, if it has one (its handler thread ends)."""
        runner: asyncio.Runner | None = getattr(self._local, "runner", None)
        if runner is not None:
            self._local.runner = None
            runner.close()

    # ---- from an event loop (portq.aio.AsyncWorker) -------------------------------------

    async def run_async(self, job: Job) -> Any:
        """Await the handler in the calling task (a plain one runs on one of this
        runner's threads meanwhile, :class:`HandlerThreads`, and is awaited to its end).
        When the worker learns that an operator cancelled ``job`` while it awaits the
        handler's awaitable, the calling task is cancelled: the handler, and this call,
        raise :class:`asyncio.CancelledError`; that cancel is taken back (``uncancel``)
        before this returns or raises, so that the caller's ``task.cancelling()`` counts
        only the cancels of others (its shutdown)."""
        result = self.handler(job) if self.is_async else \
            await self._threads.run(self.handler, job)
        if not inspect.isawaitable(result):
            return result
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("run_async must be awaited in an asyncio task")
        state = {"awaiting": True, "cancelled": False}

        def cancel() -> None:  # on the loop
            if state["awaiting"] and not task.done():
                state["cancelled"] = True
                task.cancel()

        job._cancel.on_cancel(functools.partial(call_soon, asyncio.get_running_loop(),
                                                cancel))
        try:
            return await result
        finally:
            state["awaiting"] = False
            if state["cancelled"]:
                task.uncancel()


async def _cancellable(awaitable: Awaitable[Any], job: Job) -> Any:
    """Await ``awaitable`` as a task of its own that is cancelled when ``job`` is (an
    operator's cancel, learned by the worker from any thread): the awaiting code then
    gets :class:`asyncio.CancelledError`."""
    task = asyncio.ensure_future(awaitable)
    job._cancel.on_cancel(functools.partial(_cancel_soon, asyncio.get_running_loop(), task))
    return await task


def _cancel_soon(loop: asyncio.AbstractEventLoop, task: asyncio.Future[Any]) -> None:
    if not task.done():
        call_soon(loop, task.cancel)


def call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], Any]) -> None:
    """``callback()`` on ``loop``'s thread, from any thread (nothing once it closed)."""
    with contextlib.suppress(RuntimeError):  # the loop closed: nothing runs it now
        loop.call_soon_threadsafe(callback)


class HandlerThreads:
    """The threads an async worker runs plain handlers on: daemon threads kept for the
    next jobs (a thread per job costs more than a short job), started as needed, so that
    as many run at once as the worker starts handlers (its ``concurrency``); a thread idle
    for :attr:`IDLE_S` ends. Not ``asyncio.to_thread``: its pool is shared with portq's
    own calls on engines without an async driver (heartbeats included), and its threads
    block interpreter exit while a handler abandoned at shutdown still runs."""

    IDLE_S = 30.0

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[Callable[[], Callable[[], None]]] = \
            queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a call that no submitted call has claimed
        self._started = 0

    async def run(self, fn: Callable[[Job], Any], job: Job) -> Any:
        """``fn(job)`` on one of the threads (with this task's context variables)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        context = contextvars.copy_context()

        def settle(error: BaseException | None, result: Any) -> None:
            if done.done():  # the awaiting task was cancelled (shutdown after the grace)
                return
            if error is None:
                done.set_result(result)
            else:
                done.set_exception(error)

        def call() -> Callable[[], None]:
            try:
                outcome: tuple[BaseException | None, Any] = (None, context.run(fn, job))
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
                outcome = (exc, None)
            return functools.partial(call_soon, loop, functools.partial(settle, *outcome))

        with self._lock:
            spawn = self._idle == 0
            if spawn:
                self._started += 1
                name = f"portq-handler-async-{self._started}"
            else:
                self._idle -= 1  # that thread is this call's
        self._calls.put(call)
        if spawn:
            threading.Thread(target=self._serve, name=name, daemon=True).start()
        return await done

    def _serve(self) -> None:
        while True:
            try:
                call = self._calls.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0 and self._calls.empty():
                        self._idle -= 1  # no call is on its way to this thread: end
                        return
                continue
            deliver = call()
            with self._lock:  # idle before the result is out: the next job may take it
                self._idle += 1
            deliver()
