"""asyncio API: :func:`connect` → :class:`AsyncQueue`, and :class:`AsyncWorker`.

On PostgreSQL the hot path (enqueue, claim, renew, complete, fail, release) runs natively
on psycopg's ``AsyncConnection`` (a ``psycopg_pool.AsyncConnectionPool`` for portq's own
transactions), using the same named statements as the sync backend
(``dialects/postgres/queries.sql`` bound by :func:`portq.sql.bind`). ``enqueue(...,
conn=async_conn)`` writes in the caller's open transaction and never commits it. Every
other engine (SQLite) and the operator calls (migrate, stats, reap, prune, ...) run the
sync :class:`portq.Queue` in a thread (``asyncio.to_thread``).

Validation is the sync Queue's (:meth:`portq.Queue.new_job`, ``validate_queue``,
``duration_ms``), so both APIs accept and refuse exactly the same input::

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
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from portq import sqla
from portq.backends.base import (
    CKEY_COLUMN,
    ErrorKind,
    SqlBackend,
    conflict_delay,
    storable_error,
)
from portq.errors import ConfigurationError, DatabaseError
from portq.handler import call_soon
from portq.job import Claim, Job, JobRecord, QueueStats
from portq.protocol import NewJob
from portq.queue import (
    Queue,
    _claim_of,
    given_ms,
    positive_int,
    validate_queue,
    validate_worker_id,
)
from portq.queue import connect as connect_sync
from portq.runtime.counters import WorkerCounters
from portq.runtime.front import WorkerFront
from portq.runtime.loop import LoopExecutor
from portq.sql import bind
from portq.stats import JobStats

if TYPE_CHECKING:
    pass

log = logging.getLogger("portq.aio")
#: an ``async def`` handler, or a plain ``def`` one (run on a thread: see portq.handler)
AsyncHandler = Callable[[Job], Any]


async def connect(url: str, **options: Any) -> AsyncQueue:
    """Open an :class:`AsyncQueue`; options are those of :func:`portq.connect`."""
    queue = await asyncio.to_thread(connect_sync, url, **options)
    aq = AsyncQueue(queue)
    try:
        await aq.open()
    except BaseException:
        await asyncio.to_thread(queue.close)
        raise
    return aq


class AsyncQueue:
    """The async counterpart of :class:`portq.Queue`, over the same backend."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.backend: SqlBackend = queue.backend
        self._pool: Any = None  # psycopg_pool.AsyncConnectionPool on PostgreSQL

    @property
    def native(self) -> bool:
        """True when operations run on psycopg's async driver (PostgreSQL)."""
        return self.backend.engine == "postgres"

    @property
    def url(self) -> str:
        return self.queue.url

    def __repr__(self) -> str:
        return f"AsyncQueue({self.url!r})"

    async def open(self) -> None:
        if self.native and self._pool is None:
            from psycopg_pool import AsyncConnectionPool
            # autocommit: a one-statement operation is one round trip (psycopg would
            # send BEGIN as a round trip of its own); the others open a transaction
            self._pool = AsyncConnectionPool(
                "", kwargs={**self.backend.connect_kwargs(),  # type: ignore[attr-defined]
                            "autocommit": True},
                min_size=1, max_size=self.backend.pool.max_size, open=False,
                timeout=30.0, name="portq-aio")
            await self._pool.open(wait=True, timeout=30.0)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        await asyncio.to_thread(self.queue.close)

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- plumbing (PostgreSQL) ----------------------------------------------------------

    async def _execute(self, cur: Any, name: str, params: Mapping[str, Any]) -> Any:
        bound = bind(self.backend.queries[name], params, self.backend.paramstyle)
        await cur.execute(bound.sql, bound.params)
        return cur

    async def _run(self, op: str, fn: Callable[[Any], Awaitable[Any]], *,
                   single: bool = False) -> Any:
        """``await fn(cursor)`` in one pooled transaction, retrying transient conflicts
        (same policy as :meth:`SqlBackend.run`). With ``single`` (``fn`` runs one
        statement) the statement is the transaction: sent in autocommit, one round trip."""
        attempt = 0
        while True:
            try:
                async with self._pool.connection() as conn:
                    if single:
                        async with conn.cursor() as cur:
                            return await fn(cur)
                    async with conn.transaction(), conn.cursor() as cur:
                        return await fn(cur)  # committed on success, else rolled back
            except Exception as exc:
                kind = self.backend.classify(exc)
                if kind is ErrorKind.RETRYABLE and attempt < self.backend.max_retries:
                    attempt += 1
                    await asyncio.sleep(conflict_delay(attempt))
                    continue
                error = self.backend.translate(op, exc, kind, attempts=attempt + 1)
                if error is None:
                    raise
                raise error from exc

    async def _insert(self, cur: Any, jobs: Sequence[NewJob]) -> list[int]:
        """The async form of :meth:`SqlBackend.insert_jobs` (same statements)."""
        ids = []
        for job in jobs:
            if job.unique is not None:  # as SqlBackend.insert_scoped
                scope = {"hash": job.unique.hash}
                await self._execute(cur, "unique_ensure", scope)
                locked = await (await self._execute(cur, "unique_lock", scope)).fetchone()
                if locked is not None and locked[0] is not None and job.unique.holds_key(
                        await (await self._execute(cur, "unique_job", {
                            "job_id": locked[0], "period_ms": job.unique.period_ms,
                        })).fetchone()):
                    ids.append(int(locked[0]))
                    continue
            row = await (await self._execute(cur, "insert_job",
                                             self.backend.job_params(job))).fetchone()
            if job.unique is not None and row is not None:
                await self._execute(cur, "unique_point", {**scope, "job_id": int(row[0])})
            if row is None:
                row = await (await self._execute(cur, "job_id_by_key",
                                                 {"key": job.key})).fetchone()
                if row is None:
                    raise DatabaseError(f"job key {job.key!r} conflicted but no job holds it")
            ids.append(int(row[0]))
        for name in sorted({job.queue for job in jobs}):
            await self._execute(cur, "notify",
                                {"channel": self.backend.channel(name)})  # type: ignore[attr-defined]
        return ids

    # ---- enqueue ------------------------------------------------------------------------

    async def enqueue(self, queue: str, payload: Any = None, *, priority: int = 0,
                      run_at: datetime | None = None, delay: float | None = None,
                      max_attempts: int | None = None, key: str | None = None,
                      conn: Any = None, **unique: Any) -> int:
        """Add one job (see :meth:`portq.Queue.enqueue`, also for the ``unique_*``
        scopes). ``conn`` may be a psycopg ``AsyncConnection`` (PostgreSQL), written in its
        open transaction, or anything the sync API accepts (a sqlite3 connection,
        SQLAlchemy Session), used on this thread."""
        job = self.queue.new_job(queue, payload, priority=priority, run_at=run_at,
                                 delay=delay, max_attempts=max_attempts, key=key, **unique)
        return (await self._enqueue([job], conn))[0]

    async def enqueue_many(self, jobs: Iterable[Mapping[str, Any]], *,
                           conn: Any = None) -> list[int]:
        """Add many jobs in one transaction (or the caller's)."""
        built = self.queue.new_jobs(jobs)
        return await self._enqueue(built, conn) if built else []

    def add_enqueue_hook(self, before: Any = None, after: Any = None) -> None:
        """See :meth:`portq.Queue.add_enqueue_hook` (the hooks are the sync queue's)."""
        self.queue.add_enqueue_hook(before, after)

    def add_middleware(self, middleware: Any) -> None:
        """See :meth:`portq.Queue.add_middleware`."""
        self.queue.add_middleware(middleware)

    async def _enqueue(self, jobs: list[NewJob], conn: Any) -> list[int]:
        """Insert ``jobs`` with the queue's enqueue hooks (:mod:`portq.hooks`)."""
        hooks = self.queue.hooks
        if not hooks:
            return await self._write_jobs(jobs, conn)
        jobs, seen = hooks.prepare(jobs)
        try:
            ids = await self._write_jobs(jobs, conn)
        except BaseException as exc:
            hooks.finish(seen, None, exc)
            raise
        hooks.finish(seen, ids)
        return ids

    async def _write_jobs(self, jobs: list[NewJob], conn: Any) -> list[int]:
        if any(job.depends_on for job in jobs) and conn is None:
            # dependencies are locked and recorded by SqlBackend.insert_dependent
            return await asyncio.to_thread(self.backend.enqueue, jobs)
        if conn is None:
            if self.native:
                return list(await self._run("enqueue", lambda cur: self._insert(cur, jobs)))
            return await asyncio.to_thread(self.backend.enqueue, jobs)
        if sqla.is_async(conn):  # SQLAlchemy AsyncSession / AsyncConnection
            aconn = await sqla.async_connection(conn, self.backend.engine)
            if not self.native:  # SQLAlchemy's sync adapter of aiosqlite/aiomysql/asyncmy
                return list(await aconn.run_sync(lambda sync_conn: self.backend.enqueue(
                    jobs, conn=sqla.adapted_dbapi(sync_conn))))
            conn = (await aconn.get_raw_connection()).driver_connection
        if _is_async_psycopg(conn):
            if not self.native:
                raise ConfigurationError(f"conn is a psycopg AsyncConnection; the "
                                         f"{self.backend.engine} backend cannot use it")
            if any(job.depends_on for job in jobs):
                raise ConfigurationError(
                    "depends_on with a psycopg AsyncConnection as conn is not supported yet: "
                    "enqueue the dependent jobs without conn, or with a sync connection")
            async with conn.cursor() as cur:
                return await self._insert(cur, jobs)
        # a sync connection belongs to the caller's thread: use it there
        return self.backend.enqueue(jobs, conn=self.queue._dbapi(conn))

    # ---- claiming and fencing -----------------------------------------------------------

    async def claim(self, queue: str, worker_id: str, *, limit: int = 1,
                    lease: float = 30.0) -> list[Job]:
        """Claim up to ``limit`` due jobs of one queue (see :meth:`portq.Queue.claim`)."""
        if not self.native or not self.backend.known_unlimited(queue):
            # a queue that may have a concurrency limit: the sync claim enforces it
            return await asyncio.to_thread(self.queue.claim, queue, worker_id, limit=limit,
                                           lease=lease)
        validate_queue(queue)
        validate_worker_id(worker_id)
        params = {"queue": queue, "worker_id": worker_id,
                  "limit": positive_int(limit, "limit"), "lease_ms": given_ms(lease, "lease")}

        sent = 0.0

        async def go(cur: Any) -> list[Any]:
            nonlocal sent
            sent = time.monotonic()
            return list(await (await self._execute(cur, "claim", params)).fetchall())
        rows = await self._run("claim", go, single=True)
        if any(row[CKEY_COLUMN] is not None for row in rows):  # per-key limits: settle
            rows = await asyncio.to_thread(self.backend.settle_after, params, rows)
        return [self.backend.job_from_row(row, worker_id, None, sent) for row in rows]

    async def _guarded(self, op: str, params: dict[str, Any]) -> bool:
        async def go(cur: Any) -> bool:
            return bool((await self._execute(cur, op, params)).rowcount == 1)
        return bool(await self._run(op, go, single=True))

    async def renew(self, job: Job | Claim, lease: float = 30.0) -> bool:
        """Extend the lease; False means the claim no longer owns the job."""
        return (await self.renew_many([job], lease))[0]

    async def renew_many(self, jobs: Sequence[Job | Claim], lease: float = 30.0) -> list[bool]:
        """Extend several leases in one statement; one result per job, as :meth:`renew`."""
        if not self.native:
            return await asyncio.to_thread(self.queue.renew_many, jobs, lease)
        return await self._fenced_many("renew_many", jobs,
                                       {"lease_ms": given_ms(lease, "lease")})

    async def complete(self, job: Job | Claim) -> bool:
        """Mark succeeded; False means ownership was lost and nothing was written."""
        return (await self.complete_many([job]))[0]

    async def complete_many(self, jobs: Sequence[Job | Claim]) -> list[bool]:
        """Complete several jobs in one statement; one result per job, as :meth:`complete`."""
        if not self.native:
            return await asyncio.to_thread(self.queue.complete_many, jobs)
        return await self._fenced_many("complete_many", jobs, {})

    async def _fenced_many(self, op: str, jobs: Sequence[Job | Claim],
                           params: dict[str, Any]) -> list[bool]:
        """The async form of :meth:`SqlBackend.fenced_many` (same statements)."""
        if not jobs:
            return []
        claims = [_claim_of(j) for j in jobs]
        params = {**params, "claims": self.backend.claims_json(claims)}

        async def go(cur: Any) -> set[tuple[int, int]]:
            rows = await (await self._execute(cur, op, params)).fetchall()
            return {(int(job_id), int(gen)) for job_id, gen in rows}
        done = await self._run(op, go, single=True)
        return [(c.job_id, c.generation) in done for c in claims]

    async def release(self, job: Job | Claim) -> bool:
        """Return an unfinished job to ready without spending its attempt (in a thread: a
        give-back that spends the last attempt settles the job's dependents)."""
        return await asyncio.to_thread(self.queue.release, job)

    async def snooze(self, job: Job | Claim, delay: Any) -> bool:
        """:meth:`portq.Queue.snooze` (run again after ``delay``, the attempt given back)."""
        return await asyncio.to_thread(self.queue.snooze, job, delay)

    async def fail(self, job: Job | Claim, error: str, *,
                   retry_in: float | None = None) -> bool:
        """Record a failure; retry after ``retry_in`` seconds, or dead if None or spent."""
        if not self.native:
            return await asyncio.to_thread(self.queue.fail, job, error, retry_in=retry_in)
        ms = None if retry_in is None else given_ms(retry_in, "retry_in", allow_zero=True)
        params = self.backend.fail_params(_claim_of(job), str(error), ms)

        async def go(cur: Any) -> bool:
            if (await self._execute(cur, "fail", params)).rowcount != 1:
                return False
            await self._execute(cur, "record_error",
                                {**params, "error": storable_error(str(error))[:8000]})
            if await (await self._execute(cur, "dep_unsettled", {})).fetchone() is not None:
                raise _SettleInThread  # rolled back: dependents to settle (rare)
            return True
        try:
            return bool(await self._run("fail", go))
        except _SettleInThread:
            return await asyncio.to_thread(self.queue.fail, job, error, retry_in=retry_in)

    # ---- operators and maintenance (the sync Queue, in a thread) -------------------------

    async def store_result(self, job: Job | Claim, result: Any) -> bool:
        """Store a running job's return value (see :meth:`portq.Queue.store_result`)."""
        text = self.queue.dump_result(result)
        return await asyncio.to_thread(self.backend.store_result, _claim_of(job), text)

    async def cancelled(self, jobs: Sequence[Job | Claim]) -> list[bool]:
        """For each job, whether its generation was cancelled (``Backend.cancelled``)."""
        return await asyncio.to_thread(self.queue.backend.cancelled,
                                       [_claim_of(j) for j in jobs])

    async def result(self, job_id: int) -> Any:
        """A succeeded job's stored return value (see :meth:`portq.Queue.result`)."""
        return await asyncio.to_thread(self.queue.result, job_id)

    async def migrate(self) -> int:
        return await asyncio.to_thread(self.queue.migrate)

    async def stats(self, queue: str | None = None) -> list[QueueStats]:
        return await asyncio.to_thread(self.queue.stats, queue)

    async def job_stats(self, window: float | timedelta | str = "1h",
                        queue: str | None = None) -> list[JobStats]:
        """See :meth:`portq.Queue.job_stats`."""
        return await asyncio.to_thread(self.queue.job_stats, window, queue)

    async def pause(self, queue: str) -> None:
        """See :meth:`portq.Queue.pause`."""
        await asyncio.to_thread(self.queue.pause, queue)

    async def resume(self, queue: str) -> None:
        """See :meth:`portq.Queue.resume`."""
        await asyncio.to_thread(self.queue.resume, queue)

    async def paused_queues(self) -> list[str]:
        return await asyncio.to_thread(self.queue.paused_queues)

    async def set_concurrency_limit(self, queue: str, max_running: int | None) -> None:
        """See :meth:`portq.Queue.set_concurrency_limit`."""
        await asyncio.to_thread(self.queue.set_concurrency_limit, queue, max_running)

    async def set_fairness(self, queue: str, fair: bool) -> None:
        """See :meth:`portq.Queue.set_fairness`."""
        await asyncio.to_thread(self.queue.set_fairness, queue, fair)

    async def set_rate_limit(self, queue: str, limit: int | None,
                             per_seconds: float | None = None) -> None:
        """See :meth:`portq.Queue.set_rate_limit`."""
        await asyncio.to_thread(self.queue.set_rate_limit, queue, limit, per_seconds)

    async def jobs(self, state: str | None = None, *, queue: str | None = None,
                   limit: int = 100, after_id: int = 0, **filters: Any) -> list[JobRecord]:
        """:meth:`portq.Queue.jobs` (``filters``: key, text, order, after_run_at)."""
        return await asyncio.to_thread(self.queue.jobs, state, queue=queue, limit=limit,
                                       after_id=after_id, **filters)

    async def job(self, job_id: int) -> JobRecord | None:
        return await asyncio.to_thread(self.queue.job, job_id)

    async def reap(self, *, limit: int = 1000, delay: float = 1.0) -> int:
        return await asyncio.to_thread(self.queue.reap, limit=limit, delay=delay)

    async def prune(self, older_than: float, *, limit: int = 1000,
                    queue: str | None = None) -> int:
        return await asyncio.to_thread(self.queue.prune, older_than, limit=limit, queue=queue)

    async def cancel(self, job_id: int) -> bool:
        return await asyncio.to_thread(self.queue.cancel, job_id)

    async def retry_dead(self, job_id: int, *, extra_attempts: int = 1) -> bool:
        return await asyncio.to_thread(self.queue.retry_dead, job_id,
                                       extra_attempts=extra_attempts)


def _is_async_psycopg(conn: Any) -> bool:
    return any(c.__module__.startswith("psycopg") and c.__name__ == "AsyncConnection"
               for c in type(conn).__mro__)


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


async def _one(result: Awaitable[bool]) -> list[bool]:
    """A single outcome write's result, as the list that ``_write`` handles."""
    return [await result]


class _SettleInThread(Exception):
    """An async failure ended a job that has dependents: redone by the sync path, which
    settles them in its transaction."""
