"""Value types shared by every backend: job states, claimed jobs and their fencing token."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from portq.errors import JobCancelled


class State(enum.StrEnum):
    """Lifecycle of a job row. ``ready`` rows with a future ``run_at`` are "scheduled"."""

    READY = "ready"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"


TERMINAL_STATES = (State.SUCCEEDED, State.DEAD, State.CANCELLED)
#: not a state of the table: the ``ready`` jobs whose run_at is still in the future (delayed,
#: or waiting for a retry); a filter of :meth:`portq.Queue.jobs` and the operator views
SCHEDULED = "scheduled"


@dataclass(frozen=True)
class Claim:
    """The fencing token of one claim: only this generation, worker and lease may finish it."""

    job_id: int
    generation: int
    worker_id: str
    lease_until: datetime


class CancelSignal:
    """Set once, when the worker learns that an operator cancelled the job it runs; runs
    the callbacks registered with :meth:`on_cancel` (e.g. cancelling an asyncio task)."""

    #: one lock for every signal: a job is made per claimed row, and a cancel is rare
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None  # made for the first waiter only
        self._callbacks: list[Callable[[], None]] = []

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None) -> bool:
        with self._lock:
            if self._set:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def set(self) -> bool:
        """Set it; False when it already was (the callbacks ran then)."""
        with self._lock:
            if self._set:
                return False
            self._set = True
            event, callbacks, self._callbacks = self._event, self._callbacks, []
        if event is not None:
            event.set()
        for callback in callbacks:
            callback()
        return True

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the signal is set (at once if it is)."""
        with self._lock:
            if not self._set:
                self._callbacks.append(callback)
                return
        callback()


@dataclass(frozen=True)
class Job:
    """A claimed job as a handler sees it. ``attempt`` is the claim's generation (1-based).

    :meth:`cancelled` becomes true when an operator cancels the job while it runs: within
    one heartbeat (a third of the lease) on every engine, at once where the engine
    announces it (PostgreSQL NOTIFY). The job then ends ``cancelled`` whatever the handler
    returns or raises; an async handler's task is cancelled too."""

    id: int
    queue: str
    payload: Any
    attempt: int
    max_attempts: int
    key: str | None
    priority: int = 0
    claim: Claim | None = field(default=None, repr=False, compare=False)
    concurrency_key: str | None = None  # its per-key limit's key (enqueue(concurrency_key=))
    #: ``time.monotonic()`` by which a worker must start it, else give it back: set by a
    #: rate-limited claim (its window's guard), None otherwise
    start_by: float | None = field(default=None, repr=False, compare=False)
    _cancel: CancelSignal = field(default_factory=CancelSignal, init=False, repr=False,
                                  compare=False)

    def cancelled(self) -> bool:
        """True once the worker learned that this job was cancelled."""
        return self._cancel.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`portq.JobCancelled` if the job was cancelled."""
        if self._cancel.is_set():
            raise JobCancelled(f"job {self.id} was cancelled")

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds, waking as soon as the job is cancelled;
        whether it was (a sleep a handler's cancellation cuts short)."""
        return self._cancel.wait(timeout)


ACTIVE_STATES = (State.READY, State.RUNNING)
#: ``state`` value of :meth:`portq.Queue.jobs` for every state
ALL_STATES = "all"
#: the window of :class:`QueueStats`' failed_1h, succeeded_1h and retry_rate
STATS_WINDOW_S = 3600


@dataclass(frozen=True)
class JobRecord:
    """A whole job row as an operator sees it (``portq jobs``, ``portq job``)."""

    id: int
    queue: str
    state: str
    payload: Any
    priority: int
    attempts: int
    max_attempts: int
    key: str | None
    run_at: datetime | None
    worker_id: str | None
    lease_until: datetime | None
    last_error: str | None
    created_at: datetime | None
    finished_at: datetime | None
    #: attempts given back by :meth:`portq.Queue.release` (a graceful shutdown), each of
    #: which raised max_attempts by one; ``attempts`` stays the claim generation
    released: int = 0
    #: ready, with run_at after the database clock when it was read (not yet due)
    scheduled: bool = False

    @property
    def attempts_spent(self) -> int:
        """Attempts that counted: claims minus those given back by a release."""
        return self.attempts - self.released

    @property
    def attempts_allowed(self) -> int:
        """The job's real attempt budget (max_attempts as enqueued, plus any replay's)."""
        return self.max_attempts - self.released

    @property
    def shown_state(self) -> str:
        """``scheduled`` for a ready job not yet due, else the state."""
        return SCHEDULED if self.scheduled else self.state

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO 8601 strings."""
        return {k: _json_value(getattr(self, k)) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class EnqueueResult:
    """What an enqueue did: ``created`` is False when the job's key already named a job,
    whose id ``id`` then is (nothing was inserted)."""

    id: int
    created: bool


@dataclass(frozen=True)
class JobError:
    """One failed attempt of a job, as recorded when it failed."""

    attempt: int
    worker_id: str
    error: str
    failed_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {k: _json_value(getattr(self, k)) for k in self.__dataclass_fields__}


def _json_value(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


@dataclass(frozen=True)
class ServerInfo:
    """What a backend is connected to (``portq conformance`` prints it first)."""

    engine: str
    server_version: str
    driver: str
    driver_version: str
    isolation: str | None   # of portq's transactions; None where the engine cannot say

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class QueueStats:
    """Counts for one queue, measured by the database clock."""

    queue: str
    ready: int
    scheduled: int
    running: int
    succeeded: int
    dead: int
    cancelled: int
    oldest_ready_age_s: float | None
    #: over the last :data:`STATS_WINDOW_S` seconds (recorded attempts, by the DB clock):
    #: failed attempts, jobs that succeeded, and failed / (failed + succeeded)
    failed_1h: int = 0
    succeeded_1h: int = 0
    retry_rate: float | None = None
    paused: bool = False   # claims of the queue return nothing (Queue.pause)
    concurrency_limit: int | None = None  # most running jobs (Queue.set_concurrency_limit)
    rate_limit: int | None = None         # most jobs started per rate_period_s
    rate_period_s: float | None = None    # (Queue.set_rate_limit)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def error_line(text: str | None) -> str:
    """The line that says what went wrong: for a Python traceback, the first line of the
    exception after its frames (``ValueError: bad input``); otherwise the first line."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    if frames:
        rest = lines[frames[-1] + 1:]
        after = [line for line in rest if not line.startswith(" ")]
        if after:
            return after[0].strip()
    return lines[0].strip()


@dataclass(frozen=True)
class WorkerActivity:
    """What the job table and the registry row say of one live worker: the running jobs
    it holds now, and the seconds until its row expires without another heartbeat."""

    running: int
    expires_in_s: float


@dataclass(frozen=True)
class WorkerInfo:
    """One live worker in the registry (``portq workers``). ``schedules`` holds the cron
    entries it runs: dicts of name, queue, cron, next_due and last_enqueued (ISO-8601 UTC).
    The times are None until the row is read back from the database."""

    worker_id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    jobs_in_hand: int = 0
    schedules: tuple[dict[str, Any], ...] = ()
    started_at: datetime | None = None
    heartbeat_at: datetime | None = None
    heartbeat_age_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["queues"], out["schedules"] = list(self.queues), list(self.schedules)
        for k in ("started_at", "heartbeat_at"):
            out[k] = None if out[k] is None else out[k].isoformat()
        return out
