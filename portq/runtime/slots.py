"""The handler slots' side of the runtime, called by the front's executor: take a job
from the waiting line, decide whether it may start, and hand what its handler did to the
writers. Nothing here touches the database (the asyncio front never blocks its loop), and
the common path takes one lock per job at most."""

from __future__ import annotations

import time
from typing import Any

from portq.job import Job
from portq.runtime.execution import (
    DEAD,
    RELEASE,
    SUCCEEDED,
    LateStart,
    Outcome,
    outcome_of,
    start_refusal,
)
from portq.runtime.ledger import Ledger

#: handlers shorter than this on average are served by whichever handler thread is awake,
#: the others left asleep (each wake-up of a thread took the GIL from the claim loop:
#: SQLite, no-op jobs, 4 threads, 49,015 against 44,346 jobs/s, medians of 5 rounds)
UNCHAINED_BELOW_S = 0.0001


class HandlerSlots(Ledger):
    """What a front's handler slot calls (see the module)."""

    def next_job(self) -> Job | None:
        """The next job a handler thread may start, waiting for one; None once the line is
        closed and empty."""
        while (item := self.line.get()) is not None:
            if self.begin(item[0]):
                return item[0]
        return None

    def take_job(self) -> Job | None:
        """The next job a handler task may start, without waiting; None when none waits."""
        while items := self.line.take(1):
            if self.begin(items[0][0]):
                return items[0][0]
        return None

    def begin(self, job: Job) -> bool:
        """Whether ``job``, taken from the line by a free handler slot, may start now. One
        that may not is dealt with here: dropped when it was cancelled or lost meanwhile,
        given back when its claim's start deadline passed (half the lease, or a rate
        limit's guard)."""
        # the common case takes no lock (one per job is measurable on short jobs): dict
        # reads are atomic, and a job lost between this look and its start was so before
        if self._inflight.get(job.id) is not job or job._cancel.is_set():
            with self._lock:
                self._forget(job)
                self._busy -= 1
            return False
        refusal = start_refusal(job, self._renewed_at.get(job.id, job.leased_at),
                                self.settings.lease)
        if refusal is None:
            self._started += 1  # a heuristic's count: a lost increment is harmless
            self._futile = 0
            self._stall_said = False
            timeout = job.timeout if job.timeout is not None else self.settings.job_timeout
            if timeout is not None:
                with self._lock:
                    self._running[job.id] = (job, time.monotonic() + timeout)
            return True
        self._hand_over(job, Outcome(job, RELEASE, refusal), returned=True)
        return False

    def finish(self, job: Job, exc: BaseException | None, result: Any,
               seconds: float) -> None:
        """A handler ran ``job`` for ``seconds`` and returned ``result`` or raised
        ``exc``: decide the outcome and hand it to the writer; the slot is free."""
        if isinstance(exc, LateStart):  # it never started: given back (HandlerThreads)
            with self._lock:
                self._running.pop(job.id, None)  # no timeout runs for it
            self._hand_over(job, Outcome(job, RELEASE, str(exc)), returned=True)
            return
        try:
            outcome = Outcome(job, SUCCEEDED) if exc is None and result is None and \
                not job._cancel.is_set() else \
                outcome_of(job, exc, result, self.backoff.delay, self.queue.dump_result)
        except Exception as error:  # noqa: BLE001 - e.g. a result whose JSON raised
            outcome = Outcome(job, DEAD, f"{type(error).__name__}: {error}")
        self._hand_over(job, outcome, returned=True, ran=seconds)

    def _hand_over(self, job: Job, outcome: Outcome | None, returned: bool,
                   ran: float | None = None) -> None:
        """Give ``outcome`` to the writer (the job keeps its slot until it is written), or
        forget ``job`` when there is nothing to write or it is no longer owned; with
        ``returned`` its handler slot is free again (after ``ran`` seconds of handler).
        One job at a time: several handed over at once measured +2.6% on SQLite only
        (docs/operations.md), and a held-back outcome is one the watchdog may time out."""
        with self._lock:
            if ran is not None:
                self.lookahead.job_ran(ran)
                # jobs much shorter than a thread's wake-up: the awake handler thread
                # takes them one after another (the claim loops nudge another awake when
                # one waits too long: ClaimLoops._sleep)
                self.line.chain = not self.lookahead.jobs_shorter_than(UNCHAINED_BELOW_S)
                if self._running:
                    self._running.pop(job.id, None)
            if returned:
                self._slot_freed_locked(job)
            # by identity: the job's previous attempt may still be in the writer's hands
            # (its retry, due at once, claimed again by this worker before the writer let
            # go of it); this attempt's outcome must not be taken for that one's
            acking = self._acking.get(job.id) is job
            handed = outcome is not None and self._inflight.get(job.id) is job and not acking
            if handed:
                self._acking[job.id] = job
            elif not acking:
                self._forget(job)
            s = self.settings
            capacity = self._capacity_now()
            free = self._free_locked(capacity)
            batch = min(self.claim_batch, capacity)
            wake = (returned and free in (1, batch)) or \
                (handed and s.single_writer and len(self._acking) in (1, batch))
        if handed:
            assert outcome is not None
            self._writes.put_many((outcome,))
        if wake:
            self._wake.set()

    def drop(self, job: Job) -> None:
        """A handler slot ended without an outcome for ``job`` (its task was cancelled at
        shutdown): the slot is free, the job is left to the shutdown's release."""
        with self._lock:
            self._running.pop(job.id, None)
            self._slot_freed_locked(job)

    def _slot_freed_locked(self, job: Job) -> None:
        """``job``'s handler slot is free (``_lock`` held): one fewer busy, unless the
        watchdog took the slot back already (a timed-out thread it abandoned)."""
        if job.id in self._freed:
            self._freed.discard(job.id)
        else:
            self._busy -= 1
