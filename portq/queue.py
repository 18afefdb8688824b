"""The public API: :func:`connect` and :class:`Queue`."""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from portq import sqla
from portq.backends import backend_for
from portq.backends.dependencies import validate_depends_on
from portq.backends.sql.common import JOB_ORDERS
from portq.durations import seconds_of
from portq.errors import ConfigurationError, InvalidQueueName, PayloadError, ResultError
from portq.hooks import EnqueueHooks, Hook
from portq.job import (
    ACTIVE_STATES,
    ALL_STATES,
    SCHEDULED,
    Claim,
    EnqueueResult,
    Job,
    JobError,
    JobRecord,
    QueueStats,
    State,
    WorkerActivity,
    WorkerInfo,
    progress_value,
)
from portq.protocol import Backend, NewJob, UniqueScope
from portq.retry import DEFAULT_BACKOFF, Backoff
from portq.runtime.middleware import Middleware, Step, step_of
from portq.stats import JobStats, bucket_seconds, build_stats, window_seconds
from portq.url import parse_url

if TYPE_CHECKING:
    from typing_extensions import TypeVar as TypeVarWithDefault

    from portq.backends.sql import SqlBackend
    #: the backend a Queue drives: its code uses only the contract (:class:`Backend`); a
    #: bare ``Queue`` (what :func:`connect` builds) is one over the SQL machinery
    B = TypeVarWithDefault("B", bound=Backend, covariant=True, default=SqlBackend)
else:
    B = TypeVar("B", bound=Backend, covariant=True)

QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
MAX_KEY_LENGTH = 255
MAX_SEARCH_LENGTH = 200
INT32 = 2**31 - 1
DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20
DEFAULT_MAX_ATTEMPTS = 25
#: the deepest nesting of arrays/objects a payload may have, on every engine: MariaDB's
#: JSON_VALID refuses 32 levels (MySQL 8.4 allows 100, SQL Server 128, PostgreSQL and
#: SQLite more), so the common limit is 31
MAX_PAYLOAD_DEPTH = 31
# an escaped NUL (\u0000) in JSON text: preceded by an even number of backslashes
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


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


def validate_queue(name: str) -> str:
    """Return ``name`` if it is 1-128 characters of ``[A-Za-z0-9_.:-]``."""
    if not isinstance(name, str) or not QUEUE_NAME.match(name):
        raise InvalidQueueName(
            f"invalid queue name {name!r}: use 1-128 characters of letters, digits, "
            "'_', '.', ':' and '-'")
    return name


def validate_worker_id(worker_id: str) -> str:
    """Return ``worker_id`` if it is a string of 1-200 characters every engine stores."""
    if not isinstance(worker_id, str) or not 1 <= len(worker_id) <= 200:
        raise ConfigurationError("worker_id must be a string of 1-200 characters")
    if not _storable_text(worker_id):
        raise ConfigurationError(f"worker_id {worker_id!r} holds a NUL character or a lone "
                                 "surrogate, which not every database can store")
    return worker_id


def validate_key(key: str) -> str:
    """Return ``key`` if it is 1-255 characters every engine can store."""
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise ConfigurationError(f"key must be a non-empty string of at most "
                                 f"{MAX_KEY_LENGTH} characters (Oracle stores '' as NULL), "
                                 f"got {key!r}")
    if not _storable_text(key):
        raise ConfigurationError(f"key {key!r} holds a NUL character or a lone surrogate, "
                                 "which not every database can store")
    return key


