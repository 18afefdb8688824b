"""The asyncio front's executor: handler tasks on the caller's event loop serving the
runtime's waiting line (an ``async def`` handler awaited in the task, a plain one on the
threads :class:`portq.handler.HandlerThreads` keeps for it). The runtime's own threads
never run on the loop, and nothing a task does touches the database, so a slow database
never blocks the loop."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

from portq.handler import call_soon
from portq.job import Job

if TYPE_CHECKING:
    from portq.runtime.core import Runtime

#: jobs a handler task runs back to back before it lets other tasks in
JOBS_BEFORE_YIELD = 16


class LoopExecutor:
    """Runs handlers as tasks on ``loop`` (see the module)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, concurrency: int) -> None:
        self.loop, self.concurrency = loop, concurrency
        self._runtime: Runtime | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # job id -> (the attempt, the task running it): a later attempt of the same job may
        # run in the same task, so the attempt is compared before the task is cancelled.
        # Read and written on the loop only (timed_out's cancel runs there): no lock
        self._current: dict[int, tuple[Job, asyncio.Task[None]]] = {}
        self._shutting_down = False
        self._idle: list[asyncio.Future[None]] = []  # wake-ups of the idle handler tasks

    def start(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def jobs_waiting(self) -> None:
        # every claim wakes the loop, even when no task is idle (a busy one takes the
        # next job itself): waking it only for idle tasks cut the wake-ups from 1,512 to
        # 241 a run and measured slower (40 slots of 5 ms jobs, PostgreSQL, medians of 3
        # interleaved rounds: 6,715 jobs/s against 6,930)
        call_soon(self.loop, self._dispatch)

    def _dispatch(self) -> None:
        """On the loop: wake an idle handler task per waiting job, then start new ones
        while jobs wait and fewer than ``concurrency`` exist. A task serves waiting jobs
        one after another and waits idle when none is left (a task per job, or per batch,
        costs more than a short job)."""
        runtime = self._runtime
        assert runtime is not None
        waiting = len(runtime.line)
        while waiting > 0 and self._idle:
            wake = self._idle.pop()
            if not wake.done():
                wake.set_result(None)
                waiting -= 1
        while waiting > 0 and len(self._tasks) < self.concurrency and \
                not self._shutting_down:
            job = runtime.take_job()
            if job is None:
                return
            task = self.loop.create_task(self._serve(job), name="portq-handler")
            self._tasks.add(task)
            waiting -= 1

    async def _serve(self, job: Job | None) -> None:
        runtime = self._runtime
        task = asyncio.current_task()
        assert runtime is not None and task is not None
        ran = 0
        # a job's time, for the look-ahead, runs from when this task was free for it: the
        # time the loop gave other tasks meanwhile counts, so that the look-ahead follows
        # the loop's start rate (a loaded loop starts fewer jobs a second than the
        # handlers' own time says, and jobs claimed for it would wait past their bound)
        free_since = time.perf_counter()
        try:
            while not self._shutting_down:
                if job is None:  # none waits: idle until _dispatch (or shutdown) wakes it
                    wake = self.loop.create_future()
                    self._idle.append(wake)
                    await wake
                    free_since = time.perf_counter()
                else:
                    free_since = await self._run(runtime, task, job, free_since)
                    ran += 1
                    if ran % JOBS_BEFORE_YIELD == 0:
                        await asyncio.sleep(0)
                job = None if self._shutting_down else runtime.take_job()
        finally:
            self._tasks.discard(task)

    async def _run(self, runtime: Runtime, task: asyncio.Task[None], job: Job,
                   free_since: float) -> float:
        """One job, in ``task``: await its handler, hand what happened to the runtime, with
        the time since this task was ``free_since``; return when it is free again. A
        ``CancelledError`` is the handler's own failure unless portq cancelled the task
        (an operator's cancel or a timeout: nothing to write; shutdown: it ends here)."""
        current = self._current
        current[job.id] = (job, task)
        error: BaseException | None = None
        result = None
        try:
            result = await runtime.handler.run_async(job)
        except asyncio.CancelledError as exc:
            if task.cancelling() and self._shutting_down:
                runtime.drop(job)
                raise  # shutdown: the task ends
            if task.cancelling():  # a timeout's cancel: take it back, keep serving
                while task.uncancel():
                    pass
            error = exc
        except BaseException as exc:  # noqa: BLE001 - any is the attempt's failure
            error = exc
        finally:
            if current.get(job.id, (None,))[0] is job:
                del current[job.id]
        done = time.perf_counter()
        runtime.finish(job, error, result, done - free_since)
        return done

    def timed_out(self, job: Job) -> None:
        """Cancel the task awaiting ``job``'s handler, if it still runs that attempt when
        the loop gets to it."""
        def cancel() -> None:
            running = self._current.get(job.id)
            if running is not None and running[0] is job:
                running[1].cancel()
        call_soon(self.loop, cancel)

    def abandon(self, job: Job) -> bool:
        """An async handler that ignores its cancel keeps its slot (a task cannot be
        abandoned without leaking what it holds): nothing is freed."""
        return False

    def cancel_running(self) -> None:
        """Cancel every handler task (shutdown's grace is over)."""
        def cancel_all() -> None:
            self._shutting_down = True
            self._idle.clear()
            for task in list(self._tasks):
                task.cancel()
        call_soon(self.loop, cancel_all)

    def close(self) -> None:
        def closing() -> None:
            self._shutting_down = True
            idle, self._idle = self._idle, []
            for wake in idle:  # the idle tasks end
                if not wake.done():
                    wake.set_result(None)
        call_soon(self.loop, closing)

    async def wait_stopped(self) -> None:
        """Wait (on the loop) until every handler task has ended."""
        while self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
