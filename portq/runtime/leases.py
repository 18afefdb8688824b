"""Keeping what a runtime owns honest: lease renewals (the heartbeat), refused renewals,
announced cancels, a failover to another server history, and job timeouts (the
watchdog)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from portq.job import Job
from portq.queue import _claim_of
from portq.runtime.execution import RETRY, Outcome
from portq.runtime.slots import HandlerSlots


class Leases(HandlerSlots):
    """Heartbeat, cancels and the watchdog's timeouts (see the module)."""

    def _heartbeat(self) -> None:
        """Renew every owned job's lease at a third of the lease, in one statement; a
        refused renewal means the job was cancelled or taken: its handler is told."""
        while not self._done.wait(self.settings.lease / 3):
            with self._lock:
                jobs = [j for j in self._inflight.values() if not j.timed_out()]
            if not jobs:
                continue
            sent = time.monotonic()
            try:  # one statement per tick, whatever the number of jobs
                with self.watch("renew_many"), self._row_writes:
                    results = self.queue.renew_many(jobs, lease=self.settings.lease)
            except Exception as exc:  # noqa: BLE001 - try again next beat
                self.log.warning("job.renew_error job_ids=%s worker=%s error=%s",
                                 ",".join(str(j.id) for j in jobs), self.worker_id, exc)
                continue
            with self._lock:
                for job, renewed in zip(jobs, results, strict=True):
                    if renewed and self._inflight.get(job.id) is job:
                        self._renewed_at[job.id] = sent
            refused = [job for job, renewed in zip(jobs, results, strict=True)
                       if not renewed and self._owned_not_writing(job)]
            if refused:
                self._refused_renewals(refused)

    def _refused_renewals(self, refused: Sequence[Job]) -> None:
        try:  # cancelled by an operator, or taken by another owner?
            cancelled = self.queue.backend.cancelled([_claim_of(j) for j in refused])
        except Exception as exc:  # noqa: BLE001 - ask again next beat
            self.log.warning("job.renew_error job_ids=%s worker=%s error=%s",
                             ",".join(str(j.id) for j in refused), self.worker_id, exc)
            return
        for job, was_cancelled in zip(refused, cancelled, strict=True):
            with self._lock:  # not lost if its outcome is being written
                lost = self._inflight.get(job.id) is job and \
                    self._writing.get(job.id) is not job
                if lost:
                    self._forget(job)
            if lost and was_cancelled:
                self.outcomes.cancelled(job, "lease renewal refused")
            elif lost:
                self.outcomes.lost(job, "lease renewal refused")

    def _cancel_announced(self, job_id: int, generation: int) -> None:
        """The database announced that a running job was cancelled (PostgreSQL NOTIFY)."""
        with self._lock:
            job = self._inflight.get(job_id)
            if job is None or job.attempt != generation:
                return  # not ours (every worker hears every cancel)
            writing = self._writing.get(job_id) is job
            if not writing:
                self._forget(job)
        if writing:  # the write's refusal counts it
            job._cancel.set()
        else:
            self.outcomes.cancelled(job, "announced by the database")

    def _history_changed(self, old: object, new: object) -> None:
        """A new connection reached a server of another history (a failover to a standby
        that had not received every commit): the claims this worker holds may be unknown
        there, and their jobs handed out again with the same generation while these
        handlers run. Every held job's handler is told (``job.cancelled()``; an async
        one's task is cancelled) and nothing more is written or renewed for them; each
        counts as lost. Called in the thread that opened the connection: it only signals."""
        if self._done.is_set():
            return
        with self._lock:
            jobs = list(self._inflight.values())
            for job in jobs:
                self._forget(job)
        for job in jobs:
            job._cancel.set("history")
            self.counters.add("lost", queue=job.queue)
        self.log.warning("worker.history_changed worker=%s old=%s new=%s job_ids=%s: the "
                         "database now runs another history (a failover); the handlers of "
                         "the jobs held were told, nothing more is written for them",
                         self.worker_id, old, new, ",".join(str(j.id) for j in jobs) or "-")

    def _watchdog(self) -> None:
        """Every tick: fail the jobs past their timeout, take back the slots of handlers
        that did not stop within the grace after it, and warn of stalled database calls."""
        tick = min(0.25, self.settings.lease / 6)
        while not self._done.wait(tick):
            self.watch.warn_slow()
            self._expire_timeouts()

    def _expire_timeouts(self) -> None:
        now = time.monotonic()
        grace = self.settings.grace
        with self._lock:
            due = [(job, deadline) for job, deadline in self._running.values()
                   if deadline is not None and now >= deadline]
        for job, deadline in due:
            if not job.timed_out():
                if job.cancelled():
                    continue  # cancelled or lost meanwhile: counted already
                timeout = job.timeout if job.timeout is not None else \
                    self.settings.job_timeout
                # the failure is handed over before the handler is told, so that a handler
                # returning at once finds its job already failing (nothing else written)
                self._hand_over(job, Outcome(job, RETRY, f"JobTimeout: job {job.id} ran past "
                                             f"its timeout of {timeout:g}s",
                                             self.backoff.delay(job.attempt)), returned=False)
                job._cancel.set("timeout")
                self.log.warning("job.timeout job_id=%d queue=%s generation=%d worker=%s: "
                                 "ran past its timeout of %gs; its handler was told",
                                 job.id, job.queue, job.attempt, self.worker_id, timeout)
                self.counters.add("timed_out", queue=job.queue)
                self._executor.timed_out(job)
            elif now >= deadline + grace and self._executor.abandon(job):
                with self._lock:
                    if self._running.pop(job.id, None) is None:
                        continue  # it returned meanwhile
                    self._busy -= 1
                    self._freed.add(job.id)
                self.counters.add("abandoned", queue=job.queue)
                self.log.error("job.abandoned job_id=%d queue=%s worker=%s: its handler did "
                               "not stop within %gs of its timeout; its thread is left to "
                               "finish alone and replaced", job.id, job.queue,
                               self.worker_id, grace)
                self._wake.set()
