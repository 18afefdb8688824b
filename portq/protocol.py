"""The claim protocol every backend implements (docs/design.md). No SQL lives here.

Durations are milliseconds and are added to the *database* clock by the SQL itself;
no deadline is ever computed from a worker's clock.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Protocol

from portq.job import (
    Claim,
    EnqueueResult,
    Job,
    JobError,
    JobRecord,
    QueueStats,
    ServerInfo,
    WorkerActivity,
    WorkerInfo,
)
from portq.url import DatabaseURL


@dataclass(frozen=True)
class UniqueScope:
    """Where a scoped key is unique (built by :meth:`portq.Queue.new_job`): ``hash`` is the
    SHA-256 of the scope and key; a live job is one created less than ``period_ms`` ago
    (None: any age) whose state is in ``states`` (None: any state)."""

    hash: str
    period_ms: int | None = None
    states: tuple[str, ...] | None = None

    def holds_key(self, row: Sequence[Any] | None) -> bool:
        """Whether the key's latest job still holds the key, from its ``unique_job`` row
        (state, created within the period; None when the job is gone)."""
        return row is not None and bool(row[1]) and \
            (self.states is None or row[0] in self.states)


@dataclass(frozen=True)
class NewJob:
    """A validated job about to be inserted (built by :meth:`portq.Queue.enqueue`)."""

    queue: str
    payload_json: str
    priority: int = 0
    run_at: datetime | None = None
    delay_ms: int = 0
    max_attempts: int = 25
    key: str | None = None
    unique: UniqueScope | None = None
    #: per-key concurrency limit: at most ``concurrency_limit`` running jobs of the queue
    #: with this key (both None: no per-key limit)
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    #: the longest one attempt may run, in ms (None: the worker's job_timeout, if any)
    timeout_ms: int | None = None
    #: JSON text of a small object of strings stored with the job (the enqueuer's trace
    #: context, what enqueue hooks added; :mod:`portq.hooks`), or None
    meta: str | None = None
    #: ids of jobs this one waits for (distinct, ascending; :mod:`portq.backends.dependencies`)
    depends_on: tuple[int, ...] = ()
    #: when a dependency ends dead or cancelled: "cancel" this job, or "run" it anyway
    on_dependency_failure: str = "cancel"


@dataclass(frozen=True)
class Capabilities:
    """What differs per engine that the worker runtime may ask about (nothing else in the
    core branches on the engine)."""

    #: one write lock whose waiters sleep in a busy handler (SQLite): a worker then writes
    #: its claims and its outcomes from one thread
    single_writer: bool = False
    #: a worker's longest idle sleep unless given: short where only polling finds new jobs
    idle_max_default: float = 0.25
    #: an in-process database no second connection or process can share
    in_memory: bool = False
    #: cancelling a running job tells its worker at once (else within one heartbeat)
    announces_cancel: bool = False
    #: how a worker finds new jobs (its start-up line): "polling", or what it listens on
    listen_mode: str = "polling"
    #: claimers lock single rows and skip the rows others lock (SKIP LOCKED, READPAST);
    #: False where one write lock covers the whole database (SQLite)
    row_locking: bool = True


class Listener(Protocol):
    """A dedicated connection that waits for what :meth:`Backend.listener`'s engine
    announces (new jobs, cancelled running jobs)."""

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when jobs were announced meanwhile."""

    def take_cancelled(self) -> list[tuple[int, int]]:
        """The ``(job_id, generation)`` of running jobs announced cancelled since the last
        call ([] where the engine announces none: heartbeats find them)."""

    def close(self) -> None:
        """Close the connection."""


@dataclass(frozen=True)
class ServerIdentity:
    """Which server history a connection reached (PostgreSQL: the cluster's system
    identifier, shared by a primary and its physical standbys, and the timeline, which a
    promotion advances). Two connections with different identities are on different
    histories: what one committed the other may never have seen."""

    system_identifier: str
    timeline: int

    def __str__(self) -> str:
        return f"system {self.system_identifier} timeline {self.timeline}"


