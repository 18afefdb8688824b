"""Writing outcomes: the writers' loop, completions batched into one statement, results,
failures, snoozes and give-backs, each retried through connection trouble while the
lease lives (:class:`~portq.runtime.counters.WriteRetry`)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence

from portq.job import Job
from portq.queue import MAX_SNOOZES, _claim_of
from portq.runtime.counters import WriteRetry
from portq.runtime.execution import DEAD, RELEASE, RETRY, SNOOZE, SUCCEEDED, Outcome
from portq.runtime.ledger import Ledger
from portq.runtime.pacing import BATCH_LIMIT, WRITE_BATCH_LIMIT

#: the longest a writer waits for a batch of outcomes to gather (:meth:`Writer._linger`):
#: 40 slots of 5 ms jobs on PostgreSQL wrote about 40 completions a statement instead of
#: 8-10, for a median 91 µs of client CPU a job instead of 112, and 6,980 jobs/s against
#: 6,770 (medians of 6 interleaved pairs of runs)
WRITE_LINGER_S = 0.003
#: a wait shorter than this gathers too little to pay for the timed wait itself: none
WRITE_LINGER_MIN_S = 0.0005
#: no wait unless at least this many more outcomes come within :data:`WRITE_LINGER_S`
WRITE_LINGER_GATHERS = 2


class Writer(Ledger):
    """Writes the outcomes handed over by the handler slots (see the module)."""

    def _write_loop(self) -> None:
        """A writer: write the outcomes the handler slots handed over, the completions of
        a batch (up to ``WRITE_BATCH_LIMIT``) in one statement; once the mailbox is
        closed, write what is left, then stop. Its own linger (:meth:`_linger`) ends once
        a claim's worth has gathered: lingering on for ``WRITE_BATCH_LIMIT``, the outcomes
        of 40 slots of 5 ms jobs, which finish together, waited out the whole linger, the
        slots they held past :attr:`ack_allowance` kept the next claim back, and the
        handlers found the line empty twice as long (both fronts faster: see
        docs/operations.md). A linger fixed by hand (the deprecated ``ack_delay``) is
        waited out whole, as it was."""
        by_hand = self.settings.options.ack_delay is not None
        while outcomes := self._writes.get_batch(
                WRITE_BATCH_LIMIT, self._linger(), fill=None if by_hand else self.claim_batch):
            self._write_outcomes(outcomes)
            self._wake.set()

    def _linger(self) -> float:
        """How long the writer waits for a batch to gather once an outcome waits: the
        deprecated ``ack_delay`` when given; else, where a waiting outcome holds no slot
        (:attr:`ack_allowance`), the time the handlers take to finish a claim's worth of
        jobs, at most :data:`WRITE_LINGER_S` (many slots of I/O-bound jobs finish a few
        at a time: a statement each would cost a round trip's CPU per few jobs), and none
        when that is under :data:`WRITE_LINGER_MIN_S` (short jobs fill a batch while the
        last one is written)."""
        s = self.settings
        if s.options.ack_delay is not None or not self.ack_allowance:
            return s.ack_delay
        finish = self.lookahead.seconds_to_finish
        if finish(WRITE_LINGER_GATHERS) > WRITE_LINGER_S:
            return 0.0  # few slots of long jobs: a wait would gather nothing, only delay
        # half the allowance at most: the batch gathering and the one being written must
        # not hold slots between them (with the whole allowance the line ran dry: the p99
        # gap between a handler thread's jobs grew from 1.1-2.6 ms to 5.9 ms)
        linger = min(WRITE_LINGER_S, finish(min(self.claim_batch, self.ack_allowance // 2)))
        return linger if linger >= WRITE_LINGER_MIN_S else 0.0

    def _write_outcomes(self, outcomes: Sequence[Outcome]) -> int:
        """Write handed-over outcomes: results first (each in its own transaction), then
        the completions in one statement (``Queue.complete_many``), then failures and
        give-backs one by one; free their slots. How many were handed over."""
        if not outcomes:
            return 0
        with self._lock:
            owned = self._mark_writing([o.job for o in outcomes])
        if len(owned) == len(outcomes):
            mine = outcomes
        else:  # one lost meanwhile: not reported
            ids = {j.id for j in owned}
            mine = [o for o in outcomes if o.job.id in ids]
        succeeded = [o for o in mine if o.kind == SUCCEEDED]
        returned = [o for o in succeeded if o.result is not None]
        stored: set[int] = set()
        for i in range(0, len(returned), BATCH_LIMIT):  # a transaction each: see below
            stored |= self._store_results(returned[i:i + BATCH_LIMIT])
        completions = [o.job for o in succeeded if o.result is None or o.job.id in stored]
        if completions:
            with self.watch("complete_many"):
                written = self._write(completions, functools.partial(
                    self.queue.complete_many, completions))
            if written is not None:
                results, interrupted = written
                self.outcomes.succeeded([j for j, ok in zip(completions, results, strict=True)
                                         if ok])
                for job, ok in zip(completions, results, strict=True):
                    if not ok:
                        self._record(job, SUCCEEDED, ok, interrupted, "", None)
        if len(succeeded) < len(mine):
            for o in mine:
                if o.kind in (RETRY, DEAD):
                    self._write_failure(o)
                elif o.kind == RELEASE:
                    self._release([o.job], o.error)
                elif o.kind == SNOOZE:
                    self._write_snooze(o)
        with self._lock:
            self._forget_all([o.job for o in outcomes], written=True)
        return len(outcomes)

    def _store_results(self, outcomes: Sequence[Outcome]) -> set[int]:
        """Store the handlers' return values before their completions, in one
        transaction (of several statements a result: the caller passes at most
        ``BATCH_LIMIT``, so that the heartbeat's renewals, which wait for it, are not held
        up by a writer's whole backlog); the ids of the jobs whose result was stored (one
        whose claim lost the job is logged; none when the lease ran out first)."""
        if not outcomes:
            return set()
        jobs = [o.job for o in outcomes]
        with self.watch("store_result"):
            written = self._write(jobs, lambda: self.queue.backend.store_results(
                [(_claim_of(o.job), o.result or "") for o in outcomes]))
        if written is None:
            return set()
        results, interrupted = written
        for job, ok in zip(jobs, results, strict=True):
            if not ok:
                self._record(job, SUCCEEDED, False, interrupted, "", None)
        return {job.id for job, ok in zip(jobs, results, strict=True) if ok}

    def _write_failure(self, o: Outcome) -> None:
        retry_in = None if o.kind == DEAD else o.retry_in
        with self.watch("fail"):
            written = self._write([o.job], lambda: [self.queue.fail(o.job, o.error,
                                                                    retry_in=retry_in)])
        if written is not None:
            self._record(o.job, o.kind, written[0][0], written[1], o.error, retry_in)

    def _write_snooze(self, o: Outcome) -> None:
        """Reschedule a snoozed job (its attempt given back); past the most snoozes a job
        may have, the attempt fails instead."""
        delay = o.retry_in or 0.0
        with self.watch("snooze"):
            written = self._write([o.job], lambda: [self.queue.snooze(o.job, delay)])
        if written is None:
            return
        if written[0][0]:
            self.outcomes.snoozed(o.job, delay)
            return
        if self._was_cancelled([o.job])[0]:
            self.outcomes.cancelled(o.job, "its snooze's write was refused")
            return
        self._write_failure(Outcome(o.job, RETRY, f"Snooze: snoozed {MAX_SNOOZES} times "
                                    "already, the most a job may be; this attempt counts as "
                                    "failed", self.backoff.delay(o.job.attempt)))

    def _write(self, jobs: Sequence[Job], write: Callable[[], list[bool]]
               ) -> tuple[list[bool], bool] | None:
        """``write()`` retried through connection trouble (:class:`WriteRetry`): its
        results and whether an earlier try was cut (and may have committed after all), or
        None when the lease ran out first (the jobs will run again)."""
        retry = WriteRetry(jobs, self.settings.lease, self.worker_id, self.log)
        while True:
            try:
                with self._row_writes:  # not while it waits to try again
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

    def _was_cancelled(self, jobs: Sequence[Job]) -> list[bool]:
        """Whether each job's generation was cancelled (False where that cannot be read)."""
        try:
            return self.queue.backend.cancelled([_claim_of(j) for j in jobs])
        except Exception as exc:  # noqa: BLE001 - then it counts as lost
            self.log.warning("worker.db_error worker=%s error=%s: %s; could not tell whether "
                             "job_id=%s was cancelled", self.worker_id, type(exc).__name__,
                             exc, ",".join(str(j.id) for j in jobs))
            return [False] * len(jobs)


    def _release(self, jobs: Sequence[Job], why: str) -> None:
        """Give ``jobs`` back to ready (the attempt is given back too), in one
        transaction."""
        if not jobs:
            return
        try:
            with self.watch("release"), self._row_writes:
                released = self.queue.release_many(jobs)
        except Exception as exc:  # noqa: BLE001 - their leases will expire instead
            self.log.error("job.release_failed job_id=%s worker=%s error=%s",
                           ",".join(str(j.id) for j in jobs), self.worker_id, exc)
            return
        for job, ok in zip(jobs, released, strict=True):
            if ok:
                self.outcomes.released(job, why)
            else:
                self.outcomes.lost(job, f"could not be given back ({why}): its lease had "
                                   "expired or another owner took it")