def positive_int(value: Any, what: str, *, allow_zero: bool = False) -> int:
    """``value`` as an int that is > 0 (or >= 0), else a :class:`ConfigurationError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero) or value > INT32:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigurationError(f"{what} must be {bound} and <= {INT32}, got {value}")
    return value


def validate_priority(priority: Any) -> int:
    """Return ``priority`` if it is an integer in 32-bit range (higher runs first)."""
    if isinstance(priority, bool) or not isinstance(priority, int) or \
            not -INT32 <= priority <= INT32:
        raise ConfigurationError(f"priority must be an integer in 32-bit range, "
                                 f"got {priority!r}")
    return priority


UNIQUE_OPTIONS = ("unique_per_queue", "unique_for", "unique_states")
#: the per-key concurrency limit's options of :meth:`Queue.enqueue`
CONCURRENCY_OPTIONS = ("concurrency_key", "concurrency_limit")
#: what other job libraries call some of :meth:`Queue.enqueue`'s options
SYNONYMS = {"retries": "max_attempts", "max_retries": "max_attempts", "eta": "run_at",
            "countdown": "delay", "unique_key": "key", "idempotency_key": "key"}
#: every keyword argument of :meth:`Queue.enqueue` (for the hint of a mistyped one)
ENQUEUE_OPTIONS = ("priority", "run_at", "delay", "max_attempts", "key", "conn",
                   *("unique_per_queue", "unique_for", "unique_states"), *CONCURRENCY_OPTIONS,
                   *("depends_on", "on_dependency_failure"))
#: the most jobs a rate limit may allow per period
MAX_RATE_LIMIT = 1_000_000


def concurrency_options(key: Any, limit: Any) -> tuple[str | None, int | None]:
    """A validated per-key concurrency limit: both given (a key as :func:`validate_key`
    accepts, a limit of at least 1) or neither."""
    if key is None and limit is None:
        return None, None
    if key is None:
        raise ConfigurationError("concurrency_limit limits the jobs of one concurrency_key: "
                                 "give concurrency_key too")
    if limit is None:
        raise ConfigurationError(f"concurrency_key {key!r} needs concurrency_limit (the "
                                 "most running jobs of that key, at least 1)")
    try:
        validate_key(key)
    except ConfigurationError as exc:
        raise ConfigurationError(f"concurrency_key: {exc}") from None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= INT32:
        raise ConfigurationError(f"concurrency_limit must be an integer of at least 1, "
                                 f"got {limit!r}")
    return key, limit


def unique_scope(queue: str, key: str | None, *, unique_per_queue: bool = False,
                 unique_for: float | timedelta | None = None,
                 unique_states: Sequence[str] | None = None) -> UniqueScope | None:
    """The scope of a scoped ``key`` (None when no scope is asked for). The key is unique
    among the jobs of ``queue`` with ``unique_per_queue`` (else of every queue), and an
    existing job of it counts only while younger than ``unique_for`` seconds and in one
    of ``unique_states``; otherwise the enqueue creates a new job. A scoped key lives
    apart from plain keys and is not the job's ``key`` (which stays None)."""
    if not unique_per_queue and unique_for is None and unique_states is None:
        return None
    if key is None:
        raise ConfigurationError("unique_per_queue, unique_for and unique_states scope a key: "
                                 "give key= too")
    if not isinstance(unique_per_queue, bool):
        raise ConfigurationError(f"unique_per_queue must be True or False, "
                                 f"got {unique_per_queue!r}")
    period_ms = None if unique_for is None else given_ms(unique_for, "unique_for")
    states: tuple[str, ...] | None = None
    if unique_states is not None:
        names = [unique_states] if isinstance(unique_states, str) else list(unique_states)
        bad = [s for s in names if s not in set(State)]
        if bad or not names:
            raise ConfigurationError(f"unique_states must be some of "
                                     f"{', '.join(State)}; got {names!r}")
        states = tuple(sorted(set(names)))
    scope = json.dumps([queue if unique_per_queue else None, key], ensure_ascii=False)
    return UniqueScope(hashlib.sha256(scope.encode("utf-8")).hexdigest(), period_ms, states)


#: most times one job may be snoozed (portq.Snooze): a later Snooze fails the attempt
MAX_SNOOZES = 100
#: the longest per-job timeout (enqueue(timeout=)): 24 days, within a 32-bit column of ms
MAX_TIMEOUT_MS = 24 * 86_400_000


def seconds(value: Any) -> Any:
    """A :class:`datetime.timedelta` as float seconds; anything else unchanged (for
    :func:`duration_ms` to validate)."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def given_ms(value: Any, what: str, *, allow_zero: bool = False) -> int:
    """:func:`duration_ms` of seconds or a ``timedelta`` (what the public API accepts)."""
    return duration_ms(seconds(value), what, allow_zero=allow_zero)


def duration_ms(seconds: Any, what: str, *, allow_zero: bool = False) -> int:
    """Seconds (int or float) as whole milliseconds, validated."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or \
            not math.isfinite(seconds):
        raise ConfigurationError(f"{what} must be a number of seconds, got {seconds!r}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ConfigurationError(f"{what} must be {'>= 0' if allow_zero else '> 0'} seconds, "
                                 f"got {seconds}")
    ms = math.ceil(seconds * 1000)
    if ms > 100 * 365 * 86_400_000:
        raise ConfigurationError(f"{what} of {seconds} seconds is too long")
    return ms


