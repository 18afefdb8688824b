"""Value types shared by every backend: job states, claimed jobs and their fencing token."""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from portq.errors import ConfigurationError, JobCancelled

#: the longest progress note kept (longer ones are cut, ending with "…")
PROGRESS_NOTE_LIMIT = 200


class State(enum.StrEnum):
    """Lifecycle of a job row. ``ready`` rows with a future ``run_at`` are "scheduled"."""

    READY = "ready"
    RUNNING = "running"
    WAITING = "waiting"  # for its dependencies (enqueue(depends_on=...)), not claimable
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

    @classmethod
    def of_row(cls, job_id: int, generation: int, worker_id: str,
               lease_until: datetime) -> Claim:
        """``Claim(...)`` without the frozen ``__init__``'s four ``object.__setattr__``
        (one is made per claimed row)."""
        claim = object.__new__(cls)
        object.__setattr__(claim, "__dict__", {"job_id": job_id, "generation": generation,
                                               "worker_id": worker_id,
                                               "lease_until": lease_until})
        return claim


class CancelSignal:
    """Set once, when the worker learns that an operator cancelled the job it runs; runs
    the callbacks registered with :meth:`on_cancel` (e.g. cancelling an asyncio task)."""

    #: one lock for every signal: a job is made per claimed row, and a cancel is rare
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._set = False
        #: why it was set: "cancelled" (an operator) or "timeout" (the job's timeout)
        self.reason = ""
        self._event: threading.Event | None = None  # made for the first waiter only
        self._callbacks: list[Callable[[], None]] | None = None  # made for the first one

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

    def set(self, reason: str = "cancelled") -> bool:
        """Set it for ``reason``; False when it already was (the callbacks ran then)."""
        with self._lock:
            if self._set:
                return False
            self._set = True
            self.reason = reason
            event, callbacks, self._callbacks = self._event, self._callbacks, None
        if event is not None:
            event.set()
        for callback in callbacks or ():
            callback()
        return True

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the signal is set (at once if it is)."""
        with self._lock:
            if not self._set:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        callback()


class ProgressSlot:
    """Where a running job's progress reports go: the worker's sink (it writes them, fenced
    and rate-limited, off the handler's thread) and the latest report, kept for tests."""

    __slots__ = ("last", "sink")

    def __init__(self) -> None:
        self.sink: Callable[[Job, float | None, str], None] | None = None
        #: the latest (fraction, note) reported, or None
        self.last: tuple[float | None, str] | None = None


def progress_value(fraction: float | None, note: str) -> tuple[float | None, str]:
    """A progress report checked: ``fraction`` None or a number from 0 to 1, ``note`` text
    (cut to :data:`PROGRESS_NOTE_LIMIT` characters)."""
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or \
                math.isnan(fraction) or not 0 <= fraction <= 1:
            raise ConfigurationError(f"progress fraction must be a number from 0 to 1 or "
                                     f"None, got {fraction!r}")
        fraction = float(fraction)
    if not isinstance(note, str):
        raise ConfigurationError(f"progress message must be a str, got {type(note).__name__}")
    if len(note) > PROGRESS_NOTE_LIMIT:
        note = note[:PROGRESS_NOTE_LIMIT - 1] + "…"
    return fraction, note


@dataclass(frozen=True)
class DependencyReader:
    """Where a claimed job reads its dependencies' results: ``read(job_id)``. One serves
    every job a backend claims (a job is made per claimed row: no object each)."""

    read: Callable[[int], dict[int, Any]] | None = None


class RowLoader(Protocol):
    """Decodes a claimed row's stored JSON (the backend that claimed it)."""

    def load_payload(self, value: Any) -> Any: ...

    def load_meta(self, value: Any) -> dict[str, str]: ...


#: the reader of a job no backend claimed: it has no dependencies' results to read
NO_DEPENDENCIES = DependencyReader()


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
    #: ``time.monotonic()`` when the claim that leased it was sent: its lease ends no
    #: sooner than that plus the lease (a worker starts it only with half the lease left)
    leased_at: float | None = field(default=None, repr=False, compare=False)
    #: the longest this attempt may run, in seconds (``enqueue(timeout=)``), or None
    timeout: float | None = field(default=None, repr=False, compare=False)
    #: when the job became due (its ``run_at``, by the database clock): enqueued, or the
    #: retry's time; None where unknown
    run_at: datetime | None = field(default=None, repr=False, compare=False)
    #: what was stored with the job at enqueue (strings: the enqueuer's trace context,
    #: what enqueue hooks added); empty when nothing was
    meta: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    _cancel: CancelSignal = field(default_factory=CancelSignal, init=False, repr=False,
                                  compare=False)
    _progress: ProgressSlot = field(default_factory=ProgressSlot, init=False, repr=False,
                                    compare=False)
    #: how :meth:`dependency_results` reads (set by the backend that claimed the job)
    _deps: DependencyReader = field(default=NO_DEPENDENCIES, init=False, repr=False,
                                    compare=False)

    @classmethod
    def claimed(cls, id: int, queue: str, payload: Any, attempt: int, max_attempts: int,
                key: str | None, priority: int, claim: Claim, concurrency_key: str | None,
                start_by: float | None, leased_at: float | None, timeout: float | None,
                run_at: datetime | None, meta: Any, deps: DependencyReader,
                loader: RowLoader | None = None) -> Job:
        """The job of a claimed row, every field given: what ``Job(...)`` makes, without
        its frozen ``__init__`` (one ``object.__setattr__`` per field: a measurable share
        of a no-op job's cost; a job is made per claimed row, on the claim loop's thread).
        With ``loader``, ``payload`` and ``meta`` are the row's stored JSON text, decoded
        on first use (``__getattr__``): on the handler's thread."""
        job = object.__new__(cls)
        fields = {"id": id, "queue": queue, "attempt": attempt, "max_attempts": max_attempts,
                  "key": key, "priority": priority, "claim": claim,
                  "concurrency_key": concurrency_key, "start_by": start_by,
                  "leased_at": leased_at, "timeout": timeout, "run_at": run_at,
                  "_cancel": CancelSignal(), "_progress": ProgressSlot(), "_deps": deps}
        if loader is None:
            fields["payload"], fields["meta"] = payload, meta
        else:
            fields["_stored"] = (payload, meta, loader)
        object.__setattr__(job, "__dict__", fields)
        return job

    if not TYPE_CHECKING:  # so that type checkers still refuse a misspelt attribute
        def __getattr__(self, name: str) -> Any:
            """``payload`` and ``meta`` of a job made with a ``loader`` (:meth:`claimed`),
            decoded once, on first use (a race decodes twice and keeps one)."""
            stored = self.__dict__.get("_stored")
            if stored is None or name not in ("payload", "meta"):
                raise AttributeError(
                    f"{type(self).__name__!r} object has no attribute {name!r}")
            payload, meta, loader = stored
            value = loader.load_payload(payload) if name == "payload" else \
                loader.load_meta(meta)
            return self.__dict__.setdefault(name, value)

    def dependency_results(self) -> dict[int, Any]:
        """``{dependency id: result}``: what this job's dependencies
        (``enqueue(depends_on=...)``) returned, for those that stored a result (a handler's
        return value; None results are not stored). Read from the database each call."""
        read = self._deps.read
        return {} if read is None else read(self.id)

    @property
    def task(self) -> str | None:
        """The task name the payload gives (``{"task": name, ...}``), or None."""
        name = self.payload.get("task") if isinstance(self.payload, dict) else None
        return name if isinstance(name, str) else None

    def progress(self, fraction: float | None, message: str = "") -> None:
        """Report how far this attempt got: ``fraction`` from 0 to 1 (or None when unknown)
        and a short ``message`` (at most 200 characters kept). Never waits for the
        database: the worker writes the latest report with the job, at most once a second
        per job, and only while this attempt still owns it (a job whose lease was lost
        cannot overwrite its new owner's progress). ``portq job``, ``portq jobs`` and the
        dashboard show it."""
        report = progress_value(fraction, message)
        slot = self._progress
        slot.last = report
        if slot.sink is not None:
            slot.sink(self, *report)

    def cancelled(self) -> bool:
        """True once the worker learned that this job was cancelled, or that it ran past
        its timeout: either way its handler should stop, and nothing it does is recorded."""
        return self._cancel.is_set()

    def timed_out(self) -> bool:
        """True once the job ran past its timeout (:attr:`cancelled` is then true too)."""
        return self._cancel.reason == "timeout"

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
    #: when the latest attempt started and when the first did (set by the claim, by the
    #: database clock; None until the job is first claimed)
    started_at: datetime | None = None
    first_started_at: datetime | None = None
    #: the running (or last) attempt's latest progress report: a fraction from 0 to 1 or
    #: None, a short note, when it was written (None: never reported)
    progress: float | None = None
    progress_note: str | None = None
    progress_at: datetime | None = None
    #: what was stored with the job at enqueue (``portq job`` reads it; listings do not)
    meta: dict[str, str] | None = None
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

    def progress_text(self) -> str | None:
        """The progress report as one line (``40% resized 40 of 100``), or None."""
        if self.progress_at is None:
            return None
        percent = "" if self.progress is None else f"{self.progress * 100:.0f}%"
        return " ".join(p for p in (percent, self.progress_note or "") if p) or "reported"


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
    #: jobs waiting for their dependencies (enqueue(depends_on=...))
    waiting: int = 0
    #: over the last :data:`STATS_WINDOW_S` seconds (recorded attempts, by the DB clock):
    #: failed attempts, jobs that succeeded, and failed / (failed + succeeded)
    failed_1h: int = 0
    succeeded_1h: int = 0
    retry_rate: float | None = None
    paused: bool = False   # claims of the queue return nothing (Queue.pause)
    concurrency_limit: int | None = None  # most running jobs (Queue.set_concurrency_limit)
    rate_limit: int | None = None         # most jobs started per rate_period_s
    rate_period_s: float | None = None    # (Queue.set_rate_limit)
    fair: bool = False  # claims round-robin across concurrency keys (Queue.set_fairness)

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
