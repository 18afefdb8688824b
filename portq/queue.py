"""The public API: :func:`connect` and :class:`Queue`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from portq import sqla
from portq.backends import backend_for
from portq.backends.dependencies import validate_depends_on
from portq.durations import seconds_of
from portq.errors import ConfigurationError, PayloadError, ResultError
from portq.hooks import EnqueueHooks, Hook
from portq.job import Claim, EnqueueResult, Job, progress_value
from portq.operators import MAX_RATE_LIMIT, MAX_SEARCH_LENGTH, B, QueueOperators
from portq.protocol import NewJob
from portq.retry import DEFAULT_BACKOFF, Backoff
from portq.runtime.middleware import Middleware, Step, step_of
from portq.url import parse_url
from portq.validate import (
    INT32,
    MAX_KEY_LENGTH,
    MAX_PAYLOAD_DEPTH,
    QUEUE_NAME,
    SYNONYMS,
    _unexpected,
    concurrency_options,
    dump_json,
    duration_ms,
    given_ms,
    positive_int,
    seconds,
    unique_scope,
    validate_key,
    validate_priority,
    validate_queue,
    validate_worker_id,
)

#: the names this module has always offered (the validators now live in portq.validate,
#: the operator side of Queue in portq.operators)
__all__ = [
    "CONCURRENCY_OPTIONS", "DEFAULT_MAX_ATTEMPTS", "DEFAULT_MAX_PAYLOAD_BYTES",
    "ENQUEUE_OPTIONS", "INT32", "MAX_KEY_LENGTH", "MAX_PAYLOAD_DEPTH", "MAX_RATE_LIMIT",
    "MAX_SEARCH_LENGTH", "MAX_SNOOZES", "MAX_TIMEOUT_MS", "QUEUE_NAME", "SYNONYMS",
    "UNIQUE_OPTIONS", "Queue", "concurrency_options", "connect", "dump_json", "duration_ms",
    "given_ms", "positive_int", "seconds", "unique_scope", "validate_key",
    "validate_priority", "validate_queue", "validate_worker_id",
]

DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20
DEFAULT_MAX_ATTEMPTS = 25


def connect(url: str, **options: Any) -> Queue:
    """Open a :class:`Queue` on the database named by ``url``.

    Options: ``prefix`` (table prefix, default ``portq_``), ``pool_size`` (most
    connections this queue opens; given, it also bounds a worker's, see ``portq.pool``),
    ``max_payload_bytes`` (default 1 MiB), ``max_result_bytes`` (largest stored result,
    default 1 MiB), ``max_attempts`` (default 25),
    ``backoff`` (a :class:`portq.Backoff`), and engine options such as SQLite's
    ``busy_timeout_ms``.
    """
    queue_opts = {k: options.pop(k) for k in ("max_payload_bytes", "max_result_bytes",
                                                     "max_attempts", "backoff")
                  if k in options}
    backend = backend_for(parse_url(url), **options)
    backend.pool.bounded = "pool_size" in options
    return Queue(backend, **queue_opts)


UNIQUE_OPTIONS = ("unique_per_queue", "unique_for", "unique_states")
#: the per-key concurrency limit's options of :meth:`Queue.enqueue`
CONCURRENCY_OPTIONS = ("concurrency_key", "concurrency_limit")
#: every keyword argument of :meth:`Queue.enqueue` (for the hint of a mistyped one)
ENQUEUE_OPTIONS = ("priority", "run_at", "delay", "max_attempts", "key", "conn",
                   *("unique_per_queue", "unique_for", "unique_states"), *CONCURRENCY_OPTIONS,
                   *("depends_on", "on_dependency_failure"))

#: the fields of one job's mapping in :meth:`Queue.enqueue_many`
JOB_FIELDS = frozenset(("queue", "payload", "timeout", *ENQUEUE_OPTIONS)) - {"conn"}

#: most times one job may be snoozed (portq.Snooze): a later Snooze fails the attempt
MAX_SNOOZES = 100
#: the longest per-job timeout (enqueue(timeout=)): 24 days, within a 32-bit column of ms
MAX_TIMEOUT_MS = 24 * 86_400_000



class Queue(QueueOperators[B]):
    """Jobs in one database. Thread-safe; share one per process.

    Delivery is at-least-once: a job may run again after a crash or a lost lease, so
    handlers with external effects should use the job's id or key for idempotency.
    """

    def __init__(self, backend: B, *,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                 max_result_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 backoff: Backoff = DEFAULT_BACKOFF) -> None:
        self.backend = backend
        self.max_payload_bytes = positive_int(max_payload_bytes, "max_payload_bytes")
        self.max_result_bytes = positive_int(max_result_bytes, "max_result_bytes")
        self.default_max_attempts = positive_int(max_attempts, "max_attempts")
        self.backoff = backoff
        #: enqueue hooks (:meth:`add_enqueue_hook`) and the middleware every worker made on
        #: this queue runs outermost (:meth:`add_middleware`)
        self.hooks = EnqueueHooks()
        self.middleware: tuple[Step, ...] = ()

    def add_enqueue_hook(self, before: Hook | None = None, after: Hook | None = None) -> None:
        """Call ``before(job)`` for each new job before it is inserted (it may add strings
        to ``job.meta``, stored with the job) and ``after(job)`` once the insert returned
        (``job.id``, ``job.created``, or ``job.error``): see :mod:`portq.hooks`. Applies to
        :class:`portq.aio.AsyncQueue` over this queue too."""
        self.hooks.add(before, after)

    def add_middleware(self, middleware: Middleware) -> None:
        """Run ``middleware`` around the handler of every job of every worker made on this
        queue, outside the worker's own (see :mod:`portq.runtime.middleware`)."""
        self.middleware = (*self.middleware, step_of(middleware, "queue middleware"))

    def __repr__(self) -> str:
        return f"Queue({self.backend.url.redacted()!r})"

    def __enter__(self) -> Queue[B]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The database URL without its password."""
        return self.backend.url.redacted()

    def close(self) -> None:
        self.backend.close()

    # ---- schema -------------------------------------------------------------------------

    def migrate(self) -> int:
        """Create or upgrade portq's tables; safe to run concurrently and repeatedly."""
        return self.backend.migrate()

    # ---- enqueue ------------------------------------------------------------------------

    def enqueue(self, queue: str, payload: Any = None, *, priority: int = 0,
                run_at: datetime | None = None, delay: float | timedelta | None = None,
                max_attempts: int | None = None, key: str | None = None,
                conn: Any = None, **unique: Any) -> int:
        """Add one job and return its id (the existing job's id if ``key`` is taken).

        With ``conn`` (a DB-API connection of this engine's driver, or a SQLAlchemy
        ``Connection``/``Session``), the row is written in the caller's open transaction
        and becomes visible only if the caller commits. Without it, portq commits.

        A ``key`` alone is unique across all queues, for ever (until its job is pruned).
        ``unique_per_queue=True``, ``unique_for=seconds`` and ``unique_states=("ready",
        "running")`` scope it instead (see :func:`unique_scope`).

        ``concurrency_key="account:42", concurrency_limit=1``: at most that many running
        jobs of the queue with that key, on every worker; the rest wait ready and jobs
        behind them are claimed meanwhile (see docs/operations.md, "Per-key limits").
        """
        return self.enqueue_result(queue, payload, priority=priority, run_at=run_at,
                                   delay=delay, max_attempts=max_attempts, key=key,
                                   conn=conn, **unique).id

    def enqueue_result(self, queue: str, payload: Any = None, *, priority: int = 0,
                       run_at: datetime | None = None, delay: float | timedelta | None = None,
                       max_attempts: int | None = None, key: str | None = None,
                       conn: Any = None, **unique: Any) -> EnqueueResult:
        """:meth:`enqueue`, saying also whether a job was created (False: ``key`` already
        named the job whose id is returned)."""
        job = self.new_job(queue, payload, priority=priority, run_at=run_at, delay=delay,
                           max_attempts=max_attempts, key=key, **unique)
        return self._insert([job], conn)[0]

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]], *, conn: Any = None) -> list[int]:
        """Add many jobs in one transaction (or the caller's); each mapping holds
        ``queue``, ``payload`` and optionally the keyword arguments of :meth:`enqueue`."""
        built = self.new_jobs(jobs)
        if not built:
            return []
        return [result.id for result in self._insert(built, conn)]

    def _insert(self, jobs: list[NewJob], conn: Any) -> list[EnqueueResult]:
        """Insert ``jobs`` (in ``conn``'s transaction when given), with the enqueue hooks."""
        return self.insert_on(jobs, self._dbapi(conn))

    def insert_on(self, jobs: list[NewJob], dbapi: Any) -> list[EnqueueResult]:
        """Insert validated ``jobs`` with the enqueue hooks, in the open transaction of
        ``dbapi`` (a DB-API connection of this engine's driver, or one that behaves as
        one: :mod:`portq.aio` bridges async connections), or in portq's own (None)."""
        if not self.hooks:
            return self.backend.enqueue_results(jobs, conn=dbapi)
        jobs, seen = self.hooks.prepare(jobs)
        try:
            results = self.backend.enqueue_results(jobs, conn=dbapi)
        except BaseException as exc:
            self.hooks.finish(seen, None, exc)
            raise
        self.hooks.finish(seen, results)
        return results

    def new_jobs(self, jobs: Iterable[Mapping[str, Any]]) -> list[NewJob]:
        """Validate the job mappings of :meth:`enqueue_many`; raise before any is written."""
        built = []
        for i, spec in enumerate(jobs):
            if not isinstance(spec, Mapping) or "queue" not in spec:
                raise ConfigurationError(f"job #{i} must be a mapping with a 'queue'")
            if not JOB_FIELDS.issuperset(spec):
                unknown = sorted(set(spec) - JOB_FIELDS)
                raise ConfigurationError(f"job #{i} has unknown fields {unknown}")
            built.append(self.new_job(**spec))
        return built

    def new_job(self, queue: str, payload: Any = None, *, priority: int = 0,
                run_at: datetime | None = None, delay: float | timedelta | None = None,
                max_attempts: int | None = None, key: str | None = None,
                concurrency_key: str | None = None, concurrency_limit: int | None = None,
                timeout: Any = None, depends_on: Any = None,
                on_dependency_failure: str = "cancel", **unique: Any) -> NewJob:
        """Validate one job's fields; raise before anything is written. ``timeout``
        (seconds, a timedelta or ``'30s'``): the longest one attempt may run.
        ``depends_on`` (job ids): the job waits until they all succeeded; when one ends
        dead or cancelled it is cancelled (``on_dependency_failure="cancel"``) or runs
        anyway (``"run"``). See docs/operations.md, "Workflows"."""
        validate_queue(queue)
        validate_priority(priority)
        if run_at is not None and delay is not None:
            raise ConfigurationError("give run_at or delay, not both")
        if run_at is not None:
            if not isinstance(run_at, datetime):
                raise ConfigurationError(f"run_at must be a datetime, got {run_at!r}")
            if run_at.tzinfo is None or run_at.utcoffset() is None:
                raise ConfigurationError("run_at must be timezone-aware (e.g. "
                                         "datetime.now(timezone.utc)); got a naive datetime")
            try:
                run_at.astimezone(UTC)
            except OverflowError:
                raise ConfigurationError(
                    f"run_at {run_at.isoformat()} is out of range: in UTC it falls outside "
                    "years 1-9999") from None
        delay_ms = 0 if delay is None else given_ms(delay, "delay", allow_zero=True)
        attempts = self.default_max_attempts if max_attempts is None else \
            positive_int(max_attempts, "max_attempts")
        if key is not None:
            validate_key(key)
        unknown = sorted(set(unique) - set(UNIQUE_OPTIONS))
        if unknown:
            raise ConfigurationError(_unexpected("enqueue", unknown[0], ENQUEUE_OPTIONS))
        scope = unique_scope(queue, key, **unique)
        ckey, climit = concurrency_options(concurrency_key, concurrency_limit)
        timeout_ms = None if timeout is None else \
            duration_ms(seconds_of(timeout, "timeout"), "timeout")
        if timeout_ms is not None and timeout_ms > MAX_TIMEOUT_MS:
            raise ConfigurationError(f"timeout {timeout!r} is longer than the most a job may "
                                     f"run, {MAX_TIMEOUT_MS // 86_400_000} days")
        deps, on_failure = validate_depends_on(depends_on, on_dependency_failure)
        return NewJob(queue=queue, payload_json=self.dump_payload(payload), priority=priority,
                      run_at=run_at, delay_ms=delay_ms, max_attempts=attempts,
                      key=None if scope else key, unique=scope, concurrency_key=ckey,
                      concurrency_limit=climit, timeout_ms=timeout_ms, depends_on=deps,
                      on_dependency_failure=on_failure)

    def dump_payload(self, payload: Any) -> str:
        """The payload as JSON text, or :class:`PayloadError` naming the problem."""
        return dump_json(payload, "payload", self.max_payload_bytes, "max_payload_bytes",
                         PayloadError)

    def dump_result(self, result: Any) -> str:
        """A handler's return value as JSON text, or :class:`ResultError` naming the problem."""
        return dump_json(result, "result", self.max_result_bytes, "max_result_bytes",
                         ResultError)

    def _dbapi(self, conn: Any) -> Any:
        """The DB-API connection under ``conn`` (unwrapping SQLAlchemy), checked."""
        if conn is None:
            return None
        if sqla.is_sqlalchemy(conn):
            conn = sqla.dbapi_connection(conn)
        if not self.backend.accepts_connection(conn):
            raise ConfigurationError(
                f"conn is a {type(conn).__module__}.{type(conn).__name__}; the "
                f"{self.backend.engine} backend needs a {self.backend.driver_module} "
                "connection (or a SQLAlchemy Connection/Session using it)")
        return conn

    # ---- claiming -----------------------------------------------------------------------

    def claim(self, queue: str, worker_id: str, *, limit: int = 1,
              lease: float | timedelta = 30.0) -> list[Job]:
        """Claim up to ``limit`` due jobs of one queue for ``lease`` seconds."""
        validate_queue(queue)
        validate_worker_id(worker_id)
        return self.backend.claim(queue, worker_id, positive_int(limit, "limit"),
                                  given_ms(lease, "lease"))

    def renew(self, job: Job | Claim, lease: float | timedelta = 30.0) -> bool:
        """Extend the lease; False means the claim no longer owns the job."""
        return self.backend.renew(_claim_of(job), given_ms(lease, "lease"))

    def renew_many(self, jobs: Sequence[Job | Claim],
                   lease: float | timedelta = 30.0) -> list[bool]:
        """Extend several leases in one transaction; one result per job, as :meth:`renew`."""
        lease_ms = given_ms(lease, "lease")
        return self.backend.renew_many([_claim_of(j) for j in jobs], lease_ms) if jobs else []

    def complete(self, job: Job | Claim) -> bool:
        """Mark succeeded; False means ownership was lost and nothing was written."""
        return self.backend.complete(_claim_of(job))

    def complete_many(self, jobs: Sequence[Job | Claim]) -> list[bool]:
        """Complete several jobs in one transaction; one result per job, as :meth:`complete`."""
        return self.backend.complete_many([_claim_of(j) for j in jobs]) if jobs else []

    def fail(self, job: Job | Claim, error: str, *,
             retry_in: float | timedelta | None = None) -> bool:
        """Record a failure; retry after ``retry_in`` seconds, or dead if None or spent."""
        ms = None if retry_in is None else given_ms(retry_in, "retry_in", allow_zero=True)
        return self.backend.fail(_claim_of(job), str(error), ms)

    def set_progress(self, job: Job | Claim, fraction: float | None, message: str = "") -> bool:
        """Store a running job's progress now (fenced: False when the claim no longer owns
        the job). Handlers call :meth:`portq.Job.progress` instead, which never waits and
        is rate-limited; this is the one write it makes."""
        fraction, message = progress_value(fraction, message)
        return self.backend.set_progress(_claim_of(job), fraction, message)

    def release(self, job: Job | Claim) -> bool:
        """Return an unstarted job to ready now, giving its attempt back while the job's
        give-backs stay within its attempt budget (then spending it; dead when spent)."""
        return self.backend.release(_claim_of(job))

    def release_many(self, jobs: Sequence[Job | Claim]) -> list[bool]:
        """:meth:`release` for several jobs in one transaction (one commit); each result
        says whether that claim still owned its job."""
        return self.backend.release_many([_claim_of(j) for j in jobs])

    def snooze(self, job: Job | Claim, delay: Any) -> bool:
        """Run the job again after ``delay`` (seconds, a timedelta or ``'5m'``) without
        spending its attempt; False when the claim no longer owns the job or the job was
        snoozed :data:`MAX_SNOOZES` times already (nothing is written then)."""
        ms = duration_ms(seconds_of(delay, "snooze delay"), "snooze delay", allow_zero=True)
        return self.backend.snooze(_claim_of(job), ms, MAX_SNOOZES)

    def store_result(self, job: Job | Claim, result: Any) -> bool:
        """Store a running job's return value (JSON, at most ``max_result_bytes``) in its
        own transaction, only while the claim owns the job; False: ownership was lost.
        Call it before :meth:`complete` (the worker does, for a handler's non-None return
        value); :meth:`result` shows it once the job has succeeded."""
        return self.backend.store_result(_claim_of(job), self.dump_result(result))



def _claim_of(job: Job | Claim) -> Claim:
    if isinstance(job, Claim):
        return job
    if isinstance(job, Job) and job.claim is not None:
        return job.claim
    raise ConfigurationError("expected a claimed Job or a Claim")
