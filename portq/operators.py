"""A :class:`~portq.queue.Queue`'s operator side: maintenance (reap, prune), operator
actions (retry, cancel, delete, pause, limits, fairness), statistics and the listings the
CLI and the dashboard read. :class:`~portq.queue.Queue` inherits it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from portq.backends.sql.common import JOB_ORDERS
from portq.errors import ConfigurationError
from portq.job import (
    ACTIVE_STATES,
    ALL_STATES,
    SCHEDULED,
    JobError,
    JobRecord,
    QueueStats,
    State,
    WorkerActivity,
    WorkerInfo,
)
from portq.protocol import Backend
from portq.stats import JobStats, bucket_seconds, build_stats, window_seconds
from portq.validate import _storable_text, given_ms, positive_int, validate_key, validate_queue

if TYPE_CHECKING:
    from typing_extensions import TypeVar as TypeVarWithDefault

    from portq.backends.sql import SqlBackend
    #: the backend a Queue drives: its code uses only the contract (:class:`Backend`); a
    #: bare ``Queue`` (what :func:`connect` builds) is one over the SQL machinery
    B = TypeVarWithDefault("B", bound=Backend, covariant=True, default=SqlBackend)
else:
    B = TypeVar("B", bound=Backend, covariant=True)

MAX_SEARCH_LENGTH = 200
#: the most jobs a rate limit may allow per period
MAX_RATE_LIMIT = 1_000_000


class QueueOperators(Generic[B]):
    """Maintenance, operator actions, statistics and listings (see the module)."""

    backend: B

    if TYPE_CHECKING:
        def _dbapi(self, conn: Any) -> Any:
            """The DB-API connection under ``conn`` (:meth:`portq.queue.Queue._dbapi`)."""

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


def _queue_or_none(queue: str | None) -> str | None:
    return None if queue is None else validate_queue(queue)


def _states(states: Sequence[str], allowed: Sequence[str], what: str) -> list[str]:
    """``states`` as plain strings, or a ConfigurationError naming the ones ``what`` takes."""
    names = [str(s) for s in allowed]
    if not states or any(s not in names for s in states):
        raise ConfigurationError(f"can only {what} jobs in states {', '.join(names)}; "
                                 f"got {', '.join(map(str, states)) or 'none'}")
    return [str(s) for s in states]
