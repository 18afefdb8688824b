"""asyncio API: :func:`connect` → :class:`AsyncQueue`, and :class:`AsyncWorker`.

Every operation is written once, synchronously (:class:`portq.Queue` over
:mod:`portq.backends.sql`); :class:`AsyncQueue` only delegates, on every engine:

- operations in portq's own transactions go to the backend's runner
  (:mod:`portq.aio_runner`): on PostgreSQL the sync operation runs in a greenlet on the
  loop's thread over a pool of psycopg ``AsyncConnection``\\ s, each driver call awaited;
  elsewhere on a bounded pool of threads. Either way: the same statements, round trips (a
  claim or a completion on PostgreSQL is one autocommit statement), retries of transient
  conflicts and the retry, once, of a connection lost before COMMIT; the caller's context
  variables (a trace's span) go with each call;
- ``enqueue(..., conn=async_conn)`` writes in the caller's open transaction and never
  commits it: a psycopg ``AsyncConnection`` (PostgreSQL) through the same greenlet bridge
  (:mod:`portq.aio_bridge`), a SQLAlchemy ``AsyncSession`` or ``AsyncConnection`` through
  its own (``run_sync``), a sync connection on the caller's thread.

Validation is the sync Queue's, so both APIs accept and refuse exactly the same input::

    q = await portq.aio.connect("postgresql://app@db/shop")
    async with await psycopg.AsyncConnection.connect(...) as conn:
        await conn.execute("INSERT INTO orders ...")
        await q.enqueue("invoices", {"order": 42}, conn=conn)
        await conn.commit()
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from portq import sqla
from portq.aio_bridge import BridgedConnection, is_async_psycopg, run_sync
from portq.aio_runner import Runner, runner_for
from portq.backends.sql import SqlBackend
from portq.errors import ConfigurationError
from portq.handler import call_soon
from portq.job import (
    Claim,
    EnqueueResult,
    Job,
    JobError,
    JobRecord,
    QueueStats,
    State,
    WorkerActivity,
    WorkerInfo,
)
from portq.protocol import NewJob
from portq.queue import Queue, _claim_of
from portq.queue import connect as connect_sync
from portq.runtime.counters import WorkerCounters
from portq.runtime.front import WorkerFront
from portq.runtime.loop import LoopExecutor
from portq.stats import JobStats

log = logging.getLogger("portq.aio")
T = TypeVar("T")
#: an ``async def`` handler, or a plain ``def`` one (run on a thread: see portq.handler)
AsyncHandler = Callable[[Job], Any]


async def connect(url: str, **options: Any) -> AsyncQueue:
    """Open an :class:`AsyncQueue`; options are those of :func:`portq.connect`."""
    queue = await asyncio.to_thread(connect_sync, url, **options)
    aq = AsyncQueue(queue)
    try:
        await aq.open()
    except BaseException:
        await aq.close()
        raise
    return aq


class AsyncQueue:
    """The async counterpart of :class:`portq.Queue`, over the same backend: each method
    runs the sync Queue's operation (see the module's docstring)."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.backend: SqlBackend = queue.backend
        #: runs each operation for the loop (:mod:`portq.aio_runner`); at most as many at
        #: once as the backend's pool has connections
        self.runner: Runner = runner_for(self.backend)

    @property
    def native(self) -> bool:
        """True where a caller's psycopg ``AsyncConnection`` can be written through
        (``enqueue(..., conn=)``: PostgreSQL)."""
        return self.backend.driver_module == "psycopg"

    @property
    def url(self) -> str:
        return self.queue.url

    def __repr__(self) -> str:
        return f"AsyncQueue({self.url!r})"

    async def open(self) -> None:
        """Check that the database answers (a connection is opened and pooled)."""
        await self._call(self.backend.server_info)

    async def close(self, *, queue: bool = True) -> None:
        """Close the runner once its calls end (its threads or its connections); with
        ``queue`` also close the sync Queue (its connections)."""
        await self.runner.close()
        if queue:
            await asyncio.to_thread(self.queue.close)

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """``fn(*args, **kw)`` (a sync operation) by this queue's runner, in a copy of the
        caller's context."""
        return await self.runner.call(fn, *args, **kw)

    # ---- enqueue ------------------------------------------------------------------------

    async def enqueue(self, queue: str, payload: Any = None, *, priority: int = 0,
                      run_at: datetime | None = None, delay: float | None = None,
                      max_attempts: int | None = None, key: str | None = None,
                      conn: Any = None, **unique: Any) -> int:
        """Add one job (see :meth:`portq.Queue.enqueue`, also for the ``unique_*``
        scopes). ``conn`` may be a psycopg ``AsyncConnection`` (PostgreSQL) or a SQLAlchemy
        ``AsyncSession``/``AsyncConnection``, written in its open transaction, or anything
        the sync API accepts (a sqlite3 connection, SQLAlchemy Session), used on this
        thread."""
        return (await self.enqueue_result(queue, payload, priority=priority, run_at=run_at,
                                          delay=delay, max_attempts=max_attempts, key=key,
                                          conn=conn, **unique)).id

    async def enqueue_result(self, queue: str, payload: Any = None, *, priority: int = 0,
                             run_at: datetime | None = None, delay: float | None = None,
                             max_attempts: int | None = None, key: str | None = None,
                             conn: Any = None, **unique: Any) -> EnqueueResult:
        """:meth:`enqueue`, saying also whether a job was created (False: ``key``'s live
        job was there; see :meth:`portq.Queue.enqueue_result`)."""
        job = self.queue.new_job(queue, payload, priority=priority, run_at=run_at,
                                 delay=delay, max_attempts=max_attempts, key=key, **unique)
        return (await self._insert([job], conn))[0]

    async def enqueue_many(self, jobs: Iterable[Mapping[str, Any]], *,
                           conn: Any = None) -> list[int]:
        """Add many jobs in one transaction (or the caller's)."""
        built = self.queue.new_jobs(jobs)
        return [result.id for result in await self._insert(built, conn)] if built else []

    def add_enqueue_hook(self, before: Any = None, after: Any = None) -> None:
        """See :meth:`portq.Queue.add_enqueue_hook` (the hooks are the sync queue's)."""
        self.queue.add_enqueue_hook(before, after)

    def add_middleware(self, middleware: Any) -> None:
        """See :meth:`portq.Queue.add_middleware`."""
        self.queue.add_middleware(middleware)

    async def _insert(self, jobs: list[NewJob], conn: Any) -> list[EnqueueResult]:
        """Insert ``jobs`` with the queue's enqueue hooks (:meth:`portq.Queue.insert_on`),
        in portq's transaction or the caller's."""
        if conn is None:
            results = await self._call(self.queue.insert_on, jobs, None)
        elif sqla.is_async(conn):  # SQLAlchemy AsyncSession / AsyncConnection
            aconn = await sqla.async_connection(conn, self.backend.engine)
            if self.native:  # its psycopg AsyncConnection, through our bridge
                raw = (await aconn.get_raw_connection()).driver_connection
                results = await run_sync(self.queue.insert_on, jobs, BridgedConnection(raw))
            else:  # SQLAlchemy's sync adapter of aiosqlite/aiomysql/asyncmy
                results = await aconn.run_sync(lambda sync_conn: self.queue.insert_on(
                    jobs, sqla.adapted_dbapi(sync_conn)))
        elif is_async_psycopg(conn):
            if not self.native:
                raise ConfigurationError(f"conn is a psycopg AsyncConnection; the "
                                         f"{self.backend.engine} backend cannot use it")
            results = await run_sync(self.queue.insert_on, jobs, BridgedConnection(conn))
        else:  # a sync connection belongs to the caller's thread: use it there
            results = self.queue.insert_on(jobs, self.queue._dbapi(conn))
        return results

    # ---- claiming and fencing -----------------------------------------------------------

    async def claim(self, queue: str, worker_id: str, *, limit: int = 1,
                    lease: float = 30.0) -> list[Job]:
        """Claim up to ``limit`` due jobs of one queue (see :meth:`portq.Queue.claim`)."""
        return await self._call(self.queue.claim, queue, worker_id, limit=limit, lease=lease)

    async def renew(self, job: Job | Claim, lease: float = 30.0) -> bool:
        """Extend the lease; False means the claim no longer owns the job."""
        return await self._call(self.queue.renew, job, lease)

    async def renew_many(self, jobs: Sequence[Job | Claim], lease: float = 30.0) -> list[bool]:
        """Extend several leases in one statement; one result per job, as :meth:`renew`."""
        return await self._call(self.queue.renew_many, jobs, lease)

    async def complete(self, job: Job | Claim) -> bool:
        """Mark succeeded; False means ownership was lost and nothing was written."""
        return await self._call(self.queue.complete, job)

    async def complete_many(self, jobs: Sequence[Job | Claim]) -> list[bool]:
        """Complete several jobs in one statement; one result per job, as :meth:`complete`."""
        return await self._call(self.queue.complete_many, jobs)

    async def release(self, job: Job | Claim) -> bool:
        """Return an unfinished job to ready without spending its attempt."""
        return await self._call(self.queue.release, job)

    async def release_many(self, jobs: Sequence[Job | Claim]) -> list[bool]:
        """:meth:`portq.Queue.release_many` (several give-backs, one transaction)."""
        return await self._call(self.queue.release_many, jobs)

    async def snooze(self, job: Job | Claim, delay: Any) -> bool:
        """:meth:`portq.Queue.snooze` (run again after ``delay``, the attempt given back)."""
        return await self._call(self.queue.snooze, job, delay)

    async def fail(self, job: Job | Claim, error: str, *,
                   retry_in: float | None = None) -> bool:
        """Record a failure; retry after ``retry_in`` seconds, or dead if None or spent."""
        return await self._call(self.queue.fail, job, error, retry_in=retry_in)

    async def set_progress(self, job: Job | Claim, fraction: float | None,
                           message: str = "") -> bool:
        """See :meth:`portq.Queue.set_progress`."""
        return await self._call(self.queue.set_progress, job, fraction, message)

    # ---- results, operators and maintenance ---------------------------------------------

    async def store_result(self, job: Job | Claim, result: Any) -> bool:
        """Store a running job's return value (see :meth:`portq.Queue.store_result`)."""
        return await self._call(self.queue.store_result, job, result)

    async def cancelled(self, jobs: Sequence[Job | Claim]) -> list[bool]:
        """For each job, whether its generation was cancelled (``Backend.cancelled``)."""
        return await self._call(self.backend.cancelled, [_claim_of(j) for j in jobs])

    async def result(self, job_id: int) -> Any:
        """A succeeded job's stored return value (see :meth:`portq.Queue.result`)."""
        return await self._call(self.queue.result, job_id)

    async def migrate(self) -> int:
        return await self._call(self.queue.migrate)

    async def stats(self, queue: str | None = None) -> list[QueueStats]:
        return await self._call(self.queue.stats, queue)

    async def job_stats(self, window: float | timedelta | str = "1h",
                        queue: str | None = None) -> list[JobStats]:
        """See :meth:`portq.Queue.job_stats`."""
        return await self._call(self.queue.job_stats, window, queue)

    async def pause(self, queue: str) -> None:
        """See :meth:`portq.Queue.pause`."""
        await self._call(self.queue.pause, queue)

    async def resume(self, queue: str) -> None:
        """See :meth:`portq.Queue.resume`."""
        await self._call(self.queue.resume, queue)

    async def paused_queues(self) -> list[str]:
        return await self._call(self.queue.paused_queues)

    async def set_concurrency_limit(self, queue: str, max_running: int | None) -> None:
        """See :meth:`portq.Queue.set_concurrency_limit`."""
        await self._call(self.queue.set_concurrency_limit, queue, max_running)

    async def set_fairness(self, queue: str, fair: bool) -> None:
        """See :meth:`portq.Queue.set_fairness`."""
        await self._call(self.queue.set_fairness, queue, fair)

    async def set_rate_limit(self, queue: str, limit: int | None,
                             per_seconds: float | None = None) -> None:
        """See :meth:`portq.Queue.set_rate_limit`."""
        await self._call(self.queue.set_rate_limit, queue, limit, per_seconds)

    async def jobs(self, state: str | None = None, *, queue: str | None = None,
                   limit: int = 100, after_id: int = 0, key: str | None = None,
                   text: str | None = None, order: str = "id",
                   after_run_at: datetime | None = None) -> list[JobRecord]:
        """:meth:`portq.Queue.jobs`."""
        return await self._call(self.queue.jobs, state, queue=queue, limit=limit,
                                after_id=after_id, key=key, text=text, order=order,
                                after_run_at=after_run_at)

    async def job(self, job_id: int) -> JobRecord | None:
        return await self._call(self.queue.job, job_id)

    async def reap(self, *, limit: int = 1000, delay: float = 1.0) -> int:
        return await self._call(self.queue.reap, limit=limit, delay=delay)

    async def prune(self, older_than: float | timedelta, *, limit: int = 1000,
                    states: Sequence[str] = (State.SUCCEEDED, State.CANCELLED),
                    queue: str | None = None) -> int:
        """:meth:`portq.Queue.prune` (dead jobs too when ``states`` names them)."""
        return await self._call(self.queue.prune, older_than, limit=limit, states=states,
                                queue=queue)

    async def cancel(self, job_id: int) -> bool:
        return await self._call(self.queue.cancel, job_id)

    async def retry_dead(self, job_id: int, *, extra_attempts: int = 1) -> bool:
        return await self._call(self.queue.retry_dead, job_id, extra_attempts=extra_attempts)

    async def cancel_many(self, queue: str | None, *,
                          states: Sequence[str] = (State.READY,), limit: int = 1000) -> int:
        """:meth:`portq.Queue.cancel_many` (a queue's jobs in ``states``, or every queue's)."""
        return await self._call(self.queue.cancel_many, queue, states=states, limit=limit)

    async def retry_many(self, queue: str | None, *, states: Sequence[str] = (State.DEAD,),
                         limit: int = 1000, extra_attempts: int = 1) -> int:
        """:meth:`portq.Queue.retry_many` (a queue's dead or cancelled jobs, or every
        queue's)."""
        return await self._call(self.queue.retry_many, queue, states=states, limit=limit,
                                extra_attempts=extra_attempts)

    async def delete_finished(self, job_id: int) -> bool:
        """:meth:`portq.Queue.delete_finished` (one succeeded, dead or cancelled job)."""
        return await self._call(self.queue.delete_finished, job_id)

    async def dependency_results(self, job_id: int) -> dict[int, Any]:
        """:meth:`portq.Queue.dependency_results` (its dependencies' stored results)."""
        return await self._call(self.queue.dependency_results, job_id)

    async def error_history(self, job_id: int) -> list[JobError]:
        """:meth:`portq.Queue.error_history` (every recorded failed attempt)."""
        return await self._call(self.queue.error_history, job_id)

    async def job_errors(self, job_id: int) -> list[tuple[int, str, str]]:
        """:meth:`portq.Queue.job_errors` (attempt, worker id, error)."""
        return await self._call(self.queue.job_errors, job_id)

    async def workers(self) -> list[WorkerInfo]:
        """:meth:`portq.Queue.workers` (the registry's live workers)."""
        return await self._call(self.queue.workers)

    async def worker_activity(self) -> dict[str, WorkerActivity]:
        """:meth:`portq.Queue.worker_activity` (each live worker's running jobs)."""
        return await self._call(self.queue.worker_activity)

    async def finished_per_minute(self, minutes: int = 60) -> dict[str, dict[str, list[int]]]:
        """:meth:`portq.Queue.finished_per_minute`."""
        return await self._call(self.queue.finished_per_minute, minutes)

    async def concurrency_of(self, job_id: int) -> tuple[str, int] | None:
        """:meth:`portq.Queue.concurrency_of` (a job's per-key limit)."""
        return await self._call(self.queue.concurrency_of, job_id)

    async def key_limits(self, queue: str, *, limit: int = 20) -> list[tuple[str, int, int]]:
        """:meth:`portq.Queue.key_limits` (the per-key limits in use in ``queue``)."""
        return await self._call(self.queue.key_limits, queue, limit=limit)


