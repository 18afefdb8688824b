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

The runner also calls the middleware chain around the handler
(:mod:`portq.runtime.middleware`: the queue's, the worker's, the job's task's), and gives
each job its progress sink (:class:`portq.runtime.progress.ProgressWriter`) while its
handler runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from portq.errors import ConfigurationError
from portq.job import Job
from portq.runtime.execution import LATE_FOR_RATE_LIMIT, LateStart, past_rate_guard
from portq.runtime.middleware import Middleware, Step, step_of, steps_of
from portq.runtime.progress import ProgressWriter

if TYPE_CHECKING:
    from portq.protocol import Backend
    from portq.queue import Queue


class HandlerRunner:
    """Calls ``handler`` from either worker; raises :class:`ConfigurationError` for an
    object that cannot be a handler (not callable, or a generator function, whose body a
    call would never run)."""

    def __init__(self, handler: Callable[[Job], Any],
                 middleware: Iterable[Middleware] | None = None, *,
                 queue: Queue[Backend] | None = None) -> None:
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
        #: the worker's middleware (``middleware=[...]``, then :meth:`use`)
        self.middleware: tuple[Step, ...] = steps_of(middleware, "middleware")
        self._queue = queue
        self._for_task: Callable[[Job], tuple[Step, ...]] | None = \
            getattr(handler, "middleware_for", None)
        #: writes the jobs' progress reports (None without a queue: reports are kept only)
        self.progress = None if queue is None else ProgressWriter(queue.backend)

    def use(self, middleware: Middleware) -> None:
        """Add ``middleware`` innermost of the worker's own (jobs that start from now on)."""
        self.middleware = (*self.middleware, step_of(middleware, "middleware"))

    def chain(self, job: Job) -> tuple[Step, ...]:
        """The middleware around ``job``'s handler, outermost first: the queue's, the
        worker's, the job's task's."""
        chain = self.middleware
        if self._queue is not None and self._queue.middleware:
            chain = self._queue.middleware + chain
        if self._for_task is not None:
            chain = chain + self._for_task(job)
        return chain

    def _attach(self, job: Job) -> None:
        if self.progress is not None:
            job._progress.sink = self.progress.report

    def _detach(self, job: Job) -> None:
        slot = job._progress
        if slot.sink is not None:
            slot.sink = None
            if slot.last is not None and self.progress is not None:  # it reported
                self.progress.finished(job)

    # ---- from a thread (portq.Worker) ---------------------------------------------------

    def run(self, job: Job) -> Any:
        """Run the chain and the handler to their end on this thread (on this thread's
        event loop for what is async); return the result or raise what was raised."""
        self._attach(job)
        try:
            if self.middleware or self._for_task is not None or \
                    (self._queue is not None and self._queue.middleware):
                return self._step(self.chain(job), 0, job)
            return self._call(job)
        finally:
            self._detach(job)

    def _call(self, job: Job) -> Any:
        result = self.handler(job)
        if result is not None and inspect.isawaitable(result):
            return self._runner().run(_cancellable(result, job),
                                      context=contextvars.copy_context())
        return result

    def _step(self, chain: tuple[Step, ...], i: int, job: Job) -> Any:
        """Middleware ``i`` of ``chain`` on this thread (an async one, and the rest of the
        chain after it, on this thread's event loop)."""
        if i == len(chain):
            return self._call(job)
        step = chain[i]
        if step.is_async:
            return self._runner().run(self._astep(chain, i, job, False),
                                      context=contextvars.copy_context())
        return step.fn(job, functools.partial(self._step, chain, i + 1, job))

    async def _astep(self, chain: tuple[Step, ...], i: int, job: Job, on_loop: bool) -> Any:
        """Middleware ``i`` of ``chain`` on the running loop (``on_loop``: the asyncio
        front's; else a handler thread's own). A plain middleware runs on one of
        :class:`HandlerThreads`; its ``call_next()`` runs the rest back on this loop and
        waits for it."""
        if i == len(chain):
            if on_loop:
                return await self._call_async(job, first=False)
            result = self.handler(job)  # this thread's own loop: blocking it is fine
            return await _cancellable(result, job) if inspect.isawaitable(result) else result
        step = chain[i]
        rest = functools.partial(self._astep, chain, i + 1, job, on_loop)
        if step.afn is not None:
            return await step.afn(job, rest)
        if step.is_async:
            return await step.fn(job, rest)
        loop = asyncio.get_running_loop()

        def call_next() -> Any:
            return asyncio.run_coroutine_threadsafe(rest(), loop).result()
        return await self._threads.run(lambda j: step.fn(j, call_next), job,
                                       first=on_loop and i == 0)

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
        """Await the chain and the handler in the calling task (see :meth:`_call_async`)."""
        self._attach(job)
        try:
            chain = self.chain(job)
            return await (self._astep(chain, 0, job, True) if chain else
                          self._call_async(job, first=True))
        finally:
            self._detach(job)

    async def _call_async(self, job: Job, first: bool) -> Any:
        """Await the handler in the calling task (a plain one runs on one of this
        runner's threads meanwhile, :class:`HandlerThreads`, and is awaited to its end;
        ``first``: no middleware ran before it).
        When the worker learns that an operator cancelled ``job`` while it awaits the
        handler's awaitable, the calling task is cancelled: the handler, and this call,
        raise :class:`asyncio.CancelledError`; that cancel is taken back (``uncancel``)
        before this returns or raises, so that the caller's ``task.cancelling()`` counts
        only the cancels of others (its shutdown)."""
        result = self.handler(job) if self.is_async else \
            await self._threads.run(self.handler, job, first=first)
        if not inspect.isawaitable(result):
            return result
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("run_async must be awaited in an asyncio task")
        awaiting = _AwaitingHandler(task)
        job._cancel.on_cancel(awaiting)
        try:
            return await result
        finally:
            awaiting.awaiting = False
            if awaiting.cancelled:
                task.uncancel()


class _AwaitingHandler:
    """A task (or future) awaiting a handler's awaitable, as ``job``'s cancel callback:
    called on any thread, it cancels the task on its loop if it still awaits then, and
    notes that it did (``cancelled``). One object per job (a closure with its state and
    two partials cost a tenth of a short job)."""

    __slots__ = ("awaiting", "cancelled", "task")

    def __init__(self, task: asyncio.Future[Any]) -> None:
        self.task, self.awaiting, self.cancelled = task, True, False

    def __call__(self) -> None:
        if not self.task.done():
            call_soon(self.task.get_loop(), self._cancel)

    def _cancel(self) -> None:  # on the loop
        if self.awaiting and not self.task.done():
            self.cancelled = True
            self.task.cancel()


async def _cancellable(awaitable: Awaitable[Any], job: Job) -> Any:
    """Await ``awaitable`` as a task of its own that is cancelled when ``job`` is (an
    operator's cancel, learned by the worker from any thread): the awaiting code then
    gets :class:`asyncio.CancelledError`."""
    task = asyncio.ensure_future(awaitable)
    job._cancel.on_cancel(_AwaitingHandler(task))
    return await task


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

    async def run(self, fn: Callable[[Job], Any], job: Job, *, first: bool = False) -> Any:
        """``fn(job)`` on one of the threads (with this task's context variables).
        ``first``: ``fn`` is the job's first code; if the job's ``start_by`` (a rate
        limit's guard) passed while the call waited for a thread, it raises
        :class:`LateStart` instead of calling ``fn`` (the job is given back unstarted)."""
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
                if first and past_rate_guard(job, time.monotonic()):
                    raise LateStart(LATE_FOR_RATE_LIMIT)
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
