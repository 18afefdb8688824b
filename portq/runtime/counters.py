"""What a worker did: its counters, the one log line per job event, and how it writes an
outcome through connection trouble."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from portq.job import Job, error_line


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
    #: jobs a handler rescheduled with portq.Snooze (their attempt given back)
    snoozed: int = 0
    #: attempts that ran past their timeout (failed with JobTimeout)
    timed_out: int = 0
    #: handler threads left behind after a timeout's grace (replaced, never reused)
    abandoned: int = 0
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
            self._add_locked(counter, n, queue)

    def add_each(self, counter: str, queues: Sequence[str]) -> None:
        """Add 1 to ``counter`` per entry of ``queues`` (and to that queue's), under one
        lock: a batch's jobs."""
        per_queue = Counter(queues)  # counted in C: a batch is usually of one queue
        with self._lock:
            for queue, n in per_queue.items():
                self._add_locked(counter, n, queue)

    def _add_locked(self, counter: str, n: int, queue: str | None) -> None:
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



class Outcomes:
    """Counting and logging what became of a worker's jobs, one line per event (shared by
    :class:`Worker` and ``portq.aio.AsyncWorker``)."""

    def __init__(self, counters: WorkerCounters, worker_id: str,
                 logger: logging.Logger) -> None:
        self.counters, self.worker_id, self.log = counters, worker_id, logger

    def succeeded(self, jobs: Sequence[Job]) -> None:
        """Completions committed (a batch's): counted under one lock, one debug line
        each when debug logging is on."""
        self.counters.add_each("succeeded", [job.queue for job in jobs])
        if self.log.isEnabledFor(logging.DEBUG):
            for job in jobs:
                self.log.debug("job.succeeded job_id=%d queue=%s generation=%d worker=%s",
                               job.id, job.queue, job.attempt, self.worker_id)

    def written(self, job: Job, outcome: str, error: str, retry_in: float | None) -> None:
        """An outcome committed: ``succeeded``, or a failure (dead when ``retry_in`` is
        None or the attempts are spent, else retried)."""
        if outcome == "succeeded":
            self.succeeded([job])
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

    def snoozed(self, job: Job, delay: float) -> None:
        """``job`` was rescheduled by its handler (portq.Snooze), its attempt given back."""
        self.counters.add("snoozed", queue=job.queue)
        self.log.info("job.snoozed job_id=%d queue=%s generation=%d worker=%s in=%.2fs",
                      job.id, job.queue, job.attempt, self.worker_id, delay)

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