class AsyncWorker(WorkerFront):
    """Runs handlers for jobs of ``queues`` as asyncio tasks on the running event loop (an
    ``async def`` handler awaited in its task, a plain ``def`` one on a thread of the
    worker's own). The same runtime as :class:`portq.Worker` (:mod:`portq.runtime`) does
    the claiming, writing, leases, timeouts and shutdown on threads of its own, so a slow
    database never blocks the loop; this class only drives the handlers. Options:
    :class:`portq.runtime.options.WorkerOptions` (the same as :class:`portq.Worker`'s).
    :meth:`stop` (or SIGTERM/SIGINT with ``install_signals``) stops claiming, gives back
    the jobs no handler started, waits up to ``grace`` seconds, then cancels the remaining
    handlers and releases their jobs."""

    _kind = " (asyncio)"

    def __init__(self, queue: AsyncQueue, queues: Sequence[str] | str, handler: AsyncHandler,
                 **options: Any) -> None:
        super().__init__(queue.queue, queues, handler, options,
                         logging.getLogger("portq.worker"))  # one runtime, one logger
        self.queue = queue

    async def run(self) -> WorkerCounters:
        """Work until :meth:`stop` (or, with ``burst``, until the queues are drained)."""
        loop = asyncio.get_running_loop()
        executor = LoopExecutor(loop, self.settings.concurrency)
        signals = (signal.SIGTERM, signal.SIGINT) if self.options.install_signals else ()
        for sig in signals:
            loop.add_signal_handler(sig, self.stop)
        registration = self._registration()
        if registration is not None:
            await asyncio.to_thread(registration.start)
        self._log_started()
        unbound = self._bound_statements()
        done: asyncio.Future[None] = loop.create_future()

        def body() -> None:
            error: BaseException | None = None
            try:
                self.runtime.run(executor)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
                error = exc
            call_soon(loop, functools.partial(_settle, done, error))

        threading.Thread(target=body, name="portq-claim-0", daemon=True).start()
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:  # the task awaiting run() was cancelled: shut down
            self.stop()
            await done
            raise
        finally:
            unbound()
            await executor.wait_stopped()
            if registration is not None:
                await asyncio.to_thread(registration.stop)
            for sig in signals:
                loop.remove_signal_handler(sig)
        self._log_stopped()
        return self.counters


def _settle(done: asyncio.Future[None], error: BaseException | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)