class Backend(ABC):
    """One database engine. Methods without ``conn`` run in their own short transaction."""

    engine: ClassVar[str]
    #: module prefix of the DB-API connection classes this backend accepts as ``conn=``
    driver_module: ClassVar[str]
    url: DatabaseURL
    #: the longest a statement of portq's own connections may run, in ms (None: no bound)
    statement_timeout_ms: int | None

    @property
    @abstractmethod
    def capabilities(self) -> Capabilities:
        """What this engine can and cannot do, for the worker runtime."""

    # ---- connections: what the runtime sizes, bounds and watches ----
    @property
    @abstractmethod
    def pool_size(self) -> int:
        """The most connections this backend opens at once."""

    @abstractmethod
    def resize_pool(self, size: int) -> None:
        """Let the pool grow to ``size`` connections (a worker's threads), unless its
        size was given by the user (then it stays: see :mod:`portq.pool`)."""

    @abstractmethod
    def bound_statements(self, ms: int | None) -> None:
        """Bound each statement of portq's own connections to ``ms`` from now on (None:
        unbounded); a worker bounds its queue's to its lease while it runs."""

    def listener(self, queues: Sequence[str]) -> Listener | None:
        """A :class:`Listener` for the jobs enqueued to ``queues`` (and cancels), or None
        where workers only poll (polling stays the correctness path either way)."""
        return None

    @abstractmethod
    def watch_identity(self, callback: Callable[[ServerIdentity, ServerIdentity], object]
                       ) -> None:
        """Call ``callback(old, new)`` when a new connection reaches a server of another
        history (:meth:`server_identity`; never where the engine has no such thing)."""

    @abstractmethod
    def accepts_connection(self, conn: Any) -> bool:
        """Whether ``conn`` (a caller's DB-API connection) is this engine's driver's."""

    @abstractmethod
    def check_schema(self) -> None:
        """Raise :class:`portq.errors.SchemaError` unless the schema is at this portq's
        version."""

    @abstractmethod
    def db_now(self, conn: Any | None = None) -> datetime:
        """The database clock (UTC), on ``conn`` when given (as :meth:`job` reads)."""

    @abstractmethod
    def migrate(self) -> int:
        """Create or upgrade the schema idempotently; return the schema version."""

    @abstractmethod
    def schema_version(self) -> int:
        """The recorded schema version (0 when the schema does not exist)."""

    def enqueue(self, jobs: Sequence[NewJob], conn: Any | None = None) -> list[int]:
        """The ids of :meth:`enqueue_results`, one per job."""
        return [result.id for result in self.enqueue_results(jobs, conn)]

    @abstractmethod
    def enqueue_results(self, jobs: Sequence[NewJob],
                        conn: Any | None = None) -> list[EnqueueResult]:
        """Insert jobs; with ``conn``, inside the caller's open transaction, never committing.

        A job whose ``key`` already exists is not inserted again: its result holds the
        existing id and ``created=False``, and the caller's transaction stays usable.
        """

    @abstractmethod
    def claim(self, queue: str, worker_id: str, limit: int, lease_ms: int) -> list[Job]:
        """Claim up to ``limit`` due, ready jobs of one queue, skipping rows others lock."""

    @abstractmethod
    def renew(self, claim: Claim, lease_ms: int) -> bool:
        """Extend the lease if the claim still owns the job and its lease has not expired."""

    @abstractmethod
    def renew_many(self, claims: Sequence[Claim], lease_ms: int) -> list[bool]:
        """:meth:`renew` for several claims in one transaction (one heartbeat tick); each
        result says whether that claim still owned its job."""

    @abstractmethod
    def complete(self, claim: Claim) -> bool:
        """Mark the job succeeded if the claim still owns it; False means ownership was lost."""

    @abstractmethod
    def complete_many(self, claims: Sequence[Claim]) -> list[bool]:
        """:meth:`complete` for several claims in one transaction (one commit); each result
        says whether that claim still owned its job."""

    @abstractmethod
    def fail(self, claim: Claim, error: str, retry_in_ms: int | None) -> bool:
        """Back to ready after ``retry_in_ms``, or dead when attempts are spent or it is None."""

    @abstractmethod
    def release(self, claim: Claim) -> bool:
        """Give an unfinished job back (graceful shutdown) without spending its attempt:
        ``max_attempts`` grows by one, so the next claim is still a new generation."""

    @abstractmethod
    def release_many(self, claims: Sequence[Claim]) -> list[bool]:
        """:meth:`release` for several claims in one transaction (one commit, rows locked
        in job id order); each result says whether that claim still owned its job."""

    @abstractmethod
    def snooze(self, claim: Claim, delay_ms: int, max_snoozes: int) -> bool:
        """Same guard as :meth:`release`; ready again after ``delay_ms``, the attempt given
        back, unless the job was snoozed ``max_snoozes`` times (then False, nothing
        written)."""

    @abstractmethod
    def reap(self, limit: int, delay_ms: int) -> int:
        """Return up to ``limit`` expired leases to ready after ``delay_ms``, or to dead."""

    @abstractmethod
    def prune(self, older_than_ms: int, limit: int, states: Sequence[str],
              queue: str | None = None) -> int:
        """Delete up to ``limit`` jobs in ``states`` finished more than ``older_than_ms`` ago."""

    @abstractmethod
    def retry_dead(self, job_id: int, extra_attempts: int) -> bool:
        """Make a dead or cancelled job ready now with the attempts it had left plus
        ``extra_attempts``."""

    @abstractmethod
    def cancel(self, job_id: int) -> bool:
        """Cancel a ready or running job (a running job's owner then fails its fencing)."""

    def cancelled(self, claims: Sequence[Claim]) -> list[bool]:
        """For each claim, whether its generation of the job was cancelled (rather than
        taken by another owner or reaped): the worker asks after a refused renewal or
        write. One look-up per claim; refusals are rare."""
        out = []
        for claim in claims:
            record = self.job(claim.job_id)
            out.append(record is not None and record.state == "cancelled"
                       and record.attempts == claim.generation)
        return out

    @abstractmethod
    def finished_per_minute(self, minutes: int) -> list[tuple[str, str, int, int]]:
        """``(queue, state, minutes_ago, count)`` of the jobs that finished (succeeded, dead,
        cancelled) in each of the last ``minutes`` minutes, by the database clock."""

    # ---- job statistics (Queue.job_stats) ---- a separate block --------------------------
    @abstractmethod
    def stats_series(self, window_s: int, bucket_s: int) -> list[tuple[str, str, int, int]]:
        """``(queue, state, buckets_ago, count)`` of the jobs that finished (succeeded, dead,
        cancelled) in each ``bucket_s``-second bucket of the last ``window_s`` seconds, by
        the database clock (bucket 0 the current one). Reads only the window's rows."""

    @abstractmethod
    def stats_latency(self, window_s: int) -> list[tuple[str, int | None, int | None, int]]:
        """``(queue, wait_bucket, run_bucket, count)`` of the succeeded and dead jobs that
        finished in the last ``window_s`` seconds: bucket ``b`` holds durations from
        ``2 ** (b / 4)`` ms (wait: created to first start; run: latest start to finish;
        None without a start time). Reads only the window's rows."""
    # ---- end of job statistics ------------------------------------------------------------

    @abstractmethod
    def delete_finished(self, job_id: int) -> bool:
        """Delete one succeeded, dead or cancelled job (and its error history); False when
        it is not finished (or does not exist)."""

    @abstractmethod
    def retry_many(self, queue: str | None, states: Sequence[str], limit: int,
                   extra_attempts: int) -> int:
        """:meth:`retry_dead` for up to ``limit`` jobs of ``queue`` (None: every queue) in
        ``states`` (dead, cancelled), oldest id first, skipping locked rows; returns how many."""

    @abstractmethod
    def cancel_many(self, queue: str | None, states: Sequence[str], limit: int) -> int:
        """:meth:`cancel` for up to ``limit`` jobs of ``queue`` (None: every queue) in
        ``states`` (ready, running), oldest id first, skipping locked rows; returns how many."""

    @abstractmethod
    def stats(self, queue: str | None = None) -> list[QueueStats]:
        """Per-queue counts and the oldest ready job's age, by the database clock; a paused
        queue is listed (``paused=True``) even when it holds no job."""

    @abstractmethod
    def pending(self, queue: str) -> tuple[bool, bool]:
        """Whether ``queue`` has a job ready and due, and whether it has one running (a
        burst worker's exit test): index probes whose cost does not grow with the table."""

    @abstractmethod
    def next_lease_expiry_ms(self) -> int | None:
        """Milliseconds until the earliest running job's lease expires by the database
        clock (negative once it has; None when no job runs): when a reaper is next due."""

    @abstractmethod
    def set_paused(self, queue: str, paused: bool) -> None:
        """Pause a queue (every claim of it returns nothing, on every worker, from the
        next claim on; running jobs finish normally) or resume it. Idempotent."""

    @abstractmethod
    def set_concurrency_limit(self, queue: str, max_running: int | None) -> None:
        """At most ``max_running`` running jobs of ``queue`` across every worker (None: no
        limit), enforced in the claim transaction; other workers see a new limit within
        ``LIMIT_RECHECK_S`` (portq/backends/sql/limits.py) seconds."""

    @abstractmethod
    def set_fairness(self, queue: str, fair: bool) -> None:
        """Claims of ``queue`` take jobs round-robin across concurrency keys (one job of
        each key with ready jobs in turn, then one unkeyed job) when ``fair``, else in
        plain claim order; enforced in the claim transaction, other workers follow within
        ``LIMIT_RECHECK_S`` seconds. Idempotent."""

    def known_unlimited(self, queue: str) -> bool:
        """True when ``queue`` is known to have no concurrency, rate or per-key limit just
        now (a worker then claims ahead for it). Default: never known."""
        return False

    @abstractmethod
    def set_rate_limit(self, queue: str, limit: int | None, period_ms: int | None) -> None:
        """At most ``limit`` jobs of ``queue`` started per ``period_ms`` across every
        worker, over a sliding window (None: no rate limit), enforced in the claim
        transaction; other workers see a new limit within ``LIMIT_RECHECK_S`` seconds."""

    @abstractmethod
    def paused_queues(self) -> list[str]:
        """The paused queues, sorted."""

    @abstractmethod
    def jobs(self, state: str | None = None, queue: str | None = None, limit: int = 100,
             after_id: int = 0, *, key: str | None = None, text: str | None = None,
             order: str = "id", after_run_at: datetime | None = None) -> list[JobRecord]:
        """Up to ``limit`` jobs of one state (None: every state) and one queue (None: every
        queue), optionally only the job of ``key`` or those whose payload JSON contains
        ``text`` (case-insensitive). ``order`` is ``id`` (oldest first), ``-id`` (newest
        first) or ``run_at``. Pages by key: ``after_id`` (with ``after_run_at`` for
        ``run_at``) is the last row of the previous page, 0 on the first."""

    @abstractmethod
    def job(self, job_id: int, conn: Any | None = None) -> JobRecord | None:
        """The whole row of one job; None when no job has that id. With ``conn`` (this
        engine's DB-API connection) the read runs on it, inside its open transaction."""

    @abstractmethod
    def error_history(self, job_id: int, conn: Any | None = None) -> list[JobError]:
        """Every recorded failed attempt of a job, in attempt order (``conn``: as
        :meth:`job`)."""

    @abstractmethod
    def server_info(self) -> ServerInfo:
        """Engine, server version, driver and the isolation level of portq's transactions;
        also the cheapest check that the database answers."""

    @abstractmethod
    def drop_schema(self) -> list[str]:
        """Drop every table of this prefix (``portq conformance`` cleans up its own);
        return the names of the tables that were there."""

    @abstractmethod
    def store_result(self, claim: Claim, result_json: str) -> bool:
        """Store a running job's return value (JSON text) in its own transaction, replacing
        an earlier generation's, only while ``claim`` owns the job; False: ownership lost."""

    @abstractmethod
    def store_results(self, results: Sequence[tuple[Claim, str]]) -> list[bool]:
        """:meth:`store_result` for several running jobs in one transaction (a worker's
        writer, before it completes them); one fenced result per claim, in order."""

    @abstractmethod
    def result(self, job_id: int, conn: Any | None = None) -> Any:
        """The stored return value of a succeeded job, or None when it has none (``conn``:
        as :meth:`job`)."""

    @abstractmethod
    def set_progress(self, claim: Claim, fraction: float | None, note: str) -> bool:
        """Store a running job's progress report while ``claim`` owns the job."""

    @abstractmethod
    def set_progress_many(self, reports: Sequence[tuple[Claim, float | None, str]]
                          ) -> list[bool]:
        """:meth:`set_progress` for several jobs in one transaction; one result each."""

    @abstractmethod
    def dependency_results(self, job_id: int, conn: Any | None = None) -> dict[int, Any]:
        """``{dependency id: result}`` for the job's dependencies that stored a result."""

    @abstractmethod
    def job_graph(self, job_id: int) -> tuple[list[tuple[int, str | None]],
                                             list[tuple[int, str]]]:
        """A job's dependencies and dependents, ``(id, state)`` each."""

    @abstractmethod
    def job_errors(self, job_id: int) -> list[tuple[int, str, str]]:
        """``(attempt, worker_id, error)`` for every failed attempt of a job, in order."""

    @abstractmethod
    def job_concurrency(self, job_id: int) -> tuple[str, int] | None:
        """A job's concurrency key and its limit, or None when it has none."""

    @abstractmethod
    def key_limits(self, queue: str, limit: int) -> list[tuple[str, int, int]]:
        """``(key, limit, running)`` of up to ``limit`` concurrency keys of ``queue``."""

    @abstractmethod
    def worker_activity(self) -> dict[str, WorkerActivity]:
        """Per registered worker: its running jobs and the time left on its row."""

    @abstractmethod
    def beat_worker(self, info: WorkerInfo, ttl_ms: int) -> None:
        """Register or renew a worker's registry row until DB clock + ``ttl_ms``; rows of
        workers whose heartbeats stopped are deleted on the way."""

    @abstractmethod
    def deregister_worker(self, worker_id: str) -> None:
        """Delete a worker's registry row (clean shutdown)."""

    @abstractmethod
    def workers(self) -> list[WorkerInfo]:
        """The registered workers whose rows have not expired, oldest first."""

    @abstractmethod
    def close(self) -> None:
        """Close every pooled connection."""

    def server_identity(self) -> ServerIdentity | None:
        """The history of the server that the newest connection reached, read when it was
        opened; None where the engine has no such thing (every engine but PostgreSQL) or
        before the first connection."""
        return None