class Queue(Generic[B]):
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
            unknown = set(spec) - {"queue", "payload", "priority", "run_at", "delay",
                                   "max_attempts", "key", "timeout", *UNIQUE_OPTIONS,
                                   *CONCURRENCY_OPTIONS, "depends_on",
                                   "on_dependency_failure"}
            if unknown:
                raise ConfigurationError(f"job #{i} has unknown fields {sorted(unknown)}")
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

    def snooze(self, job: Job | Claim, delay: Any) -> bool:
        """Run the job again after ``delay`` (seconds, a timedelta or ``'5m'``) without
        spending its attempt; False when the claim no longer owns the job or the job was
        snoozed :data:`MAX_SNOOZES` times already (nothing is written then)."""
        ms = duration_ms(seconds_of(delay, "snooze delay"), "snooze delay", allow_zero=True)
        return self.backend.snooze(_claim_of(job), ms, MAX_SNOOZES)

    # ---- maintenance and operators ------------------------------------------------------

    def reap(self, *, limit: int = 1000, delay: float | timedelta = 1.0) -> int:
        """Return expired leases to ready after ``delay`` seconds (or dead); count them."""
        return self.backend.reap(positive_int(limit, "limit"),
                                 given_ms(delay, "delay", allow_zero=True))

    def prune(self, older_than: float | timedelta, *, limit: int = 1000,
              states: Sequence[str] = (State.SUCCEEDED, State.CANCELLED),
              queue: str | None = None) -> int:
        """Delete up to ``limit`` jobs finished ``older_than`` seconds ago; dead ones are
        kept unless ``states`` names them."""
        bad = [s for s in states if s not in ("succeeded", "dead", "cancelled")]
        if bad or not states:
            raise ConfigurationError(f"prune states must be among succeeded, dead, cancelled; "
                                     f"got {list(states)!r}")
        if queue is not None:
            validate_queue(queue)
        return self.backend.prune(given_ms(older_than, "older_than", allow_zero=True),
                                  positive_int(limit, "limit"), [str(s) for s in states], queue)

    def retry_dead(self, job_id: int, *, extra_attempts: int = 1) -> bool:
        """Make a dead or cancelled job ready again with the attempts it had left plus
        ``extra_attempts``; False if it was not dead or cancelled."""
        return self.backend.retry_dead(positive_int(job_id, "job_id"),
                                       positive_int(extra_attempts, "extra_attempts"))

    def cancel(self, job_id: int) -> bool:
        """Cancel a ready or running job; False if it was not ready or running."""
        return self.backend.cancel(positive_int(job_id, "job_id"))

    def finished_per_minute(self, minutes: int = 60) -> dict[str, dict[str, list[int]]]:
        """Jobs finished per minute over the last ``minutes``: ``{queue: {state: counts}}``
        where ``counts[0]`` is the oldest minute and ``counts[-1]`` the current one."""
        span = positive_int(minutes, "minutes")
        if span > 1440:
            raise ConfigurationError(f"minutes must be at most 1440, got {span}")
        out: dict[str, dict[str, list[int]]] = {}
        for queue, state, ago, count in self.backend.finished_per_minute(span):
            series = out.setdefault(queue, {}).setdefault(state, [0] * span)
            series[span - 1 - ago] += count
        return out

    def job_stats(self, window: float | timedelta | str = "1h",
                  queue: str | None = None) -> list[JobStats]:
        """Per queue (or only ``queue``), the jobs finished in the last ``window`` (``'1h'``,
        ``'24h'``, ``'7d'``, any duration up to 31 days): succeeded, dead and cancelled
        counts per bucket (1 min for 1 h, 15 min for 24 h, 1 h for 7 d) and wait time
        (created -> first start) and run time percentiles (p50, p95, p99, ms, within 19 %).
        Counted by the database over the window's rows only (see :mod:`portq.stats`)."""
        window_s = window_seconds(window)
        name = None if queue is None else validate_queue(queue)
        bucket_s = bucket_seconds(window_s)
        stats = build_stats(self.backend.stats_series(window_s, bucket_s),
                            self.backend.stats_latency(window_s), window_s, bucket_s)
        return [s for s in stats if name is None or s.queue == name]

    def delete_finished(self, job_id: int) -> bool:
        """Delete one finished (succeeded, dead or cancelled) job; False if it is not."""
        return self.backend.delete_finished(positive_int(job_id, "job_id"))

    def retry_many(self, queue: str | None, *, states: Sequence[str] = (State.DEAD,),
                   limit: int = 1000, extra_attempts: int = 1) -> int:
        """:meth:`retry_dead` for up to ``limit`` jobs of ``queue`` (None: every queue) in
        ``states`` (dead, cancelled); returns how many were made ready."""
        return self.backend.retry_many(
            _queue_or_none(queue), _states(states, (State.DEAD, State.CANCELLED), "retry"),
            positive_int(limit, "limit"), positive_int(extra_attempts, "extra_attempts"))

    def cancel_many(self, queue: str | None, *, states: Sequence[str] = (State.READY,),
                    limit: int = 1000) -> int:
        """:meth:`cancel` for up to ``limit`` jobs of ``queue`` (None: every queue) in
        ``states`` (ready, running, waiting); returns how many were cancelled."""
        return self.backend.cancel_many(
            _queue_or_none(queue), _states(states, (*ACTIVE_STATES, State.WAITING), "cancel"),
            positive_int(limit, "limit"))

    def stats(self, queue: str | None = None) -> list[QueueStats]:
        """Per-queue counts, oldest-ready age, retry rate and whether it is paused."""
        return self.backend.stats(_queue_or_none(queue))

    def pause(self, queue: str) -> None:
        """Stop every worker, on every host, from claiming jobs of ``queue`` (from its next
        claim: within one poll interval); running jobs finish normally. Persisted in the
        database until :meth:`resume`; jobs may still be enqueued meanwhile."""
        self.backend.set_paused(validate_queue(queue), True)

    def resume(self, queue: str) -> None:
        """Let workers claim jobs of ``queue`` again (undoes :meth:`pause`)."""
        self.backend.set_paused(validate_queue(queue), False)

    def paused_queues(self) -> list[str]:
        """The paused queues, sorted."""
        return self.backend.paused_queues()

    def set_concurrency_limit(self, queue: str, max_running: int | None) -> None:
        """At most ``max_running`` jobs of ``queue`` run at once across every worker on
        every host (None removes the limit); the rest wait ready and are claimed as running
        ones finish. Enforced in the claim transaction; a running worker sees a new limit
        within a second."""
        self.backend.set_concurrency_limit(
            validate_queue(queue),
            None if max_running is None else positive_int(max_running, "max_running"))

    def set_fairness(self, queue: str, fair: bool) -> None:
        """Share ``queue`` fairly across its jobs' ``concurrency_key``s (``fair=True``):
        claims take one job of each key in turn, then one unkeyed job, so one key's burst
        delays another key's jobs by one round at most; ``False`` restores plain claim order
        (priority, run_at, id). A running worker follows within a second."""
        if not isinstance(fair, bool):
            raise ConfigurationError(f"fair must be True or False, not {fair!r}")
        self.backend.set_fairness(validate_queue(queue), fair)

    def set_rate_limit(self, queue: str, limit: int | None,
                       per_seconds: float | timedelta | None = None) -> None:
        """At most ``limit`` jobs of ``queue`` start per ``per_seconds`` across every worker
        on every host, in every sliding window of that length (``set_rate_limit(queue,
        None)`` removes it); the rest wait ready. Enforced in the claim transaction (see
        docs/operations.md, "Rate limits"); a running worker sees a new limit within a
        second."""
        validate_queue(queue)
        if limit is None:
            if per_seconds is not None:
                raise ConfigurationError("set_rate_limit(queue, None) clears the limit: "
                                         "give no per_seconds with it")
            self.backend.set_rate_limit(queue, None, None)
            return
        n = positive_int(limit, "limit")
        if n > MAX_RATE_LIMIT:
            raise ConfigurationError(f"limit must be at most {MAX_RATE_LIMIT}, got {n}")
        if per_seconds is None:
            raise ConfigurationError("set_rate_limit needs per_seconds (the period)")
        period_ms = given_ms(per_seconds, "per_seconds")
        if period_ms < 10:
            raise ConfigurationError(f"per_seconds must be at least 0.01, got {per_seconds!r}")
        self.backend.set_rate_limit(queue, n, period_ms)

    def jobs(self, state: str | None = None, *, queue: str | None = None, limit: int = 100,
             after_id: int = 0, key: str | None = None, text: str | None = None,
             order: str = "id", after_run_at: datetime | None = None) -> list[JobRecord]:
        """Up to ``limit`` jobs: of one state (None or ``"all"``: every state;
        ``"scheduled"``: ready jobs not yet due, always in run_at order), one queue
        (None: every queue), the job of ``key``, or those whose payload JSON contains
        ``text`` (case-insensitive). ``order``: ``id`` (oldest first), ``-id`` (newest
        first) or ``run_at``. Pages by key: pass the last row's id as ``after_id`` (and,
        ordered by ``run_at``, its ``run_at`` as ``after_run_at``). A ready job whose
        run_at is after the database clock comes with ``scheduled=True``."""
        if order not in JOB_ORDERS:
            raise ConfigurationError(f"order must be one of {', '.join(JOB_ORDERS)}, "
                                     f"got {order!r}")
        if order == "run_at" and after_id and after_run_at is None:
            raise ConfigurationError("paging by run_at needs after_run_at with after_id")
        if after_run_at is not None and (not isinstance(after_run_at, datetime)
                                         or after_run_at.utcoffset() is None):
            raise ConfigurationError("after_run_at must be a timezone-aware datetime")
        if key is not None:
            validate_key(key)
        if text is not None and (not isinstance(text, str) or len(text) > MAX_SEARCH_LENGTH
                                 or not _storable_text(text)):
            raise ConfigurationError(f"payload search text must be at most "
                                     f"{MAX_SEARCH_LENGTH} characters without NUL")
        if state == ALL_STATES:
            state = None
        if state is not None and state != SCHEDULED:
            _states([state], tuple(State), "list")
        if isinstance(after_id, bool) or not isinstance(after_id, int) or after_id < 0:
            raise ConfigurationError(f"after_id must be an integer >= 0, got {after_id!r}")
        now = self.backend.db_now()
        scheduled_only = state == SCHEDULED
        if scheduled_only:
            state = State.READY.value   # a plain str: PyMySQL escapes an enum member oddly
            if key is None:   # the ready jobs after now, in run_at order: keyset from now
                order = "run_at"
                if not after_id:
                    after_id, after_run_at = 2**63 - 1, now
        records = [_mark_scheduled(r, now) for r in self.backend.jobs(
            state, _queue_or_none(queue), positive_int(limit, "limit"), after_id, key=key,
            text=text or None, order=order, after_run_at=after_run_at)]
        return [r for r in records if r.scheduled] if scheduled_only else records

    def job(self, job_id: int, *, conn: Any = None) -> JobRecord | None:
        """The whole row of one job; None when no job has that id. With ``conn`` (as
        :meth:`enqueue` takes it) the read runs on that connection, in its open
        transaction: it sees jobs that transaction enqueued and has not committed."""
        dbapi = self._dbapi(conn)
        record = self.backend.job(positive_int(job_id, "job_id"), dbapi)
        if record is None or record.state != State.READY:
            return record
        return _mark_scheduled(record, self.backend.db_now(dbapi))

    def store_result(self, job: Job | Claim, result: Any) -> bool:
        """Store a running job's return value (JSON, at most ``max_result_bytes``) in its
        own transaction, only while the claim owns the job; False: ownership was lost.
        Call it before :meth:`complete` (the worker does, for a handler's non-None return
        value); :meth:`result` shows it once the job has succeeded."""
        return self.backend.store_result(_claim_of(job), self.dump_result(result))

    def result(self, job_id: int, *, conn: Any = None) -> Any:
        """The stored return value of a succeeded job; None when the job has not succeeded
        (yet), returned None, or was pruned. ``conn``: as :meth:`job`."""
        return self.backend.result(positive_int(job_id, "job_id"), self._dbapi(conn))

    def dependency_results(self, job_id: int, *, conn: Any = None) -> dict[int, Any]:
        """``{dependency id: result}``: the stored results of the job's dependencies
        (``enqueue(depends_on=...)``) that stored one. ``conn``: as :meth:`job`."""
        return self.backend.dependency_results(positive_int(job_id, "job_id"),
                                               self._dbapi(conn))

    def error_history(self, job_id: int, *, conn: Any = None) -> list[JobError]:
        """Every recorded failed attempt of a job (attempt, worker, error, failed_at).
        ``conn``: as :meth:`job`."""
        return self.backend.error_history(positive_int(job_id, "job_id"), self._dbapi(conn))

    def workers(self) -> list[WorkerInfo]:
        """The live workers of the registry (rows whose heartbeats have not expired)."""
        return self.backend.workers()

    def concurrency_of(self, job_id: int) -> tuple[str, int] | None:
        """A job's per-key limit: ``(concurrency_key, concurrency_limit)``, or None."""
        return self.backend.job_concurrency(positive_int(job_id, "job_id"))

    def key_limits(self, queue: str, *, limit: int = 20) -> list[tuple[str, int, int]]:
        """The per-key limits in use in ``queue``: ``(key, limit, running)`` for the keys
        of its running jobs, busiest first, at most ``limit`` keys."""
        return self.backend.key_limits(validate_queue(queue), positive_int(limit, "limit"))

    def worker_activity(self) -> dict[str, WorkerActivity]:
        """Per live worker id: the running jobs the job table says it holds, and the
        seconds until its registry row expires unless it beats again."""
        return self.backend.worker_activity()

    def job_errors(self, job_id: int) -> list[tuple[int, str, str]]:
        """``(attempt, worker_id, error)`` for each failed attempt of a job."""
        return self.backend.job_errors(positive_int(job_id, "job_id"))


