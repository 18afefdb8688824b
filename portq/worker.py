"""The worker runtime: claim loops, bounded concurrency, heartbeats, retries, shutdown.

One :class:`Worker` serves one or more queues. Each pass claims from every queue in
round-robin order, each with its own single-queue claim statement, and only as many jobs
as it has free slots. Handlers run on ``concurrency`` threads. A heartbeat thread renews
the lease of every running job at a third of the lease; a renewal that returns False means
another worker now owns the job, and this worker stops reporting for it. An empty queue is
polled with growing, jittered sleeps; on PostgreSQL a listener thread (LISTEN on the
queues' channels, NOTIFY sent by enqueue at commit) cuts those sleeps short, while polling
stays the correctness path. SIGTERM/SIGINT (when ``install_signals``) stop claiming, wait
up to ``grace`` seconds for running jobs, then release the rest to ready (the attempt is
given back); a second signal exits at once.

One mode, sized by what it measures. Handlers return at once: a completion batcher
writes finished jobs in the background, a batch per statement (``Queue.complete_many``),
while the job keeps its slot until its completion has committed. Claims are sized to the
free capacity: the handler threads plus a look-ahead (:class:`LookAhead`) that is zero
while jobs outlast a claim's round trip (claiming for freed threads keeps them busy) and
grows, by Little's law, to cover a few claim round trips of jobs when jobs are shorter than
that, never to more jobs than the handlers start in a small fraction of the lease; a job
left unstarted longer than that fraction is given back. Several claim loops (up to
:data:`AUTO_CLAIMERS`) share the capacity while there is a look-ahead, so that one claim's
round trip does not bound the worker. Where the database has one write lock whose
waiters sleep (SQLite), the worker has one claim loop and it writes the completions itself
between its claims, so that the worker's threads never queue for the lock behind each
other. ``prefetch``, ``ack_delay`` and ``claimers`` fix those sizes by hand; they are
deprecated.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import random
import signal
import socket
import threading
import time
import traceback
import uuid
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from portq.backends.base import Listener, listen_mode
from portq.errors import ConfigurationError, Permanent
from portq.handler import HandlerRunner
from portq.job import Job, error_line
from portq.queue import Queue, _claim_of, duration_ms, positive_int, validate_queue
from portq.registry import DEFAULT_REGISTRY_INTERVAL, registration_of
from portq.retry import Backoff

if TYPE_CHECKING:
    from portq.protocol import Backend
    from portq.schedule import Scheduler

log = logging.getLogger("portq.worker")
Handler = Callable[[Job], Any]
T = TypeVar("T")


class RetryAfter(Exception):
    """Raise from a handler to retry this job after ``delay`` seconds (overriding backoff)."""

    def __init__(self, delay: float, reason: str = "") -> None:
        if isinstance(delay, bool) or not isinstance(delay, int | float) or \
                not 0 <= delay < math.inf:
            raise ConfigurationError(f"RetryAfter delay must be a finite number of seconds "
                                     f">= 0, got {delay!r}")
        super().__init__(reason or f"retry requested after {delay}s")
        self.delay = delay


@dataclass
class WorkerCounters:
    """What a worker did, for its summary line and for metrics."""

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    lost: int = 0
    #: jobs an operator cancelled while this worker owned them (their handlers were told)
    cancelled: int = 0
    released: int = 0
    reaped: int = 0
    pruned: int = 0
    claim_seconds: list[float] = field(default_factory=list, repr=False)
    #: the most recent claims as (queue, seconds), as many as ``claim_seconds``
    claims: list[tuple[str, float]] = field(default_factory=list, repr=False)
    #: called with every claim's duration and queue (e.g. a metrics histogram)
    claim_observers: list[Callable[[float, str], None]] = field(default_factory=list,
                                                                repr=False)
    #: the job counters per queue: queue -> counter -> n (reaped and pruned span queues)
    by_queue: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if isinstance(v, int)}

    def add(self, counter: str, n: int = 1, queue: str | None = None) -> None:
        """Add ``n`` to ``counter`` (e.g. ``"succeeded"``), and to ``queue``'s; safe from
        any thread."""
        with self._lock:
            setattr(self, counter, getattr(self, counter) + n)
            if queue is not None:
                per = self.by_queue.setdefault(queue, {})
                per[counter] = per.get(counter, 0) + n

    def record_claim(self, seconds: float, queue: str = "") -> None:
        """Keep one claim's duration (the most recent 5,000-10,000) and tell the observers."""
        self.claim_seconds.append(seconds)
        self.claims.append((queue, seconds))
        if len(self.claim_seconds) > 10_000:
            del self.claim_seconds[:5_000]
            del self.claims[:5_000]
        for observe in self.claim_observers:
            observe(seconds, queue)


