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
import contextlib
import functools
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from portq import sqla
from portq.backends.base import (
    CKEY_COLUMN,
    POLL_IDLE_MAX,
    ErrorKind,
    SqlBackend,
    conflict_delay,
    storable_error,
)
from portq.errors import ConfigurationError, DatabaseError, Permanent
from portq.handler import HandlerRunner
from portq.job import Claim, Job, JobRecord, QueueStats, error_line
from portq.protocol import NewJob
from portq.queue import (
    Queue,
    _claim_of,
    duration_ms,
    positive_int,
    validate_queue,
    validate_worker_id,
)
from portq.queue import connect as connect_sync
from portq.registry import DEFAULT_REGISTRY_INTERVAL, registration_of
from portq.retry import Backoff
from portq.sql import bind
from portq.worker import (
    BATCH_LIMIT,
    Pacing,
    RetryAfter,
    WorkerCounters,
    failure_summary,
    new_worker_id,
)

if TYPE_CHECKING:
    from portq.schedule import Scheduler

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
            self._pool = AsyncConnectionPool(
                "", kwargs=self.backend.connect_kwargs(),  # type: ignore[attr-defined]
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

    async def _run(self, op: str, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        """``await fn(cursor)`` in one pooled transaction, retrying transient conflicts
        (same policy as :meth:`SqlBackend.run`)."""
        attempt = 0
        while True:
            try:
                async with self._pool.connection() as conn, conn.cursor() as cur:
                    return await fn(cur)  # the pool commits on success, else rolls back
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

    async def _enqueue(self, jobs: list[NewJob], conn: Any) -> list[int]:
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
                  "limit": positive_int(limit, "limit"), "lease_ms": duration_ms(lease, "lease")}

        async def go(cur: Any) -> list[Any]:
            return list(await (await self._execute(cur, "claim", params)).fetchall())
        rows = await self._run("claim", go)
        if any(row[CKEY_COLUMN] is not None for row in rows):  # per-key limits: settle
            rows = await asyncio.to_thread(self.backend.settle_after, params, rows)
        return [self.backend.job_from_row(row, worker_id) for row in rows]

    async def _guarded(self, op: str, params: dict[str, Any]) -> bool:
        async def go(cur: Any) -> bool:
            return bool((await self._execute(cur, op, params)).rowcount == 1)
        return bool(await self._run(op, go))

    async def renew(self, job: Job | Claim, lease: float = 30.0) -> bool:
        """Extend the lease; False means the claim no longer owns the job."""
        return (await self.renew_many([job], lease))[0]

    async def renew_many(self, jobs: Sequence[Job | Claim], lease: float = 30.0) -> list[bool]:
        """Extend several leases in one statement; one result per job, as :meth:`renew`."""
        if not self.native:
            return await asyncio.to_thread(self.queue.renew_many, jobs, lease)
        return await self._fenced_many("renew_many", jobs,
                                       {"lease_ms": duration_ms(lease, "lease")})

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
        done = await self._run(op, go)
        return [(c.job_id, c.generation) in done for c in claims]

    async def release(self, job: Job | Claim) -> bool:
        """Return an unfinished job to ready without spending its attempt."""
        if not self.native:
            return await asyncio.to_thread(self.queue.release, job)
        return await self._guarded("release", self.backend.guard(_claim_of(job)))

    async def fail(self, job: Job | Claim, error: str, *,
                   retry_in: float | None = None) -> bool:
        """Record a failure; retry after ``retry_in`` seconds, or dead if None or spent."""
        if not self.native:
            return await asyncio.to_thread(self.queue.fail, job, error, retry_in=retry_in)
        ms = None if retry_in is None else duration_ms(retry_in, "retry_in", allow_zero=True)
        params = self.backend.fail_params(_claim_of(job), str(error), ms)

        async def go(cur: Any) -> bool:
            if (await self._execute(cur, "fail", params)).rowcount != 1:
                return False
            await self._execute(cur, "record_error",
                                {**params, "error": storable_error(str(error))[:8000]})
            return True
        return bool(await self._run("fail", go))

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


class AsyncWorker:
    """Runs handlers for jobs of ``queues`` as asyncio tasks (an ``async def`` handler on
    the event loop, a plain ``def`` one on a thread of its own).

    At most ``concurrency`` handlers run at once; successes are written by a completion
    batcher task, a batch per statement (``complete_many``), each job keeping its slot
    until its completion has committed (as in :class:`portq.worker.Worker`); a heartbeat
    task renews every lease in one statement at a third of the lease; an empty queue is
    polled with growing, jittered sleeps;
    :meth:`stop` (or SIGTERM/SIGINT with ``install_signals``) stops claiming, waits up to
    ``grace`` seconds, then cancels the remaining handlers and releases their jobs.
    Handlers raise :class:`portq.Permanent` (dead now) or
    :class:`portq.worker.RetryAfter` (retry after a delay) like sync ones.
    """

    def __init__(self, queue: AsyncQueue, queues: Sequence[str] | str, handler: AsyncHandler,
                 *, concurrency: int = 10, lease: float = 30.0, batch: int | None = None,
                 backoff: Backoff | None = None, idle_min: float = 0.05,
                 idle_max: float | None = None, grace: float = 30.0, burst: bool = False,
                 worker_id: str | None = None, install_signals: bool = False,
                 registry_interval: float | None = DEFAULT_REGISTRY_INTERVAL) -> None:
        names = [queues] if isinstance(queues, str) else list(queues)
        if not names or len(set(names)) != len(names):
            raise ConfigurationError(f"a worker needs distinct queues, got {names}")
        self._handler = HandlerRunner(handler)  # refuses what cannot be a handler
        if idle_max is None:  # it only polls (no listener): keep a new job's wait short
            idle_max = max(idle_min, POLL_IDLE_MAX)
        if not 0 < idle_min <= idle_max:
            raise ConfigurationError("need 0 < idle_min <= idle_max")
        self.queue = queue
        self.queues = [validate_queue(n) for n in names]
        self.handler = handler
        self.concurrency = positive_int(concurrency, "concurrency")
        self.lease = duration_ms(lease, "lease") / 1000
        self.batch = positive_int(batch if batch is not None else self.concurrency, "batch")
        self.backoff = backoff or queue.queue.backoff
        self.idle_min, self.idle_max = idle_min, idle_max
        self.grace = grace
        self.burst = burst
        self.worker_id = worker_id or new_worker_id()
        self.install_signals = install_signals
        #: seconds between registry heartbeats (portq workers, the dashboard); None: none
        self.registry_interval = registry_interval
        #: a Scheduler run beside this worker, whose entries the registry row reports
        self.scheduler: Scheduler | None = None
        self.counters = WorkerCounters()
        self._inflight: dict[int, tuple[Job, asyncio.Task[None]]] = {}
        self._acks: list[Job] = []  # handler returned, completion not yet written
        self._acking: set[int] = set()  # ids in _acks or in the batch being written
        # owned jobs whose outcome is being written: a renewal refused meanwhile may only
        # mean that the outcome committed, so the write's own result decides
        self._writing: dict[int, Job] = {}
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._ack_ready = asyncio.Event()

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    def stop(self) -> None:
        """Stop claiming; running handlers get ``grace`` seconds, then are cancelled."""
        self._stopping.set()
        self._wake.set()

    async def run(self) -> WorkerCounters:
        """Work until :meth:`stop` (or, with ``burst``, until the queues are drained)."""
        loop = asyncio.get_running_loop()
        if self.install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        heartbeat = asyncio.create_task(self._heartbeat(), name="portq-heartbeat")
        batcher = asyncio.create_task(self._ack_loop(), name="portq-acks")
        registration = registration_of(self, self.queue.queue, lambda: self.inflight)
        registry = None if registration is None else asyncio.create_task(
            registration.run_async(), name="portq-registry")
        log.info("worker.started worker=%s engine=%s url=%s queues=%s concurrency=%d "
                 "lease=%gs (asyncio)", self.worker_id,
                 self.queue.queue.backend.engine, self.queue.url, ",".join(self.queues),
                 self.concurrency, self.lease)
        try:
            await self._claim_loop()
        finally:
            await self._shutdown(batcher)
            heartbeat.cancel()
            if registry is not None:
                registry.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await registry
            if self.install_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
        log.info("worker.stopped worker=%s %s", self.worker_id,
                 " ".join(f"{k}={v}" for k, v in self.counters.as_dict().items()))
        return self.counters

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def _claim_loop(self) -> None:
        pacing = Pacing(self.queues, self.idle_min, self.idle_max)
        while not self._stopping.is_set():
            claimed = tried = 0
            try:
                turns = pacing.turns()
                for i, name in enumerate(turns):
                    free = self.concurrency - self.inflight  # no look-ahead here
                    if free <= 0:
                        break
                    claimed += await self._claim(name, pacing.share(free, len(turns) - i))
                    tried += 1
                pacing.finish_round(tried, claimed)
                if self.burst and not claimed and not self.inflight and await self._drained():
                    return
            except Exception as exc:  # noqa: BLE001 - the database may be down: back off
                delay = pacing.error_delay()
                log.warning("worker.db_error worker=%s error=%s: %s; retrying in %.2fs",
                            self.worker_id, type(exc).__name__, exc, delay)
                await self._sleep(delay)
                continue
            if claimed:
                if self.inflight >= self.concurrency:
                    await self._sleep(self.idle_max)  # woken when a handler finishes
            else:
                await self._sleep(pacing.idle_delay())

    async def _claim(self, name: str, free: int) -> int:
        started = time.perf_counter()
        jobs = await self.queue.claim(name, self.worker_id, limit=min(free, self.batch),
                                      lease=self.lease)
        self.counters.record_claim(time.perf_counter() - started, name)
        for job in jobs:
            task = asyncio.create_task(self._execute(job), name=f"portq-job-{job.id}")
            self._inflight[job.id] = (job, task)
        self.counters.add("claimed", len(jobs), name)
        return len(jobs)

    async def _drained(self) -> bool:
        for name in self.queues:
            for s in await self.queue.stats(name):
                if (s.ready and not s.paused) or s.running:  # paused: left for later
                    return False
        return True

    async def _execute(self, job: Job) -> None:
        try:
            try:
                result = await self._handler.run_async(job)
                if result is not None and self._inflight.get(job.id, (None,))[0] is job \
                        and not await self.queue.store_result(job, result):
                    await self._refused(job)  # lost or cancelled since the last renewal
                    return
            except Permanent as exc:  # a ResultError (result not storable) too
                await self._report(job, f"{type(exc).__name__}: {exc}", None, dead=True)
            except RetryAfter as exc:
                await self._report(job, str(exc), exc.delay)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not job.cancelled() or (task is not None and task.cancelling()):
                    raise  # the worker's own shutdown cancelled it
                # else an operator cancelled the job and its handler's task: nothing to write
            except Exception as exc:  # noqa: BLE001 - a handler may raise anything
                if not job.cancelled():  # e.g. JobCancelled: nothing is written
                    await self._report(job, failure_summary(exc),
                                       self.backoff.delay(job.attempt))
            else:
                if self._inflight.get(job.id, (None,))[0] is job:
                    self._acking.add(job.id)  # it keeps its slot until the batch commits
                    self._acks.append(job)
                    self._ack_ready.set()
                    return
        finally:
            entry = self._inflight.get(job.id)
            if entry is not None and entry[0] is job and job.id not in self._acking:
                del self._inflight[job.id]
                self._wake.set()

    async def _write(self, jobs: Sequence[Job],
                     write: Callable[[], Awaitable[list[bool]]]) -> list[bool] | None:
        """``await write()`` retried through connection trouble while the jobs' lease lives;
        None when it ran out first (the jobs will run again)."""
        deadline = time.monotonic() + self.lease
        delay = 0.05
        self._writing.update((j.id, j) for j in jobs)
        try:
            while True:
                try:
                    return await write()
                except Exception as exc:  # noqa: BLE001 - keep trying while the lease lives
                    if time.monotonic() + delay >= deadline:
                        log.error("job.report_failed job_id=%s worker=%s error=%s",
                                  ",".join(str(j.id) for j in jobs), self.worker_id, exc)
                        return None
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
        finally:
            for job in jobs:
                if self._writing.get(job.id) is job:
                    del self._writing[job.id]

    async def _ack_loop(self) -> None:
        """The completion batcher: write what handlers finished, up to ``BATCH_LIMIT`` a
        statement; a job lost meanwhile (renewal refused) is not written."""
        while True:
            await self._ack_ready.wait()
            self._ack_ready.clear()
            while self._acks:
                batch = self._acks[:BATCH_LIMIT]
                del self._acks[:BATCH_LIMIT]
                owned = [j for j in batch if self._inflight.get(j.id, (None,))[0] is j]
                results = await self._write(
                    owned, functools.partial(self.queue.complete_many, owned)) \
                    if owned else None
                for job in batch:
                    self._acking.discard(job.id)
                    if self._inflight.get(job.id, (None,))[0] is job:
                        del self._inflight[job.id]
                for job, ok in zip(owned, results or [], strict=False):
                    if ok:
                        self.counters.add("succeeded", queue=job.queue)
                    else:
                        await self._refused(job)
                self._wake.set()

    async def _report(self, job: Job, error: str, retry_in: float | None,
                      dead: bool = False) -> None:
        """Fail the job, retrying through connection trouble while the lease lives."""
        if self._inflight.get(job.id, (None,))[0] is not job:
            return  # lost meanwhile: its new owner reports
        written = await self._write([job], lambda: self._fail(job, error, retry_in))
        if written is None:
            return
        ok = written[0]
        if not ok:
            await self._refused(job)
        elif dead or retry_in is None or job.attempt >= job.max_attempts:
            self.counters.add("dead", queue=job.queue)
            log.warning("job.dead job_id=%d queue=%s attempt=%d/%d worker=%s error=%s",
                        job.id, job.queue, job.attempt, job.max_attempts, self.worker_id,
                        error_line(error))
        else:
            self.counters.add("retried", queue=job.queue)
            log.info("job.retry job_id=%d queue=%s attempt=%d/%d worker=%s in=%.2fs error=%s",
                     job.id, job.queue, job.attempt, job.max_attempts, self.worker_id,
                     retry_in, error_line(error))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.lease / 3)
            jobs = [job for job, _task in self._inflight.values()]
            try:  # one statement per tick, whatever the number of jobs
                results = await self.queue.renew_many(jobs, lease=self.lease)
            except Exception as exc:  # noqa: BLE001 - try again next beat
                log.warning("job.renew_error job_ids=%s error=%s",
                            ",".join(str(j.id) for j in jobs), exc)
                continue
            refused = [job for job, renewed in zip(jobs, results, strict=True)
                       if not renewed and self._owned_not_writing(job)]
            if not refused:
                continue
            try:  # cancelled by an operator, or taken by another owner?
                cancelled = await self.queue.cancelled(refused)
            except Exception as exc:  # noqa: BLE001 - ask again next beat
                log.warning("job.renew_error job_ids=%s error=%s",
                            ",".join(str(j.id) for j in refused), exc)
                continue
            for job, was_cancelled in zip(refused, cancelled, strict=True):
                if not self._owned_not_writing(job):  # its outcome is being written
                    continue
                del self._inflight[job.id]
                if was_cancelled:
                    self._cancelled(job, "lease renewal refused")
                else:
                    self.counters.add("lost", queue=job.queue)
                    log.warning("job.lost job_id=%d worker=%s: lease renewal refused",
                                job.id, self.worker_id)

    def _owned_not_writing(self, job: Job) -> bool:
        return self._inflight.get(job.id, (None,))[0] is job and \
            self._writing.get(job.id) is not job

    async def _refused(self, job: Job) -> None:
        """Count a refused outcome write: cancelled by an operator, or lost."""
        try:
            was_cancelled = (await self.queue.cancelled([job]))[0]
        except Exception as exc:  # noqa: BLE001 - then it counts as lost
            log.warning("worker.db_error worker=%s error=%s; could not tell whether "
                        "job_id=%d was cancelled", self.worker_id, exc, job.id)
            was_cancelled = False
        if was_cancelled:
            self._cancelled(job, "its outcome's write was refused")
        else:
            self.counters.add("lost", queue=job.queue)

    def _cancelled(self, job: Job, how: str) -> None:
        """An operator cancelled ``job`` (no longer owned): cancel its handler's task (a
        plain handler sees ``job.cancelled()``), count, log."""
        job._cancel.set()
        self.counters.add("cancelled", queue=job.queue)
        log.info("job.cancelled job_id=%d queue=%s generation=%d worker=%s: %s; the handler "
                 "was told, its outcome is not recorded", job.id, job.queue, job.attempt,
                 self.worker_id, how)

    async def _fail(self, job: Job, error: str, retry_in: float | None) -> list[bool]:
        return [await self.queue.fail(job, error, retry_in=retry_in)]

    async def _shutdown(self, batcher: asyncio.Task[None]) -> None:
        self._stopping.set()
        tasks = [task for _job, task in self._inflight.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=self.grace)
        while self._acking:  # write the completions still waiting, then stop the batcher
            self._ack_ready.set()
            await asyncio.sleep(0.01)
        batcher.cancel()
        await asyncio.gather(batcher, return_exceptions=True)
        leftover = list(self._inflight.values())
        self._inflight.clear()  # their reports are now skipped
        for _job, task in leftover:
            task.cancel()
        await asyncio.gather(*(task for _job, task in leftover), return_exceptions=True)
        for job, _task in leftover:
            try:
                if await self.queue.release(job):
                    self.counters.add("released", queue=job.queue)
            except Exception as exc:  # noqa: BLE001 - its lease will expire instead
                log.error("job.release_failed job_id=%d error=%s", job.id, exc)