def _mark_scheduled(record: JobRecord, now: datetime) -> JobRecord:
    if record.state == State.READY and record.run_at is not None and record.run_at > now:
        return dataclasses.replace(record, scheduled=True)
    return record


def _unexpected(function: str, name: str, known: Sequence[str]) -> str:
    """Python's own words for a wrong keyword argument, naming the public function, with
    the nearest real option as a hint."""
    close = [SYNONYMS[name]] if SYNONYMS.get(name) in known else \
        difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]}?)" if close else \
        f"; it takes {', '.join(known)}"
    return f"{function}() got an unexpected keyword argument {name!r}{hint}"


def _queue_or_none(queue: str | None) -> str | None:
    return None if queue is None else validate_queue(queue)


def _states(states: Sequence[str], allowed: Sequence[str], what: str) -> list[str]:
    """``states`` as plain strings, or a ConfigurationError naming the ones ``what`` takes."""
    names = [str(s) for s in allowed]
    if not states or any(s not in names for s in states):
        raise ConfigurationError(f"can only {what} jobs in states {', '.join(names)}; "
                                 f"got {', '.join(map(str, states)) or 'none'}")
    return [str(s) for s in states]


def dump_json(value: Any, what: str, limit: int, option: str,
              error: type[PayloadError]) -> str:
    """``value`` as compact JSON text of at most ``limit`` UTF-8 bytes, storable by every
    engine; else ``error`` naming the problem (``what`` is "payload" or "result")."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        raise error(_too_deep(what)) from None
    except (TypeError, ValueError) as exc:
        raise error(f"{what} is not JSON-serialisable: {exc}") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise error(f"{what} holds text that is not valid Unicode (a lone "
                    f"surrogate?): {exc}") from None
    if size > limit:
        raise error(f"{what} is {size} bytes of JSON, over the limit of {limit} ({option})")
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise error(f"{what} contains a NUL character (\\u0000) in a string or an object "
                    "key, which PostgreSQL cannot store: portq refuses it on every engine")
    if text.count("[") + text.count("{") > MAX_PAYLOAD_DEPTH and \
            _nesting_exceeds(value, MAX_PAYLOAD_DEPTH):
        raise error(_too_deep(what))
    return text


def _too_deep(what: str) -> str:
    return (f"{what} nests arrays/objects more than {MAX_PAYLOAD_DEPTH} levels deep, "
            "the limit on every engine (MariaDB refuses 32)")


def _storable_text(text: str) -> bool:
    """True when every engine can store ``text``: valid UTF-8 without NUL."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _nesting_exceeds(value: Any, limit: int) -> bool:
    """True when a JSON-serialisable value nests arrays/objects more than ``limit`` deep
    (iterative: no recursion limit)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _claim_of(job: Job | Claim) -> Claim:
    if isinstance(job, Claim):
        return job
    if isinstance(job, Job) and job.claim is not None:
        return job.claim
    raise ConfigurationError("expected a claimed Job or a Claim")
