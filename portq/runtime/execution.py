"""What becomes of one attempt, decided once for both fronts and free of I/O: what a
handler may raise to steer its job (:class:`RetryAfter`, :class:`portq.Permanent`), the
checks made before a handler starts, and the :class:`Outcome` the writer records."""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

from portq.durations import seconds_of
from portq.errors import ConfigurationError, Permanent
from portq.job import Job

#: the kinds of outcome a worker writes
SUCCEEDED, RETRY, DEAD, RELEASE, SNOOZE = "succeeded", "retry", "dead", "release", "snooze"

#: why a worker gives back a rate-limited job it could not start in time
LATE_FOR_RATE_LIMIT = "not started within its rate limit's guard"
#: why a worker gives back a job whose claim came back with too little of its lease left
LATE_FOR_LEASE = "not started with half of its lease left (the claim or the wait was slow)"
#: most characters of a failure's text kept (the traceback's last ones)
FAILURE_TEXT_LIMIT = 16_000


class RetryAfter(Exception):
    """Raise from a handler to retry this job after ``delay`` seconds (overriding backoff).
    It spends an attempt, as any failure does."""

    def __init__(self, delay: float, reason: str = "") -> None:
        if isinstance(delay, bool) or not isinstance(delay, int | float) or \
                not 0 <= delay < math.inf:
            raise ConfigurationError(f"RetryAfter delay must be a finite number of seconds "
                                     f">= 0, got {delay!r}")
        super().__init__(reason or f"retry requested after {delay}s")
        self.delay = delay


class Snooze(Exception):
    """Raise from a handler to run this job again after ``delay`` (seconds, a timedelta
    or a duration such as ``'5m'``) without spending an attempt (unlike
    :class:`RetryAfter`). A job may be snoozed :data:`portq.queue.MAX_SNOOZES` times; a
    later Snooze counts as a failed attempt."""

    def __init__(self, delay: Any, reason: str = "") -> None:
        self.delay = seconds_of(delay, "Snooze delay")
        super().__init__(reason or f"snoozed for {self.delay:g}s")


class LateStart(BaseException):
    """Raised in place of a job's first code on one of the asyncio front's handler threads
    when the job's rate-limited claim's ``start_by`` passed while the call waited for that
    thread (:meth:`portq.handler.HandlerThreads.run`): the job is given back unstarted, its
    attempt too, as :func:`start_refusal` would have. A ``BaseException``, so that
    middleware catching ``Exception`` lets it through."""


class Outcome(NamedTuple):
    """What to write for one job: ``succeeded`` (with ``result``, the return value's JSON
    text, or None), ``retry`` after ``retry_in`` seconds, ``dead``, ``release`` (given
    back unstarted, its attempt with it; ``error`` says why), or ``snooze`` (ready again
    after ``retry_in`` seconds, its attempt given back). A named tuple: one is made per
    job, and a frozen dataclass takes three times as long to make."""

    job: Job
    kind: str
    error: str = ""
    retry_in: float | None = None
    result: str | None = None


def past_rate_guard(job: Job, now: float) -> bool:
    """Whether ``job`` came from a rate-limited claim whose ``start_by`` had passed at
    ``now`` (``time.monotonic()``): it must not start, lest the limit be exceeded in some
    window of start times."""
    return job.start_by is not None and now > job.start_by


def start_refusal(job: Job, leased_at: float | None, lease: float) -> str | None:
    """Why ``job`` must not start now (it is given back instead), or None: a rate-limited
    claim's job past its ``start_by`` (starting it could exceed the limit in some window),
    or a job with less than half of its lease left, reckoned from ``leased_at``, when the
    claim or the last renewal that succeeded was sent (a claim whose commit stalled must
    not start jobs that another worker's reaper may already be handing out)."""
    now = time.monotonic()
    if past_rate_guard(job, now):
        return LATE_FOR_RATE_LIMIT
    if leased_at is not None and now > leased_at + lease / 2:
        return LATE_FOR_LEASE
    return None


def failure_summary(exc: BaseException) -> str:
    """The error text stored for a failed attempt: the whole traceback (chained causes
    included), its last :data:`FAILURE_TEXT_LIMIT` characters when longer."""
    return "".join(traceback.format_exception(exc))[-FAILURE_TEXT_LIMIT:]


def outcome_of(job: Job, exc: BaseException | None, result: Any,
               backoff_delay: Callable[[int], float],
               dump_result: Callable[[Any], str]) -> Outcome | None:
    """The outcome of a handler that returned ``result`` (``exc`` None) or raised ``exc``
    (any :class:`BaseException`: ``SystemExit``, ``KeyboardInterrupt`` and a handler's own
    ``CancelledError`` are that attempt's failure like any error). None when nothing is to
    be written: the job was cancelled or timed out while it ran (counted already)."""
    if job.cancelled():
        return None
    if exc is None:
        try:
            text = None if result is None else dump_result(result)
        except Permanent as error:  # ResultError: not storable, the job goes to dead
            return Outcome(job, DEAD, f"{type(error).__name__}: {error}")
        return Outcome(job, SUCCEEDED, result=text)
    if isinstance(exc, Permanent):
        return Outcome(job, DEAD, f"{type(exc).__name__}: {exc}")
    if isinstance(exc, RetryAfter):
        return Outcome(job, RETRY, str(exc), max(0.0, exc.delay))
    if isinstance(exc, Snooze):
        return Outcome(job, SNOOZE, str(exc), exc.delay)
    return Outcome(job, RETRY, failure_summary(exc), backoff_delay(job.attempt))