class Pacing:
    """The claim loop's decisions, shared by :class:`Worker` and ``portq.aio.AsyncWorker``:
    which queue's turn comes first, how many free slots each queue of a round may claim,
    and how long to sleep when the queues are empty or the database fails."""

    def __init__(self, queues: Sequence[str], idle_min: float, idle_max: float) -> None:
        self.queues = list(queues)
        self.idle_min, self.idle_max = idle_min, idle_max
        self._start = 0
        self._idle_rounds = 0

    def turns(self) -> list[str]:
        """This round's queues, round-robin."""
        n = len(self.queues)
        return [self.queues[(self._start + i) % n] for i in range(n)]

    @staticmethod
    def share(free: int, queues_left: int) -> int:
        """Free slots one queue may claim when ``queues_left`` still wait their turn."""
        return -(-free // queues_left)

    def finish_round(self, tried: int, claimed: int) -> None:
        """Rotate (unless no queue got a turn: it keeps it) and track idleness."""
        if tried:
            self._start += 1
        if claimed:
            self._idle_rounds = 0

    def idle_delay(self) -> float:
        """A growing, jittered sleep for an empty round: uniform(c/2, c), c up to idle_max."""
        self._idle_rounds += 1
        ceiling = min(self.idle_max, self.idle_min * 2.0 ** min(self._idle_rounds, 30))
        return random.uniform(ceiling / 2, ceiling)

    def error_delay(self) -> float:
        """A growing, jittered sleep after a database error, capped at 5 s."""
        self._idle_rounds += 1
        ceiling = min(5.0, self.idle_min * 2.0 ** min(self._idle_rounds, 30))
        return ceiling * random.uniform(0.5, 1.0)


#: the look-ahead never holds more jobs than the handlers start in this fraction of the
#: lease, and a job left unstarted longer than it is given back
LOOKAHEAD_LEASE_FRACTION = 0.1
#: claim round trips of jobs the look-ahead covers when jobs are shorter than a round trip
LOOKAHEAD_CYCLES = 8
#: most jobs of look-ahead per claim loop
LOOKAHEAD_PER_CLAIMER = 160
#: claim loops a worker runs (no more than its handler threads) while it has a look-ahead
AUTO_CLAIMERS = 4
#: most jobs in one claim and in one batch of completions
BATCH_LIMIT = 100
#: completion batchers a worker runs (while one writes its batch the next one gathers;
#: more made smaller batches, so more statements, and measured slower on both workers)
COMPLETION_BATCHERS = 2
#: claim batch when none is given: enough to amortise a round trip, never over capacity
DEFAULT_BATCH = 20


class LookAhead:
    """How many claimed jobs may wait for a handler thread, from what the worker measures
    (shared by :class:`Worker` and ``portq.aio.AsyncWorker``).

    Little's law: to keep ``concurrency`` handlers busy, jobs must be claimed ahead for as
    long as a claim takes to come back. When a job outlasts a claim's round trip (the
    fastest of the recent claims, so that a loaded moment does not count as the norm), the
    threads freed meanwhile are refilled in time and no look-ahead is needed (0: a worker
    never holds a job no thread is ready to run). When jobs are shorter, it covers
    :data:`LOOKAHEAD_CYCLES` round trips of jobs, but never more jobs than the handlers start
    in ``LOOKAHEAD_LEASE_FRACTION`` of the lease, and never more than ``ceiling``. Until the
    first job has finished nothing is known, and it is 0."""

    def __init__(self, concurrency: int, lease: float, ceiling: int) -> None:
        self.concurrency, self.ceiling = concurrency, ceiling
        #: a job claimed this long ago and not started is given back
        self.max_wait = lease * LOOKAHEAD_LEASE_FRACTION
        self._job_s: float | None = None     # moving average of a handler's run time
        self._cycle_s: float | None = None   # moving average of a claim's round trip
        self._recent: deque[float] = deque(maxlen=32)  # the last claims' round trips
        self._fastest = math.inf  # the fastest of them

    @staticmethod
    def _average(old: float | None, sample: float) -> float:
        return sample if old is None else old + 0.2 * (sample - old)

    def job_ran(self, seconds: float) -> None:
        """A handler returned after ``seconds`` (callers serialise the calls)."""
        self._job_s = self._average(self._job_s, max(seconds, 1e-6))

    def stalled(self, waited: float) -> None:
        """Jobs claimed ahead waited ``waited`` seconds without a thread freeing up: take
        the run time to be at least that (no look-ahead until short jobs bring it down)."""
        self._job_s = max(self._job_s or 0.0, waited)

    def claim_took(self, seconds: float) -> None:
        """A claim came back after ``seconds``."""
        self._cycle_s = self._average(self._cycle_s, seconds)
        self._recent.append(seconds)
        self._fastest = min(self._recent)

    def size(self) -> int:
        """Jobs that may wait for a handler thread now."""
        job, cycle = self._job_s, self._cycle_s
        if job is None or cycle is None or job >= self._fastest:
            return 0
        starts_per_s = self.concurrency / job
        return int(min(self.ceiling, starts_per_s * cycle * LOOKAHEAD_CYCLES,
                       starts_per_s * self.max_wait))


class Mailbox(Generic[T]):
    """A FIFO between threads that hands over a whole batch with one wake-up: the claim
    loops' jobs to the handler threads, and the handlers' completions to the ack threads.
    (``queue.Queue`` wakes a waiting thread for every item, which on short jobs costs more
    than the job.) A taker that lingers to fill a batch is not woken by each new item.
    After :meth:`close`, takers get what is left, then nothing."""

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        lock = threading.Lock()
        self._nonempty = threading.Condition(lock)  # takers waiting for a first item
        self._lingering = threading.Condition(lock)  # takers filling a batch
        self._hungry = 0
        self._fill_to: list[int] = []  # the batch size each lingering taker waits for
        self._closed = False

    def put_many(self, items: Iterable[T]) -> None:
        """Append ``items``; wake one hungry taker for each new item, and the lingering
        takers once there are enough items for one's batch."""
        with self._nonempty:
            before = len(self._items)
            self._items.extend(items)
            if self._hungry and len(self._items) > before:
                self._nonempty.notify(len(self._items) - before)
            if self._fill_to and len(self._items) >= min(self._fill_to):
                self._lingering.notify_all()

    def get(self) -> T | None:
        """The oldest item, waiting for one; None once closed and empty."""
        with self._nonempty:
            while not self._items:
                if self._closed:
                    return None
                self._hungry += 1
                try:
                    self._nonempty.wait()
                finally:
                    self._hungry -= 1
            return self._items.popleft()

    def get_batch(self, limit: int, linger: float) -> list[T]:
        """Wait for one item, then take up to ``limit``, waiting at most ``linger`` seconds
        in all for the batch to fill; [] once closed and empty."""
        with self._nonempty:
            while not self._items and not self._closed:
                self._hungry += 1
                try:
                    self._nonempty.wait()
                finally:
                    self._hungry -= 1
            deadline = time.monotonic() + linger
            while len(self._items) < limit and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._fill_to.append(limit)
                try:
                    self._lingering.wait(left)
                finally:
                    self._fill_to.remove(limit)
            return [self._items.popleft() for _ in range(min(limit, len(self._items)))]

    def take(self, limit: int) -> list[T]:
        """Up to ``limit`` of the oldest items, without waiting."""
        with self._nonempty:
            return [self._items.popleft() for _ in range(min(limit, len(self._items)))]

    def take_while(self, predicate: Callable[[T], bool]) -> list[T]:
        """The oldest items, for as long as ``predicate`` holds, without waiting."""
        with self._nonempty:
            taken = []
            while self._items and predicate(self._items[0]):
                taken.append(self._items.popleft())
            return taken

    def drain(self) -> list[T]:
        """Everything waiting, without waiting."""
        with self._nonempty:
            items = list(self._items)
            self._items.clear()
            return items

    def close(self) -> None:
        """No more items will come: wake every taker (none lingers any more)."""
        with self._nonempty:
            self._closed = True
            self._nonempty.notify_all()
            self._lingering.notify_all()


def claim_batch(batch: int | None, concurrency: int, capacity: int) -> int:
    """Most jobs in one claim: ``batch`` when given, else enough to amortise a round trip
    (:data:`DEFAULT_BATCH`, or ``concurrency`` when larger), never over ``capacity`` or
    :data:`BATCH_LIMIT` (shared by both workers)."""
    if batch is not None:
        return positive_int(batch, "batch")
    return min(capacity, max(concurrency, DEFAULT_BATCH), BATCH_LIMIT)


class Outcomes:
    """Counting and logging what became of a worker's jobs, one line per event (shared by
    :class:`Worker` and ``portq.aio.AsyncWorker``)."""

    def __init__(self, counters: WorkerCounters, worker_id: str,
                 logger: logging.Logger) -> None:
        self.counters, self.worker_id, self.log = counters, worker_id, logger

    def written(self, job: Job, outcome: str, error: str, retry_in: float | None) -> None:
        """An outcome committed: ``succeeded``, or a failure (dead when ``retry_in`` is
        None or the attempts are spent, else retried)."""
        if outcome == "succeeded":
            self.counters.add("succeeded", queue=job.queue)
            self.log.debug("job.succeeded job_id=%d queue=%s generation=%d worker=%s",
                           job.id, job.queue, job.attempt, self.worker_id)
        elif retry_in is None or job.attempt >= job.max_attempts:
            self.counters.add("dead", queue=job.queue)
            self.log.warning("job.dead job_id=%d queue=%s generation=%d attempt=%d/%d "
                             "worker=%s error=%s", job.id, job.queue, job.attempt,
                             job.attempt, job.max_attempts, self.worker_id, error_line(error))
        else:
            self.counters.add("retried", queue=job.queue)
            self.log.info("job.retry job_id=%d queue=%s generation=%d attempt=%d/%d worker=%s "
                          "in=%.2fs error=%s", job.id, job.queue, job.attempt, job.attempt,
                          job.max_attempts, self.worker_id, retry_in, error_line(error))

    def refused(self, job: Job, outcome: str, interrupted: bool, cancelled: bool) -> None:
        """The database refused to record ``outcome`` (fencing): the job was cancelled by
        an operator, or another owner or an expired lease took it."""
        if cancelled:
            self.cancelled(job, "its outcome's write was refused")
            return
        self.lost(job, f"another owner or an expired lease; outcome {outcome} not recorded"
                  + (" (or recorded by the earlier attempt whose connection dropped during "
                     "COMMIT)" if interrupted else ""))

    def lost(self, job: Job, why: str) -> None:
        """This worker no longer owns ``job``, and not because of a cancel."""
        self.counters.add("lost", queue=job.queue)
        self.log.warning("job.lost job_id=%d queue=%s generation=%d worker=%s: %s", job.id,
                         job.queue, job.attempt, self.worker_id, why)

    def cancelled(self, job: Job, how: str) -> None:
        """An operator cancelled ``job`` (no longer owned): tell its handler, count, log."""
        job._cancel.set()
        self.counters.add("cancelled", queue=job.queue)
        self.log.info("job.cancelled job_id=%d queue=%s generation=%d worker=%s: %s; the "
                      "handler was told, its outcome is not recorded", job.id, job.queue,
                      job.attempt, self.worker_id, how)

    def released(self, job: Job, why: str) -> None:
        """``job`` went back to ready, its attempt given back."""
        self.counters.add("released", queue=job.queue)
        self.log.warning("job.released job_id=%d queue=%s generation=%d worker=%s (%s)",
                         job.id, job.queue, job.attempt, self.worker_id, why)


class WriteRetry:
    """How a worker writes an outcome through connection trouble (shared by both
    workers): tries until the jobs' lease ends, sleeping 50 ms doubling to 2 s between
    them. An earlier try cut during COMMIT may have committed after all
    (:attr:`interrupted`), which a refused later try must not call a loss for certain."""

    def __init__(self, jobs: Sequence[Job], lease: float, worker_id: str,
                 logger: logging.Logger) -> None:
        self.jobs, self.worker_id, self.log = jobs, worker_id, logger
        self.deadline = time.monotonic() + lease
        self.delay = 0.05
        self.interrupted = False

    def failed(self, exc: Exception) -> float | None:
        """A try raised ``exc``: the seconds to sleep before the next, or None when the
        lease ends first (logged: the jobs will run again)."""
        ids = ",".join(str(j.id) for j in self.jobs)
        if time.monotonic() + self.delay >= self.deadline:
            self.log.error("job.report_failed job_id=%s worker=%s error=%s; the lease will "
                           "expire and the job will run again", ids, self.worker_id, exc)
            return None
        if not self.interrupted:
            self.log.warning("worker.db_error worker=%s error=%s: %s; retrying the report of "
                             "job_id=%s until its lease ends", self.worker_id,
                             type(exc).__name__, exc, ids)
        self.interrupted = True
        delay, self.delay = self.delay, min(self.delay * 2, 2.0)
        return delay


class Maintenance:
    """The reaper (expired leases back to ready, or dead) and pruner (finished jobs
    deleted in bounded batches) that a worker's main claim loop runs now and then (shared
    by both workers; the async one runs :meth:`run_due` on a thread)."""

    def __init__(self, queue: Queue, counters: WorkerCounters, worker_id: str,
                 logger: logging.Logger, *, reap_interval: float | None, reap_delay: float,
                 prune_interval: float | None, prune_older_than: float) -> None:
        for what, value in (("reap_interval", reap_interval),
                            ("prune_interval", prune_interval)):
            if value is not None:
                duration_ms(value, what)
        duration_ms(reap_delay, "reap_delay", allow_zero=True)
        duration_ms(prune_older_than, "prune_older_than", allow_zero=True)
        self.queue, self.counters, self.worker_id, self.log = queue, counters, worker_id, logger
        self.reap_interval, self.reap_delay = reap_interval, reap_delay
        self.prune_interval, self.prune_older_than = prune_interval, prune_older_than
        now = time.monotonic()  # jittered first runs: workers started together spread out
        self._next_reap = now + random.uniform(0, reap_interval or 0)
        self._next_prune = now + random.uniform(0, prune_interval or 0)
        self._reaped_due_by = 0.0  # monotonic time when the jobs it last reaped are due

    def due(self) -> bool:
        """Whether :meth:`run_due` has anything to do now."""
        now = time.monotonic()
        return bool((self.reap_interval and now >= self._next_reap) or
                    (self.prune_interval and now >= self._next_prune))

    def run_due(self) -> None:
        """Reap and prune, each when its interval (jittered ±20 %) has passed."""
        now = time.monotonic()
        if self.reap_interval and now >= self._next_reap:
            self._next_reap = now + self.reap_interval * random.uniform(0.8, 1.2)
            n = self.queue.reap(limit=1000, delay=self.reap_delay)
            if n:
                # they are due reap_delay after the reap's statement, which ran before now
                self._reaped_due_by = time.monotonic() + self.reap_delay
                self.counters.add("reaped", n)
                self.log.warning("worker.reaped worker=%s count=%d (expired leases "
                                 "returned)", self.worker_id, n)
        if self.prune_interval and now >= self._next_prune:
            self._next_prune = now + self.prune_interval * random.uniform(0.8, 1.2)
            n = self.queue.prune(self.prune_older_than, limit=1000)
            self.counters.add("pruned", n)
            if n:
                self.log.info("worker.pruned worker=%s count=%d", self.worker_id, n)

    def reaped_waiting(self) -> bool:
        """Jobs this reaper returned are not due yet (a ``burst`` worker waits for them)."""
        return time.monotonic() < self._reaped_due_by


def run_listener(listener: Listener, done: threading.Event, wake: Callable[[], None],
                 cancel_announced: Callable[[int, int], None], worker_id: str) -> None:
    """A listener thread's body (both workers): call ``wake`` whenever enqueue announces a
    job on the worker's queues and ``cancel_announced(job_id, generation)`` for each
    announced cancel, until ``done``; on errors poll only, retrying the connection with
    growing sleeps. Closes the listener at the end."""
    delay = 0.5
    try:
        while not done.is_set():
            try:
                if listener.wait(1.0):
                    log.debug("worker.notified worker=%s", worker_id)
                    wake()
                for job_id, generation in listener.take_cancelled():
                    cancel_announced(job_id, generation)
                delay = 0.5
            except Exception as exc:  # noqa: BLE001 - polling covers for us meanwhile
                log.warning("worker.listen_error worker=%s error=%s: %s; polling only, "
                            "retrying in %.1fs", worker_id, type(exc).__name__, exc, delay)
                done.wait(delay)
                delay = min(delay * 2, 30.0)
    finally:
        listener.close()


def mark_writing(inflight: dict[int, Job], writing: dict[int, Job],
                 jobs: Sequence[Job]) -> list[Job]:
    """The jobs of ``jobs`` still owned (in ``inflight``), now marked as being written
    (both workers' bookkeeping; the sync one holds its lock)."""
    owned = [j for j in jobs if inflight.get(j.id) is j]
    writing.update((j.id, j) for j in owned)
    return owned


def forget(inflight: dict[int, Job], writing: dict[int, Job], job: Job) -> None:
    """Stop owning ``job``: its outcome is written, or it was lost (both workers)."""
    for owned in (inflight, writing):
        if owned.get(job.id) is job:
            del owned[job.id]


#: why a worker gives back a rate-limited job it could not start in time
LATE_FOR_RATE_LIMIT = "not started within its rate limit's guard"


def started_too_late(job: Job) -> bool:
    """A rate-limited claim's job that no handler could start by its ``start_by`` (both
    workers): starting it now could exceed the limit in some window of start times, so it
    is given back instead (its claim stays counted in the rate log: stricter, never
    looser)."""
    return job.start_by is not None and time.monotonic() > job.start_by


def failure_summary(exc: BaseException) -> str:
    """The error text stored for a failed attempt: the traceback's last 4,000 characters."""
    return "".join(traceback.format_exception(exc, limit=8))[-4000:]


def new_worker_id() -> str:
    """``host:pid:random`` — unique per Worker, so fencing can tell workers apart."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def queues_drained(backend: Backend, queues: Sequence[str]) -> bool:
    """No job of ``queues`` is ready and due or running, whoever runs it (a paused queue's
    ready jobs are left for later): two index probes per queue (``Backend.pending``), not
    ``stats``, whose cost grows with the table."""
    paused = set(backend.paused_queues())
    for name in queues:
        ready, running = backend.pending(name)
        if running or (ready and name not in paused):
            return False
    return True


class Worker:
    """Claims and runs jobs from ``queues`` with ``handler``; see the module docstring."""

    def __init__(self, queue: Queue, queues: Sequence[str] | str, handler: Handler, *,
                 concurrency: int = 4, lease: float = 30.0, batch: int | None = None,
                 backoff: Backoff | None = None, idle_min: float = 0.05,
                 idle_max: float | None = None, reap_interval: float | None = 10.0,
                 reap_delay: float = 1.0, prune_interval: float | None = 3600.0,
                 prune_older_than: float = 7 * 86400.0, grace: float = 30.0,
                 burst: bool = False, worker_id: str | None = None,
                 install_signals: bool = False, heartbeat: bool = True,
                 listen: bool = True, prefetch: int | None = None,
                 ack_delay: float | None = None, claimers: int | None = None,
                 registry_interval: float | None = DEFAULT_REGISTRY_INTERVAL) -> None:
        names = [queues] if isinstance(queues, str) else list(queues)
        if not names:
            raise ConfigurationError("a worker needs at least one queue")
        if len(set(names)) != len(names):
            raise ConfigurationError(f"queue listed twice: {names}")
        if queue.backend.engine == "sqlite" and getattr(queue.backend, "in_memory", False):
            raise ConfigurationError(
                "sqlite://:memory: cannot be shared by a worker's connections or processes; "
                "use a file, e.g. sqlite:///portq.db")
        self.queue = queue
        self.queues = [validate_queue(n) for n in names]
        self.handler = handler
        self._handler = HandlerRunner(handler)  # refuses what cannot be a handler
        self.concurrency = positive_int(concurrency, "concurrency")
        self.lease_ms = duration_ms(lease, "lease")
        self.lease = self.lease_ms / 1000
        fixed = {k: v for k, v in (("prefetch", prefetch), ("ack_delay", ack_delay),
                                     ("claimers", claimers)) if v is not None}
        if fixed:
            warnings.warn(f"Worker {', '.join(fixed)}: deprecated, the worker sizes its "
                          "look-ahead, completion batches and claim loops itself; pass "
                          "only concurrency and lease", DeprecationWarning, stacklevel=2)
        #: the main claim loop also writes the completions, so that one thread of this
        #: worker writes at a time (the backend's ``single_writer``: SQLite), unless
        #: ``claimers`` or ``ack_delay`` is fixed by hand
        self.single_writer = queue.backend.single_writer and claimers is None and \
            ack_delay is None
        #: claim loops: fixed, one for a single writer, or up to AUTO_CLAIMERS (the others
        #: claim only while there is a look-ahead, see LookAhead)
        self.claimers = positive_int(claimers, "claimers") if claimers is not None else \
            1 if self.single_writer else min(self.concurrency, AUTO_CLAIMERS)
        #: False when ``prefetch`` fixes the look-ahead by hand
        self.auto_lookahead = prefetch is None
        self.prefetch = positive_int(prefetch, "prefetch", allow_zero=True) \
            if prefetch is not None else LOOKAHEAD_PER_CLAIMER * self.claimers
        #: most jobs this worker owns at once: running, waiting for a thread, or for their
        #: completion to commit (with the automatic look-ahead, a ceiling)
        self.capacity = self.concurrency + self.prefetch
        self.batch = claim_batch(self.capacity if batch is None and not self.auto_lookahead
                                 else batch, self.concurrency, self.capacity)
        if ack_delay is not None:
            duration_ms(ack_delay, "ack_delay", allow_zero=True)
        #: seconds the first completion of a batch may wait for others (0: a batch is
        #: what finished while the previous one was committing)
        self.ack_delay = ack_delay or 0.0
        self.lookahead = LookAhead(self.concurrency, self.lease, self.prefetch)
        self.backoff = backoff or queue.backoff
        if idle_max is None:  # the engine's: short where only polling finds new jobs
            idle_max = max(idle_min, queue.backend.idle_max_default)
        if not 0 < idle_min <= idle_max:
            raise ConfigurationError(f"need 0 < idle_min <= idle_max, got idle_min={idle_min!r}"
                                     f", idle_max={idle_max!r}")
        self.idle_min, self.idle_max = idle_min, idle_max
        duration_ms(grace, "grace", allow_zero=True)
        self.grace = grace
        self.burst = burst
        self.worker_id = worker_id or new_worker_id()
        self.install_signals = install_signals
        self.heartbeat = heartbeat
        self.listen = listen
        #: seconds between registry heartbeats (portq workers, the dashboard); None: none
        self.registry_interval = registry_interval
        #: a Scheduler run beside this worker, whose entries the registry row reports
        self.scheduler: Scheduler | None = None
        self.counters = WorkerCounters()
        self.outcomes = Outcomes(self.counters, self.worker_id, log)
        self.maintenance = Maintenance(queue, self.counters, self.worker_id, log,
                                       reap_interval=reap_interval, reap_delay=reap_delay,
                                       prune_interval=prune_interval,
                                       prune_older_than=prune_older_than)
        self.gather_seconds = 0.005
        # a pool big enough for every handler's report (failures) plus the claim loops,
        # their completion batchers, the heartbeat, the reaper and the registry
        queue.backend.pool.resize(self.concurrency + 3 + 2 * self.claimers)
        self._inflight: dict[int, Job] = {}  # jobs this worker still owns
        self._busy = 0  # claimed jobs whose handler has not returned (queued or running)
        self._acking: dict[int, Job] = {}  # handler returned, completion not yet written
        # owned jobs whose outcome is being written: a renewal refused meanwhile may only
        # mean that the outcome committed, so the write's own result decides
        self._writing: dict[int, Job] = {}
        self._claiming = 0  # slots reserved by claims in progress
        self._lock = threading.Lock()
        self._tasks: Mailbox[tuple[Job, float]] = Mailbox()  # (job, monotonic claim time)
        self._acks: Mailbox[Job] = Mailbox()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._done = threading.Event()
        self._signals = 0
        self._threads: list[threading.Thread] = []
        self._ack_threads: list[threading.Thread] = []
        self._claim_threads: list[threading.Thread] = []

    def __repr__(self) -> str:
        return f"Worker({self.worker_id!r}, queues={self.queues}, url={self.queue.url!r})"

    # ---- public -------------------------------------------------------------------------

    def run(self) -> WorkerCounters:
        """Work until :meth:`stop` (or, with ``burst``, until the queues are drained)."""
        restore = self._install_signal_handlers() if self.install_signals else None
        registration = registration_of(self, self.queue, lambda: self.held)
        if registration is not None:
            registration.start()
        self._start_threads()
        log.info("worker.started worker=%s engine=%s url=%s queues=%s concurrency=%d "
                 "lease=%gs prefetch=%s claim_loops=%d new_jobs=%s", self.worker_id,
                 self.queue.backend.engine, self.queue.url, ",".join(self.queues),
                 self.concurrency, self.lease,
                 f"auto<={self.prefetch}" if self.auto_lookahead else self.prefetch,
                 self.claimers, listen_mode(self.queue.backend, self.listen))
        try:
            self._claim_loop()
        finally:
            self._shutdown()
            if registration is not None:
                registration.stop()
            if restore:
                restore()
        log.info("worker.stopped worker=%s %s", self.worker_id,
                 " ".join(f"{k}={v}" for k, v in self.counters.as_dict().items()))
        return self.counters

    def stop(self) -> None:
        """Stop claiming; running jobs get ``grace`` seconds, then are released."""
        self._stopping.set()
        self._wake.set()

    @property
    def inflight(self) -> int:
        """Jobs this worker claimed and still owns."""
        with self._lock:
            return len(self._inflight)

    @property
    def busy(self) -> int:
        """Claimed jobs whose handler has not returned: running, or (with ``prefetch``)
        waiting for a handler thread. A job whose ownership was lost counts until its
        handler returns, so a worker never runs more than ``concurrency`` handlers."""
        with self._lock:
            return self._busy

    @property
    def held(self) -> int:
        """Jobs counted against ``capacity``: :attr:`busy` plus completions not yet
        written."""
        with self._lock:
            return self._busy + len(self._acking)

    # ---- the claim loop -----------------------------------------------------------------

    def _claim_loop(self, main: bool = True) -> None:
        """Claim rounds until stopped. The ``main`` loop (run by :meth:`run`) also reaps,
        prunes and, with ``burst``, decides when the queues are drained; the others
        (``claimers`` > 1, on their own threads) only claim, and with the automatic
        look-ahead only while there is one (slow jobs need no second claim loop)."""
        pacing = Pacing(self.queues, self.idle_min, self.idle_max)
        while not self._stopping.is_set():
            if self.auto_lookahead:
                if main:
                    self._give_back_stale()
                elif self.lookahead.size() == 0:
                    self._stopping.wait(0.05)
                    continue
            written = self._write_completions(self._acks.take(BATCH_LIMIT)) \
                if self.single_writer else 0
            try:
                claimed = self._claim_round(pacing)
                if main and self.maintenance.due():
                    self.maintenance.run_due()
                if main and self.burst and claimed == 0 and self._idle() and self._drained():
                    return
            except Exception as exc:  # noqa: BLE001 - the database may be down: back off
                delay = pacing.error_delay()
                log.warning("worker.db_error worker=%s error=%s: %s; retrying in %.2fs",
                            self.worker_id, type(exc).__name__, exc, delay)
                self._sleep(delay)
                continue
            if claimed or written:
                self._gather_free_slots()
                if self._free() <= 0 and not self._completions_waiting():
                    # woken as soon as a slot frees (or, for a single writer, a job is done)
                    self._sleep(min(self.idle_max, self.lookahead.max_wait / 2)
                                if self.auto_lookahead else self.idle_max)
            else:
                self._sleep(pacing.idle_delay())

    def _claim_round(self, pacing: Pacing) -> int:
        """One claim from each queue in turn, each for its share of the free slots (which
        it reserves while it claims, so that other claim loops leave them alone)."""
        claimed = tried = 0
        turns = pacing.turns()
        for i, name in enumerate(turns):
            limited = not self.queue.backend.known_unlimited(name)
            with self._lock:
                free = self._free_locked()
                if limited:  # a limit counts held jobs as started: claim for idle threads only
                    free = min(free, self._idle_threads_locked())
                want = min(pacing.share(free, len(turns) - i), self.batch) if free > 0 else 0
                self._claiming += want
            if want <= 0:
                break
            claimed += self._claim(name, want)
            tried += 1
        pacing.finish_round(tried, claimed)
        return claimed

    def _capacity_now(self) -> int:
        """Jobs this worker may own now: its handler threads plus the look-ahead."""
        return self.concurrency + (self.lookahead.size() if self.auto_lookahead
                                   else self.prefetch)

    def _free_locked(self) -> int:
        """Slots neither held nor reserved by a claim in progress (``_lock`` held)."""
        return self._capacity_now() - self._busy - len(self._acking) - self._claiming

    def _idle_threads_locked(self) -> int:
        """Handler threads neither busy nor reserved by a claim in progress (``_lock``
        held): what a queue that may have a concurrency, rate or per-key limit is claimed
        for, so that no claimed job of it waits in the look-ahead."""
        return self.concurrency - self._busy - len(self._acking) - self._claiming

    def _free(self) -> int:
        with self._lock:
            return self._free_locked()

    def _idle(self) -> bool:
        """Nothing held and no claim in progress."""
        with self._lock:
            return self._busy + len(self._acking) + self._claiming == 0

    def _completions_waiting(self) -> int:
        """Completions a single writer has still to write (0 for the other workers: their
        completion batchers write them)."""
        if not self.single_writer:
            return 0
        with self._lock:
            return len(self._acking)

    def _gather_free_slots(self) -> None:
        """Wait briefly (``gather_seconds``, 5 ms) until a whole batch of slots is free (for
        a single writer: free, or held by completions it will write first), so that short
        jobs are claimed in batches rather than one claim transaction per finished job.
        Never more jobs than free slots are claimed."""
        want = max(1, min(self.batch, self._capacity_now()))
        deadline = time.monotonic() + self.gather_seconds
        while not self._stopping.is_set() and \
                self._free() + self._completions_waiting() < want and not self._idle():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._sleep(left)

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def wake(self) -> None:
        """Interrupt an idle sleep (a slot freed, or a new job was announced)."""
        self._wake.set()

    def _claim(self, name: str, want: int) -> int:
        """Claim up to ``want`` jobs (slots this loop reserved) and hand them to the
        handler threads."""
        started = time.perf_counter()
        try:
            jobs = self.queue.claim(name, self.worker_id, limit=want, lease=self.lease)
        except BaseException:
            with self._lock:
                self._claiming -= want
            raise
        took = time.perf_counter() - started
        self.counters.record_claim(took, name)
        claimed_at = time.monotonic()
        with self._lock:
            self.lookahead.claim_took(took)
            self._claiming -= want
            for job in jobs:
                self._inflight[job.id] = job
            self._busy += len(jobs)
            self.counters.add("claimed", len(jobs), name)
        if log.isEnabledFor(logging.DEBUG):
            for job in jobs:
                log.debug("job.claimed job_id=%d queue=%s generation=%d worker=%s",
                          job.id, job.queue, job.attempt, self.worker_id)
        self._tasks.put_many((job, claimed_at) for job in jobs)
        return len(jobs)

    def _give_back_stale(self) -> None:
        """Give back the jobs claimed ahead that no handler thread has started within the
        look-ahead's bound (a fraction of the lease), e.g. behind jobs that became slow;
        their attempt is given back and another worker may take them at once."""
        cutoff = time.monotonic() - self.lookahead.max_wait
        stale = [job for job, _ in self._tasks.take_while(lambda item: item[1] < cutoff)]
        if stale:
            with self._lock:
                self.lookahead.stalled(self.lookahead.max_wait)
            self._disown(stale)
            self._release(stale, "not started within the look-ahead bound")

    def _drained(self) -> bool:
        """The ``burst`` exit test: no job of the queues is ready and due or running
        (whoever runs it), and every job this worker's reaper returned has waited out its
        ``reap_delay`` (until then it is ready but not yet due, and would be left behind)."""
        return not self.maintenance.reaped_waiting() and \
            queues_drained(self.queue.backend, self.queues)

    # ---- running jobs -------------------------------------------------------------------

    def _start_threads(self) -> None:
        for n in range(self.concurrency):
            self._spawn(self._run_tasks, f"portq-handler-{n}")
        for n in range(1, self.claimers):
            self._claim_threads.append(
                self._spawn(functools.partial(self._claim_loop, main=False),
                            f"portq-claim-{n}"))
        if not self.single_writer:  # a single writer's claim loop writes them itself
            self._start_completion_batchers(min(self.claimers, COMPLETION_BATCHERS))
        if self.heartbeat:
            self._spawn(self._heartbeat, "portq-heartbeat")
        if self.listen:
            listener = self.queue.backend.listener(self.queues)
            if listener is not None:
                self._spawn(functools.partial(run_listener, listener, self._done, self.wake,
                                              self._cancel_announced, self.worker_id),
                            "portq-listen")

    def _start_completion_batchers(self, n: int) -> None:
        self._ack_threads = [self._spawn(self._ack_loop, f"portq-acks-{i}") for i in range(n)]

    def _spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)
        return t

    def _run_tasks(self) -> None:
        """A handler thread (the executor): run jobs from the claim loops' mailbox."""
        while (item := self._tasks.get()) is not None:
            job = item[0]
            handed_off = False
            started = time.perf_counter()
            try:
                handed_off = self._execute(job)
            finally:
                ran = time.perf_counter() - started
                with self._lock:
                    self.lookahead.job_ran(ran)
                    if not handed_off:
                        self._forget(job)
                    self._busy -= 1
                    # a slot freed (a job handed to the completion batcher still holds its
                    # slot): wake the claim loops when that makes a first free slot or a batch
                    free = self._free_locked()
                    batch = min(self.batch, self._capacity_now())
                    wake = (not handed_off and free in (1, batch)) or \
                        (handed_off and self.single_writer and len(self._acking) in (1, batch))
                if wake:
                    self._wake.set()
        self._handler.close_thread()  # the mailbox closed: this thread's loop goes too

    def _start_writing(self, jobs: Sequence[Job]) -> list[Job]:
        """The jobs of ``jobs`` this worker still owns, now marked as being written."""
        with self._lock:
            return mark_writing(self._inflight, self._writing, jobs)

    def _forget(self, job: Job) -> None:
        """Stop owning ``job`` (its outcome is written, or it was lost); hold the lock."""
        forget(self._inflight, self._writing, job)

    def _execute(self, job: Job) -> bool:
        """Run the handler and report; True when the completion was left to the ack thread.
        A job cancelled meanwhile (its handler told) writes nothing: it is ``cancelled``."""
        if job.cancelled():
            return False  # cancelled while it waited for a thread: never started
        if started_too_late(job):
            with self._lock:
                self._forget(job)
            self._release([job], LATE_FOR_RATE_LIMIT)
            return False
        try:
            result = self._handler.run(job)
            if result is not None and not self._store_result(job, result):
                return False  # lost meanwhile; its new owner reports
        except Permanent as exc:  # a ResultError (result not storable) too
            self._report(job, "dead", f"{type(exc).__name__}: {exc}", None)
        except RetryAfter as exc:
            self._report(job, "retry", str(exc), max(0.0, exc.delay))
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - a handler may raise anything
            if job.cancelled():
                return False  # e.g. JobCancelled, or its async task cancelled
            self._report(job, "retry", failure_summary(exc), self.backoff.delay(job.attempt))
        else:
            with self._lock:
                if self._inflight.get(job.id) is not job:
                    return False  # released or lost meanwhile; its new owner reports
                self._acking[job.id] = job
            self._acks.put_many((job,))
            return True
        return False

    def _store_result(self, job: Job, result: Any) -> bool:
        """Store a handler's return value before its completion; False when the claim lost
        the job (logged as lost) or the lease ran out first."""
        text = self.queue.dump_result(result)  # ResultError: the job goes to dead
        with self._lock:
            owned = self._inflight.get(job.id) is job
        if not owned:
            return False  # released or lost meanwhile (already logged)
        written = self._write([job], lambda: [self.queue.backend.store_result(
            _claim_of(job), text)])
        if written is not None and not written[0][0]:
            self._record(job, "succeeded", False, written[1], "", None)
        return written is not None and written[0][0]

    def _report(self, job: Job, outcome: str, error: str, retry_in: float | None) -> None:
        """Write the outcome, retrying through connection trouble until the lease ends."""
        if not self._start_writing([job]):
            return  # released or lost meanwhile; its new owner reports
        written = self._write([job], lambda: [self.queue.fail(job, error, retry_in=retry_in)])
        if written is not None:
            self._record(job, outcome, written[0][0], written[1], error, retry_in)

    def _write(self, jobs: Sequence[Job], write: Callable[[], list[bool]]
               ) -> tuple[list[bool], bool] | None:
        """``write()`` retried through connection trouble (:class:`WriteRetry`): its
        results and whether an earlier try was cut (and may have committed after all), or
        None when the lease ran out first (the jobs will run again)."""
        retry = WriteRetry(jobs, self.lease, self.worker_id, log)
        while True:
            try:
                return write(), retry.interrupted
            except Exception as exc:  # noqa: BLE001 - keep trying while the lease lives
                delay = retry.failed(exc)
                if delay is None:
                    return None
                time.sleep(delay)

    def _record(self, job: Job, outcome: str, ok: bool, interrupted: bool, error: str,
                retry_in: float | None) -> None:
        """Count and log one written outcome (a refused one as cancelled when it was)."""
        if ok:
            self.outcomes.written(job, outcome, error, retry_in)
        else:
            self.outcomes.refused(job, outcome, interrupted, self._was_cancelled([job])[0])

    def _ack_loop(self) -> None:
        """The completion batcher: write the completions handed over by handler threads,
        each batch (up to ``BATCH_LIMIT``) in one statement (``Queue.complete_many``), the
        first of a batch waiting at most ``ack_delay`` seconds (0: what finished while the
        previous batch committed); once the mailbox is closed, write what is left, stop."""
        while jobs := self._acks.get_batch(BATCH_LIMIT, self.ack_delay):
            self._write_completions(jobs)
            self._wake.set()

    def _write_completions(self, jobs: Sequence[Job]) -> int:
        """Write handed-over completions in one statement (``Queue.complete_many``),
        retried through connection trouble; free their slots. How many were handed over."""
        if not jobs:
            return 0
        owned = self._start_writing(jobs)  # one lost meanwhile is not reported
        written = self._write(owned, functools.partial(self.queue.complete_many, owned)
                              ) if owned else None
        with self._lock:
            for job in jobs:
                del self._acking[job.id]
                self._forget(job)
        if written is not None:
            results, interrupted = written
            for job, ok in zip(owned, results, strict=True):
                self._record(job, "succeeded", ok, interrupted, "", None)
        return len(jobs)

    def _heartbeat(self) -> None:
        while not self._done.wait(self.lease / 3):
            with self._lock:
                jobs = list(self._inflight.values())
            try:  # one statement per tick, whatever the number of jobs
                results = self.queue.renew_many(jobs, lease=self.lease)
            except Exception as exc:  # noqa: BLE001 - try again next beat
                log.warning("job.renew_error job_ids=%s worker=%s error=%s",
                            ",".join(str(j.id) for j in jobs), self.worker_id, exc)
                continue
            refused = [job for job, renewed in zip(jobs, results, strict=True)
                       if not renewed and self._owned_not_writing(job)]
            if not refused:
                continue
            try:  # cancelled by an operator, or taken by another owner?
                cancelled = self.queue.backend.cancelled([_claim_of(j) for j in refused])
            except Exception as exc:  # noqa: BLE001 - ask again next beat
                log.warning("job.renew_error job_ids=%s worker=%s error=%s",
                            ",".join(str(j.id) for j in refused), self.worker_id, exc)
                continue
            for job, was_cancelled in zip(refused, cancelled, strict=True):
                with self._lock:  # not lost if its outcome is being written
                    lost = self._inflight.get(job.id) is job and \
                        self._writing.get(job.id) is not job
                    if lost:
                        del self._inflight[job.id]
                if lost and was_cancelled:
                    self.outcomes.cancelled(job, "lease renewal refused")
                elif lost:
                    self.outcomes.lost(job, "lease renewal refused")

    def _owned_not_writing(self, job: Job) -> bool:
        with self._lock:
            return self._inflight.get(job.id) is job and self._writing.get(job.id) is not job

    def _was_cancelled(self, jobs: Sequence[Job]) -> list[bool]:
        """Whether each job's generation was cancelled (False where that cannot be read)."""
        try:
            return self.queue.backend.cancelled([_claim_of(j) for j in jobs])
        except Exception as exc:  # noqa: BLE001 - then it counts as lost
            log.warning("worker.db_error worker=%s error=%s: %s; could not tell whether "
                        "job_id=%s was cancelled", self.worker_id, type(exc).__name__, exc,
                        ",".join(str(j.id) for j in jobs))
            return [False] * len(jobs)

    def _cancel_announced(self, job_id: int, generation: int) -> None:
        """The database announced that a running job was cancelled (PostgreSQL NOTIFY)."""
        with self._lock:
            job = self._inflight.get(job_id)
            if job is None or job.attempt != generation:
                return  # not ours (every worker hears every cancel)
            writing = self._writing.get(job_id) is job
            if not writing:
                del self._inflight[job_id]
        if writing:  # the write's refusal counts it
            job._cancel.set()
        else:
            self.outcomes.cancelled(job, "announced by the database")

    # ---- shutdown -----------------------------------------------------------------------

    def _shutdown(self) -> None:
        self._stopping.set()
        self._wake.set()
        for thread in self._claim_threads:  # their last claims' jobs join the unstarted
            thread.join()
        if self.single_writer:  # the claim loop that wrote completions has ended
            self._start_completion_batchers(1)
        self._release(self._unstarted(), "not started")
        deadline = time.monotonic() + self.grace
        while self._running_owned() and time.monotonic() < deadline:
            time.sleep(0.05)
        with self._lock:  # handlers still running after the grace: give their jobs back
            leftover = [j for j in self._inflight.values() if j.id not in self._acking]
            for job in leftover:
                del self._inflight[job.id]
        self._release(leftover, "grace over")
        self._acks.close()  # the ack threads write the completions still waiting, then stop
        for thread in self._ack_threads:
            thread.join()
        self._done.set()
        self._tasks.close()

    def _running_owned(self) -> int:
        with self._lock:
            return len(self._inflight) - len(self._acking)

    def _unstarted(self) -> list[Job]:
        """Take the jobs claimed ahead that no handler thread has started, no longer
        owning them."""
        jobs = [job for job, _ in self._tasks.drain()]
        self._disown(jobs)
        return jobs

    def _disown(self, jobs: Sequence[Job]) -> None:
        """Forget unstarted ``jobs`` taken out of the mailbox (they are to be released)."""
        with self._lock:
            for job in jobs:
                if self._inflight.get(job.id) is job:
                    del self._inflight[job.id]
                self._busy -= 1

    def _release(self, jobs: Sequence[Job], why: str) -> None:
        """Give ``jobs`` back to ready (the attempt is given back too)."""
        for job in jobs:
            try:
                if self.queue.release(job):
                    self.outcomes.released(job, why)
            except Exception as exc:  # noqa: BLE001 - its lease will expire instead
                log.error("job.release_failed job_id=%d worker=%s error=%s",
                          job.id, self.worker_id, exc)

    def _install_signal_handlers(self) -> Callable[[], None] | None:
        if threading.current_thread() is not threading.main_thread():
            return None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self._signals += 1
            if self._signals > 1:
                log.error("worker.killed worker=%s: second signal, exiting at once",
                          self.worker_id)
                os._exit(128 + signum)
            log.info("worker.stopping worker=%s signal=%s grace=%gs",
                     self.worker_id, signal.Signals(signum).name, self.grace)
            self.stop()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for s, h in previous.items():
                signal.signal(s, h)
        return restore
