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
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from portq import sqla
from portq.backends.base import (
    CKEY_COLUMN,
    ErrorKind,
    SqlBackend,
    conflict_delay,
    listen_mode,
    storable_error,
)
from portq.errors import ConfigurationError, DatabaseError, Permanent
from portq.handler import HandlerRunner
from portq.job import Claim, Job, JobRecord, QueueStats
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
    AUTO_CLAIMERS,
    BATCH_LIMIT,
    COMPLETION_BATCHERS,
    LATE_FOR_RATE_LIMIT,
    LOOKAHEAD_PER_CLAIMER,
    LookAhead,
    Maintenance,
    Outcomes,
    Pacing,
    RetryAfter,
    WorkerCounters,
    WriteRetry,
    claim_batch,
    failure_summary,
    forget,
    mark_writing,
    new_worker_id,
    queues_drained,
    run_listener,
    started_too_late,
)

if TYPE_CHECKING:
    from portq.schedule import Scheduler

log = logging.getLogger("portq.aio")
#: jobs a handler task runs back to back before it lets the event loop's other tasks in
JOBS_BEFORE_YIELD = 16
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
        rows = await self._run("claim", go, single=True)
        if any(row[CKEY_COLUMN] is not None for row in rows):  # per-key limits: settle
            rows = await asyncio.to_thread(self.backend.settle_after, params, rows)
        return [self.backend.job_from_row(row, worker_id) for row in rows]

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
        done = await self._run(op, go, single=True)
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
    the event loop, a plain ``def`` one on a thread of the worker's own).

    It works as :class:`portq.Worker` does, sized by the same measurements: claims sized
    to the free capacity, the ``concurrency`` handlers plus a look-ahead
    (:class:`portq.worker.LookAhead`: zero while jobs outlast a claim's round trip, never
    more jobs than the handlers start in a tenth of the lease; a job left unstarted longer
    is given back); up to :data:`portq.worker.AUTO_CLAIMERS` claim loops while there is a
    look-ahead; completions written by completion batcher tasks, a batch per statement
    (``complete_many``), each job keeping its slot until its completion has committed; one
    ``renew_many`` per heartbeat tick at a third of the lease; the reaper and pruner on
    the main claim loop; on PostgreSQL a listener thread (LISTEN) that cuts idle sleeps
    short and tells the worker of cancels at once. An empty queue is polled with growing,
    jittered sleeps. :meth:`stop` (or SIGTERM/SIGINT with ``install_signals``) stops
    claiming, gives back the jobs no handler started, waits up to ``grace`` seconds, then
    cancels the remaining handlers and releases their jobs. Handlers raise
    :class:`portq.Permanent` (dead now) or :class:`portq.worker.RetryAfter` (retry after a
    delay) like sync ones.
    """

    def __init__(self, queue: AsyncQueue, queues: Sequence[str] | str, handler: AsyncHandler,
                 *, concurrency: int = 10, lease: float = 30.0, batch: int | None = None,
                 backoff: Backoff | None = None, idle_min: float = 0.05,
                 idle_max: float | None = None, grace: float = 30.0, burst: bool = False,
                 worker_id: str | None = None, install_signals: bool = False,
                 registry_interval: float | None = DEFAULT_REGISTRY_INTERVAL,
                 reap_interval: float | None = 10.0, reap_delay: float = 1.0,
                 prune_interval: float | None = 3600.0,
                 prune_older_than: float = 7 * 86400.0, listen: bool = True) -> None:
        names = [queues] if isinstance(queues, str) else list(queues)
        if not names or len(set(names)) != len(names):
            raise ConfigurationError(f"a worker needs distinct queues, got {names}")
        self._handler = HandlerRunner(handler)  # refuses what cannot be a handler
        if idle_max is None:  # the engine's: short where only polling finds new jobs
            idle_max = max(idle_min, queue.backend.idle_max_default)
        if not 0 < idle_min <= idle_max:
            raise ConfigurationError("need 0 < idle_min <= idle_max")
        self.queue = queue
        self.queues = [validate_queue(n) for n in names]
        self.handler = handler
        self.concurrency = positive_int(concurrency, "concurrency")
        self.lease = duration_ms(lease, "lease") / 1000
        duration_ms(grace, "grace", allow_zero=True)
        #: claim loops (the others claim only while there is a look-ahead)
        self.claimers = min(self.concurrency, AUTO_CLAIMERS)
        #: most jobs this worker owns at once (the look-ahead's ceiling included)
        self.capacity = self.concurrency + LOOKAHEAD_PER_CLAIMER * self.claimers
        self.lookahead = LookAhead(self.concurrency, self.lease,
                                   self.capacity - self.concurrency)
        self.batch = claim_batch(batch, self.concurrency, self.capacity)
        self.backoff = backoff or queue.queue.backoff
        self.idle_min, self.idle_max = idle_min, idle_max
        self.grace = grace
        self.burst = burst
        self.worker_id = worker_id or new_worker_id()
        self.install_signals = install_signals
        self.listen = listen
        #: seconds between registry heartbeats (portq workers, the dashboard); None: none
        self.registry_interval = registry_interval
        #: a Scheduler run beside this worker, whose entries the registry row reports
        self.scheduler: Scheduler | None = None
        self.counters = WorkerCounters()
        self.outcomes = Outcomes(self.counters, self.worker_id, log)
        self.maintenance = Maintenance(queue.queue, self.counters, self.worker_id, log,
                                       reap_interval=reap_interval, reap_delay=reap_delay,
                                       prune_interval=prune_interval,
                                       prune_older_than=prune_older_than)
        #: seconds a claim loop waits for a whole batch of slots to free (short jobs)
        self.gather_seconds = 0.005
        self._inflight: dict[int, Job] = {}  # jobs this worker still owns
        self._unstarted: deque[tuple[Job, float]] = deque()  # (job, monotonic claim time)
        self._handlers: set[asyncio.Task[None]] = set()  # running handler tasks
        self._busy = 0  # claimed jobs whose handler has not returned (waiting or running)
        self._acking: dict[int, Job] = {}  # handler returned, completion not yet written
        self._acks: deque[Job] = deque()  # completions waiting for a batcher
        # owned jobs whose outcome is being written: a renewal refused meanwhile may only
        # mean that the outcome committed, so the write's own result decides
        self._writing: dict[int, Job] = {}
        self._claiming = 0  # slots reserved by claims in progress
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._ack_ready = asyncio.Event()
        self._acks_closed = False
        self._done = threading.Event()  # tells the listener thread to stop

    def __repr__(self) -> str:
        return f"AsyncWorker({self.worker_id!r}, queues={self.queues}, url={self.queue.url!r})"

    @property
    def inflight(self) -> int:
        """Jobs this worker claimed and still owns."""
        return len(self._inflight)

    @property
    def held(self) -> int:
        """Jobs counted against the capacity: handlers not returned plus completions not
        yet written."""
        return self._busy + len(self._acking)

    def stop(self) -> None:
        """Stop claiming; running handlers get ``grace`` seconds, then are cancelled."""
        self._stopping.set()
        self._wake.set()

    def wake(self) -> None:
        """Interrupt an idle sleep (a slot freed, or a new job was announced)."""
        self._wake.set()

    async def run(self) -> WorkerCounters:
        """Work until :meth:`stop` (or, with ``burst``, until the queues are drained)."""
        loop = asyncio.get_running_loop()
        if self.install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        heartbeat = asyncio.create_task(self._heartbeat(), name="portq-heartbeat")
        batchers = [asyncio.create_task(self._ack_loop(), name=f"portq-acks-{n}")
                    for n in range(min(self.claimers, COMPLETION_BATCHERS))]
        registration = registration_of(self, self.queue.queue, lambda: self.held)
        registry = None if registration is None else asyncio.create_task(
            registration.run_async(), name="portq-registry")
        await self._start_listener(loop)
        log.info("worker.started worker=%s engine=%s url=%s queues=%s concurrency=%d "
                 "lease=%gs prefetch=auto<=%d claim_loops=%d new_jobs=%s (asyncio)",
                 self.worker_id,
                 self.queue.backend.engine, self.queue.url, ",".join(self.queues),
                 self.concurrency, self.lease, self.capacity - self.concurrency,
                 self.claimers, listen_mode(self.queue.backend, self.listen))
        claim_loops = [asyncio.create_task(self._claim_loop(main=False),
                                           name=f"portq-claim-{n}")
                       for n in range(1, self.claimers)]
        try:
            await self._claim_loop(main=True)
        finally:
            await self._shutdown(claim_loops, batchers)
            self._done.set()
            for task in (heartbeat, registry):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if self.install_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
        log.info("worker.stopped worker=%s %s", self.worker_id,
                 " ".join(f"{k}={v}" for k, v in self.counters.as_dict().items()))
        return self.counters

    async def _start_listener(self, loop: asyncio.AbstractEventLoop) -> None:
        """On engines that announce (PostgreSQL), a thread that waits on the listener's
        connection and hands what it hears to the event loop."""
        if not self.listen:
            return
        listener = await asyncio.to_thread(self.queue.backend.listener, self.queues)
        if listener is None:
            return

        def soon(callback: Callable[..., None], *args: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody listens
                loop.call_soon_threadsafe(callback, *args)

        threading.Thread(target=run_listener, name="portq-listen", daemon=True, args=(
            listener, self._done, functools.partial(soon, self.wake),
            functools.partial(soon, self._cancel_announced), self.worker_id)).start()

    # ---- the claim loops ----------------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        if not self._wake.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._wake.wait()
        self._wake.clear()

    async def _claim_loop(self, main: bool) -> None:
        """Claim rounds until stopped. The ``main`` loop also gives back jobs left
        unstarted too long, reaps, prunes and, with ``burst``, decides when the queues are
        drained; the others only claim, and only while there is a look-ahead."""
        pacing = Pacing(self.queues, self.idle_min, self.idle_max)
        while not self._stopping.is_set():
            if main:
                await self._give_back_stale()
            elif self.lookahead.size() == 0:
                await asyncio.sleep(0.05)
                continue
            try:
                claimed = await self._claim_round(pacing)
                if main and self.maintenance.due():
                    await asyncio.to_thread(self.maintenance.run_due)
                if main and self.burst and not claimed and self._idle() and \
                        await self._drained():
                    self._stopping.set()  # the other claim loops end too
                    return
            except Exception as exc:  # noqa: BLE001 - the database may be down: back off
                delay = pacing.error_delay()
                log.warning("worker.db_error worker=%s error=%s: %s; retrying in %.2fs",
                            self.worker_id, type(exc).__name__, exc, delay)
                await self._sleep(delay)
                continue
            if claimed:
                await self._gather_free_slots()
                if self._free() <= 0:  # woken as soon as a slot frees
                    await self._sleep(min(self.idle_max, self.lookahead.max_wait / 2))
            else:
                await self._sleep(pacing.idle_delay())

    async def _claim_round(self, pacing: Pacing) -> int:
        """One claim from each queue in turn, each for its share of the free slots (a
        queue that may have a limit only for idle handlers: no look-ahead for it)."""
        claimed = tried = 0
        turns = pacing.turns()
        for i, name in enumerate(turns):
            free = self._free()
            if not self.queue.backend.known_unlimited(name):
                free = min(free, self.concurrency - self.held - self._claiming)
            want = min(pacing.share(free, len(turns) - i), self.batch) if free > 0 else 0
            if want <= 0:
                break
            claimed += await self._claim(name, want)
            tried += 1
        pacing.finish_round(tried, claimed)
        return claimed

    def _capacity_now(self) -> int:
        """Jobs this worker may own now: its handlers plus the look-ahead."""
        return self.concurrency + self.lookahead.size()

    def _free(self) -> int:
        """Slots neither held nor reserved by a claim in progress."""
        return self._capacity_now() - self.held - self._claiming

    def _idle(self) -> bool:
        """Nothing held and no claim in progress."""
        return self.held + self._claiming == 0

    async def _gather_free_slots(self) -> None:
        """Wait briefly (``gather_seconds``) until a whole batch of slots is free, so that
        short jobs are claimed in batches rather than one claim per finished job."""
        want = max(1, min(self.batch, self._capacity_now()))
        deadline = time.monotonic() + self.gather_seconds
        while not self._stopping.is_set() and self._free() < want and not self._idle():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await self._sleep(left)

    async def _claim(self, name: str, want: int) -> int:
        """Claim up to ``want`` jobs (slots reserved meanwhile) and start their handlers
        as far as ``concurrency`` allows (the rest wait, in claim order)."""
        self._claiming += want
        started = time.perf_counter()
        try:
            jobs = await self.queue.claim(name, self.worker_id, limit=want, lease=self.lease)
        finally:
            self._claiming -= want
        took = time.perf_counter() - started
        self.counters.record_claim(took, name)
        self.lookahead.claim_took(took)
        claimed_at = time.monotonic()
        for job in jobs:
            self._inflight[job.id] = job
            self._unstarted.append((job, claimed_at))
        self._busy += len(jobs)
        self.counters.add("claimed", len(jobs), name)
        if log.isEnabledFor(logging.DEBUG):
            for job in jobs:
                log.debug("job.claimed job_id=%d queue=%s generation=%d worker=%s",
                          job.id, job.queue, job.attempt, self.worker_id)
        self._dispatch()
        return len(jobs)

    async def _give_back_stale(self) -> None:
        """Give back the jobs claimed ahead that no handler started within the
        look-ahead's bound (a fraction of the lease); their attempt is given back."""
        cutoff = time.monotonic() - self.lookahead.max_wait
        stale = []
        while self._unstarted and self._unstarted[0][1] < cutoff:
            stale.append(self._unstarted.popleft()[0])
        if stale:
            self.lookahead.stalled(self.lookahead.max_wait)
            self._disown(stale)
            await self._release(stale, "not started within the look-ahead bound")

    async def _drained(self) -> bool:
        """The ``burst`` exit test (as :meth:`portq.Worker._drained`)."""
        return not self.maintenance.reaped_waiting() and await asyncio.to_thread(
            queues_drained, self.queue.backend, self.queues)

    # ---- running jobs -------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Start handler tasks while jobs wait and fewer than ``concurrency`` run; each
        task runs waiting jobs, oldest first, until none waits (a task per job would cost
        more than a short job)."""
        while len(self._handlers) < self.concurrency:
            job = self._take_job()
            if job is None:
                return
            self._handlers.add(asyncio.create_task(self._run_jobs(job), name="portq-handler"))

    def _take_job(self) -> Job | None:
        """The oldest waiting job this worker still owns (one lost or cancelled while it
        waited is dropped: already counted)."""
        while self._unstarted:
            job, _claimed_at = self._unstarted.popleft()
            if self._inflight.get(job.id) is job:
                return job
            self._busy -= 1
        return None

    async def _run_jobs(self, job: Job | None) -> None:
        """A handler task: ``job``, then the jobs that wait, one at a time; it lets the
        claim loops and batchers in every :data:`JOBS_BEFORE_YIELD` jobs even when the
        handlers never wait."""
        ran = 0
        try:
            while job is not None:
                await self._execute(job)
                job = self._take_job()
                ran += 1
                if job is not None and ran % JOBS_BEFORE_YIELD == 0:
                    await asyncio.sleep(0)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._handlers.discard(task)

    async def _execute(self, job: Job) -> None:
        """Run one job's handler and report, then free its slot."""
        handed_off = False
        started = time.perf_counter()
        try:
            handed_off = await self._run_handler(job)
        finally:
            self.lookahead.job_ran(time.perf_counter() - started)
            if not handed_off:
                self._forget(job)
            self._busy -= 1
            # a slot freed (a job handed to the batcher still holds its slot): wake the
            # claim loops when that makes a first free slot or a whole batch
            if not handed_off and self._free() in (1, min(self.batch, self._capacity_now())):
                self._wake.set()

    async def _run_handler(self, job: Job) -> bool:
        """Run the handler and report; True when the completion was left to a batcher.
        A job cancelled meanwhile (its handler told) writes nothing: it is ``cancelled``."""
        if job.cancelled():
            return False  # cancelled while it waited: never started
        if started_too_late(job):
            self._forget(job)
            await self._release([job], LATE_FOR_RATE_LIMIT)
            return False
        try:
            result = await self._handler.run_async(job)
            if result is not None and not await self._store_result(job, result):
                return False  # lost or cancelled since the last renewal (counted)
        except Permanent as exc:  # a ResultError (result not storable) too
            await self._report(job, "dead", f"{type(exc).__name__}: {exc}", None)
        except RetryAfter as exc:
            await self._report(job, "retry", str(exc), max(0.0, exc.delay))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not job.cancelled() or (task is not None and task.cancelling()):
                raise  # the worker's own shutdown cancelled it
            # else an operator cancelled the job and its handler's task: nothing to write
        except Exception as exc:  # noqa: BLE001 - a handler may raise anything
            if not job.cancelled():  # e.g. JobCancelled: nothing is written
                await self._report(job, "retry", failure_summary(exc),
                                   self.backoff.delay(job.attempt))
        else:
            if self._inflight.get(job.id) is not job:
                return False  # released or lost meanwhile; its new owner reports
            self._acking[job.id] = job  # it keeps its slot until the batch commits
            self._acks.append(job)
            self._ack_ready.set()
            return True
        return False

    def _start_writing(self, jobs: Sequence[Job]) -> list[Job]:
        """The jobs of ``jobs`` this worker still owns, now marked as being written."""
        return mark_writing(self._inflight, self._writing, jobs)

    def _forget(self, job: Job) -> None:
        """Stop owning ``job`` (its outcome is written, or it was lost)."""
        forget(self._inflight, self._writing, job)

    def _disown(self, jobs: Sequence[Job]) -> None:
        """Forget unstarted ``jobs`` taken out of the waiting line (to be released)."""
        for job in jobs:
            if self._inflight.get(job.id) is job:
                del self._inflight[job.id]
            self._busy -= 1

    async def _store_result(self, job: Job, result: Any) -> bool:
        """Store a handler's return value before its completion; False when the claim lost
        the job (counted) or the lease ran out first."""
        self.queue.queue.dump_result(result)  # ResultError: the job goes to dead
        if self._inflight.get(job.id) is not job:
            return False  # released or lost meanwhile (already counted)
        written = await self._write([job], lambda: _one(self.queue.store_result(job, result)))
        if written is not None and not written[0][0]:
            await self._record(job, "succeeded", False, written[1], "", None)
        return written is not None and written[0][0]

    async def _report(self, job: Job, outcome: str, error: str,
                      retry_in: float | None) -> None:
        """Write a failure, retrying through connection trouble until the lease ends."""
        if not self._start_writing([job]):
            return  # released or lost meanwhile; its new owner reports
        written = await self._write([job], lambda: _one(
            self.queue.fail(job, error, retry_in=retry_in)))
        if written is not None:
            await self._record(job, outcome, written[0][0], written[1], error, retry_in)

    async def _write(self, jobs: Sequence[Job], write: Callable[[], Awaitable[list[bool]]]
                     ) -> tuple[list[bool], bool] | None:
        """``await write()`` retried through connection trouble (``WriteRetry``): its
        results and whether an earlier try was cut, or None when the lease ran out first
        (the jobs will run again)."""
        retry = WriteRetry(jobs, self.lease, self.worker_id, log)
        while True:
            try:
                return await write(), retry.interrupted
            except Exception as exc:  # noqa: BLE001 - keep trying while the lease lives
                delay = retry.failed(exc)
                if delay is None:
                    return None
                await asyncio.sleep(delay)

    async def _record(self, job: Job, outcome: str, ok: bool, interrupted: bool,
                      error: str, retry_in: float | None) -> None:
        """Count and log one written outcome (a refused one as cancelled when it was)."""
        if ok:
            self.outcomes.written(job, outcome, error, retry_in)
        else:
            self.outcomes.refused(job, outcome, interrupted, await self._was_cancelled(job))

    async def _was_cancelled(self, job: Job) -> bool:
        """Whether ``job``'s generation was cancelled (False where that cannot be read)."""
        try:
            return (await self.queue.cancelled([job]))[0]
        except Exception as exc:  # noqa: BLE001 - then it counts as lost
            log.warning("worker.db_error worker=%s error=%s: %s; could not tell whether "
                        "job_id=%d was cancelled", self.worker_id, type(exc).__name__, exc,
                        job.id)
            return False

    async def _ack_loop(self) -> None:
        """A completion batcher: write the completions the handlers left, up to
        ``BATCH_LIMIT`` a statement (``complete_many``), each batch what finished while
        the previous one was written; once closed, write what is left, then stop."""
        while True:
            while not self._acks:
                if self._acks_closed:
                    return
                self._ack_ready.clear()
                await self._ack_ready.wait()
            jobs = [self._acks.popleft() for _ in range(min(BATCH_LIMIT, len(self._acks)))]
            owned = self._start_writing(jobs)  # one lost meanwhile is not reported
            complete_many = self.queue.complete_many  # looked up per batch (it may be wrapped)
            written = await self._write(owned, functools.partial(complete_many, owned)
                                        ) if owned else None
            for job in jobs:
                if self._acking.get(job.id) is job:
                    del self._acking[job.id]
                self._forget(job)
            if written is not None:
                results, interrupted = written
                for job, ok in zip(owned, results, strict=True):
                    await self._record(job, "succeeded", ok, interrupted, "", None)
            self._wake.set()

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.lease / 3)
            jobs = list(self._inflight.values())
            try:  # one statement per tick, whatever the number of jobs
                results = await self.queue.renew_many(jobs, lease=self.lease)
            except Exception as exc:  # noqa: BLE001 - try again next beat
                log.warning("job.renew_error job_ids=%s worker=%s error=%s",
                            ",".join(str(j.id) for j in jobs), self.worker_id, exc)
                continue
            refused = [job for job, renewed in zip(jobs, results, strict=True)
                       if not renewed and self._owned_not_writing(job)]
            if not refused:
                continue
            try:  # cancelled by an operator, or taken by another owner?
                cancelled = await self.queue.cancelled(refused)
            except Exception as exc:  # noqa: BLE001 - ask again next beat
                log.warning("job.renew_error job_ids=%s worker=%s error=%s",
                            ",".join(str(j.id) for j in refused), self.worker_id, exc)
                continue
            for job, was_cancelled in zip(refused, cancelled, strict=True):
                if not self._owned_not_writing(job):  # its outcome is being written
                    continue
                del self._inflight[job.id]
                if was_cancelled:
                    self.outcomes.cancelled(job, "lease renewal refused")
                else:
                    self.outcomes.lost(job, "lease renewal refused")

    def _owned_not_writing(self, job: Job) -> bool:
        return self._inflight.get(job.id) is job and self._writing.get(job.id) is not job

    def _cancel_announced(self, job_id: int, generation: int) -> None:
        """The database announced that a running job was cancelled (PostgreSQL NOTIFY)."""
        job = self._inflight.get(job_id)
        if job is None or job.attempt != generation:
            return  # not ours (every worker hears every cancel)
        if self._writing.get(job_id) is job:
            job._cancel.set()  # the write's refusal counts it
            return
        del self._inflight[job_id]
        self.outcomes.cancelled(job, "announced by the database")

    # ---- shutdown -----------------------------------------------------------------------

    async def _shutdown(self, claim_loops: Sequence[asyncio.Task[None]],
                        batchers: Sequence[asyncio.Task[None]]) -> None:
        self.stop()
        await asyncio.gather(*claim_loops, return_exceptions=True)  # their last claims wait
        unstarted = [job for job, _ in self._unstarted]
        self._unstarted.clear()
        self._disown(unstarted)
        await self._release(unstarted, "not started")
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=self.grace)
        # handlers still running after the grace: cancel them, give their jobs back
        leftover = [j for j in self._inflight.values() if j.id not in self._acking]
        for job in leftover:
            del self._inflight[job.id]
        tasks = list(self._handlers)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._release(leftover, "grace over")
        self._acks_closed = True  # the batchers write the completions left, then stop
        self._ack_ready.set()
        await asyncio.gather(*batchers, return_exceptions=True)

    async def _release(self, jobs: Sequence[Job], why: str) -> None:
        """Give ``jobs`` back to ready (the attempt is given back too)."""
        for job in jobs:
            try:
                if await self.queue.release(job):
                    self.outcomes.released(job, why)
            except Exception as exc:  # noqa: BLE001 - its lease will expire instead
                log.error("job.release_failed job_id=%d worker=%s error=%s",
                          job.id, self.worker_id, exc)


async def _one(result: Awaitable[bool]) -> list[bool]:
    """A single outcome write's result, as the list that ``_write`` handles."""
    return [await result]
