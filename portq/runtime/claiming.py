"""The claim loops: claim rounds sized by :class:`~portq.runtime.pacing.Pacing` and the
look-ahead, batching of freed slots, give-backs of jobs left unstarted, maintenance and
the ``burst`` exit test."""

from __future__ import annotations

import logging
import time

from portq.runtime.maintenance import queues_drained
from portq.runtime.pacing import BATCH_LIMIT, Pacing
from portq.runtime.writer import Writer

#: claims in a row whose jobs were all given back unstarted before the worker stops
#: claiming until a handler starts a job again (its handler slots are not serving)
FUTILE_GIVE_BACKS = 3
#: claim loops all the workers serving a queue run between them (as the registry counts
#: them): past a few, claimers only skip each other's locked rows at the head of the ready
#: index (16 processes of 4 loops each made 23-28% fewer jobs a second than of 1 each)
CLAIM_LOOP_BUDGET = 16
#: how often the burst exit test looks whether another loop's claim has come back
CLAIM_SETTLE_POLL_S = 0.0005
#: a single writer (SQLite) writes the completions waiting once this many claims' worth
#: of them are (or sooner: see :meth:`ClaimLoops._write_due`): a batch of 80 cost half as
#: much a job as one of 20 (no-op jobs, batch 20: 32,009-34,828 jobs/s against
#: 26,358-29,541 with a write before every claim)
SINGLE_WRITER_CLAIMS_PER_WRITE = 4
#: the longest a single writer leaves an outcome unwritten while it claims on (a steady
#: trickle of jobs, each claim finding a few, would otherwise fill the 4 claims' worth
#: slowly): as long as it waits for a whole batch of slots (``gather_seconds``)
SINGLE_WRITER_LINGER_S = 0.005
#: the longest jobs wait in the line beside sleeping handler threads when the awake one
#: takes no job (short jobs, no chain of wake-ups: :meth:`ClaimLoops._sleep`)
NUDGE_S = 0.001


class ClaimLoops(Writer):
    """The claim loops of a runtime (see the module)."""

    def _claim_loop(self, index: int = 0) -> None:
        """Claim rounds until stopped. The main loop (``index`` 0) also gives back jobs
        left unstarted too long, reaps, prunes and, with ``burst``, decides when the queues
        are drained; the others (``index`` 1, 2, ...) only claim, and with the automatic
        look-ahead only while there is one (slow jobs need no second claim loop), while
        one loop does not keep up alone (:meth:`~portq.runtime.pacing.LookAhead.one_loop_keeps_up`:
        jobs that start a few per round trip, such as many slots of I/O-bound jobs) and
        while their index is within :attr:`claim_loops`."""
        main = index == 0
        s = self.settings
        pacing = Pacing(self.turns, s.idle_min, s.idle_max)
        claimed = 0
        while not self._stopping.is_set():
            if not self.line.chain:
                self.line.nudge(NUDGE_S)
            if s.auto_lookahead:
                if main:
                    self._give_back_stale()
                elif index >= self.claim_loops or self.lookahead.size() == 0 or \
                        self.lookahead.one_loop_keeps_up(self.claim_batch):
                    self._stopping.wait(0.05)
                    continue
            written = self._write_outcomes(self._writes.take(BATCH_LIMIT)) \
                if s.single_writer and self._write_due(claimed) else 0
            if self._futile >= FUTILE_GIVE_BACKS:
                # nothing it claims gets started: claim again only after a pause of a lease,
                # so that give-backs stay rare and the worker stays live (a slow moment
                # must not stop it for good)
                self._stopping.wait(max(s.idle_max, s.lease))
                with self._lock:
                    self._futile = FUTILE_GIVE_BACKS - 1
            try:
                claimed = self._claim_round(pacing)
                if main and self.maintenance.due():
                    with self.watch("reap/prune"):
                        self.maintenance.run_due()
                if main and s.options.burst and claimed == 0 and self._burst_over():
                    return
            except Exception as exc:  # noqa: BLE001 - the database may be down: back off
                delay = pacing.error_delay()
                self.log.warning("worker.db_error worker=%s error=%s: %s; retrying in %.2fs",
                                 self.worker_id, type(exc).__name__, exc, delay)
                self._sleep(delay)
                claimed = 0
                continue
            if claimed or written:
                self._gather_free_slots()
                if self._free() <= 0 and not self._outcomes_waiting():
                    # woken as soon as a slot frees (or, for a single writer, a job is done)
                    self._sleep(min(s.idle_max, self.lookahead.max_wait / 2)
                                if s.auto_lookahead else s.idle_max)
            elif s.single_writer and len(self._writes):
                continue  # nothing claimed: write the outcomes waiting before any sleep
            else:
                delay = min(pacing.idle_delay(), self.maintenance.seconds_to_reap())
                if main and s.options.burst and self._ending_soon():
                    # nothing to claim, and only this worker's own short work (its last
                    # outcomes' writes, short handlers) keeps the burst from ending: look
                    # again soon, not after an idle sleep that grows each empty round (the
                    # exit came 20-45 ms after the last handler, measured; now 16 ms, with
                    # _burst_over's wait for the other loops' claims)
                    delay = min(delay, s.idle_min)
                self._sleep(delay)

    def _write_due(self, claimed: int) -> bool:
        """A single writer's choice, before a claim round: write the outcomes waiting now
        when there are :data:`SINGLE_WRITER_CLAIMS_PER_WRITE` claims' worth, when the
        last round claimed nothing (``claimed``), when too few slots are free for a whole
        claim (the outcomes hold theirs) or when the first of them has waited
        :data:`SINGLE_WRITER_LINGER_S`; else claim first."""
        waiting = len(self._writes)
        if not waiting:
            self._unwritten_since = None
            return False
        now = time.monotonic()
        if self._unwritten_since is None:
            self._unwritten_since = now
        due = not claimed or now - self._unwritten_since >= SINGLE_WRITER_LINGER_S or \
            waiting >= min(BATCH_LIMIT, SINGLE_WRITER_CLAIMS_PER_WRITE * self.claim_batch)
        if not due:
            with self._lock:
                due = self._free_locked() < self.claim_batch
        if due:
            self._unwritten_since = None
        return due

    def workers_serving(self, workers: int) -> None:
        """The registry counts ``workers`` live workers (this one included) on this
        worker's busiest queue: run at most :data:`CLAIM_LOOP_BUDGET` / ``workers`` claim
        loops (at least 1), so that many worker processes do not crowd the head of the
        ready index with claimers, and claim as many jobs per round trip as the full set
        of loops would (batch x claimers / loops, at most :data:`BATCH_LIMIT` and the
        capacity): each process makes a share of the jobs a second, and with the batch
        kept its commits per job grew with the count of processes (16 processes made 109
        commits per 1,000 jobs where 2 made 65; with the batch grown, 44). A fixed
        ``claimers`` or ``batch`` option is kept as given."""
        o, s = self.settings.options, self.settings
        if o.claimers is not None:
            return
        loops = max(1, min(s.claimers, CLAIM_LOOP_BUDGET // max(1, workers)))
        batch = s.batch if o.batch is not None else \
            min(BATCH_LIMIT, s.capacity, s.batch * s.claimers // loops)
        if (loops, batch) != (self.claim_loops, self.claim_batch):
            self.log.info("worker.claim_loops worker=%s workers=%d claim_loops=%d batch=%d",
                          self.worker_id, workers, loops, batch)
            self.claim_loops, self.claim_batch = loops, batch

    def _claim_round(self, pacing: Pacing) -> int:
        """One claim from each queue in turn, each for its share of the free slots (which
        it reserves while it claims, so that other claim loops leave them alone)."""
        claimed = tried = 0
        turns = pacing.turns()
        for i, name in enumerate(turns):
            limited = not self.queue.backend.known_unlimited(name)
            with self._lock:
                free = self._free_locked()
                if limited:  # a limit counts held jobs as started: claim for idle slots only
                    free = min(free, self._idle_slots_locked())
                want = min(pacing.share(free, len(turns) - i), self.claim_batch) \
                    if free > 0 and not self._stopping.is_set() else 0
                self._claiming += want
            if want <= 0:
                break
            claimed += self._claim(name, want)
            tried += 1
        pacing.finish_round(tried, claimed)
        return claimed

    def _free(self) -> int:
        with self._lock:
            return self._free_locked()

    def _ending_soon(self) -> bool:
        """This worker holds jobs, and what holds them ends soon: outcomes being written
        (no handler runs or waits), or handlers whose jobs take less than ``idle_min``
        on average."""
        with self._lock:
            if self._held_locked() == 0:
                return False
            return self._busy == 0 or self.lookahead.jobs_shorter_than(self.settings.idle_min)

    def _idle(self) -> bool:
        """Nothing held and no claim in progress."""
        with self._lock:
            return self._held_locked() == 0

    def _outcomes_waiting(self) -> int:
        """Outcomes a single writer has still to write (0 elsewhere: writers do that)."""
        if not self.settings.single_writer:
            return 0
        with self._lock:
            return len(self._acking)

    def _gather_free_slots(self) -> None:
        """Wait briefly (``gather_seconds``) until a whole batch of slots is free (for a
        single writer: free, or held by outcomes it will write first), so that short jobs
        are claimed in batches rather than one claim per finished job."""
        want = max(1, min(self.claim_batch, self._capacity_now()))
        deadline = time.monotonic() + self.gather_seconds
        while not self._stopping.is_set() and \
                self._free() + self._outcomes_waiting() < want and not self._idle():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._sleep(left)

    def _sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` or until woken; while jobs wait in the line and handler
        threads sleep without the chain (short jobs), only :data:`NUDGE_S` at a time,
        waking one of those threads when none took a job in that time (the awake one
        runs a long job)."""
        line = self.line
        while not line.chain and line.unattended():
            line.nudge(NUDGE_S)
            if self._wake.wait(min(NUDGE_S, max(0.0, seconds))) or seconds <= NUDGE_S:
                self._wake.clear()
                return
            seconds -= NUDGE_S
        self._wake.wait(max(0.0, seconds))
        self._wake.clear()

    def _claim(self, name: str, want: int) -> int:
        """Claim up to ``want`` jobs (slots this loop reserved) into the waiting line."""
        started = time.perf_counter()
        try:
            with self.watch("claim"):
                jobs = self.queue.claim(name, self.worker_id, limit=want,
                                        lease=self.settings.lease)
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
            if jobs:
                self._claims_found += 1
            self._inflight.update({job.id: job for job in jobs})
            if self._renewed_at:  # a renewal of a previous attempt is not this one's
                for job in jobs:
                    self._renewed_at.pop(job.id, None)
            self._busy += len(jobs)
        self.counters.add("claimed", len(jobs), name)
        if self.log.isEnabledFor(logging.DEBUG):
            for job in jobs:
                self.log.debug("job.claimed job_id=%d queue=%s generation=%d worker=%s",
                               job.id, job.queue, job.attempt, self.worker_id)
        if jobs:
            self.line.put_many([(job, claimed_at) for job in jobs])
            self._executor.jobs_waiting()
        return len(jobs)

    def _give_back_stale(self) -> None:
        """Give back the jobs claimed ahead that no handler started within the look-ahead's
        bound (a fraction of the lease); their attempt is given back and another worker
        may take them at once. Claims whose jobs are all given back, time after time with
        no handler starting between them, stop the claiming until one starts."""
        cutoff = time.monotonic() - self.lookahead.max_wait
        stale = [job for job, _ in self.line.take_while(lambda item: item[1] < cutoff)]
        if not stale:
            return
        with self._lock:
            self.lookahead.stalled(self.lookahead.max_wait)
            self._futile = self._futile + 1 if self._started == 0 else 1
            self._started = 0
            futile = self._futile
        if futile == FUTILE_GIVE_BACKS and not self._stall_said:
            self._stall_said = True
            self.log.error("worker.stalled worker=%s: %d claims in a row were given back "
                           "unstarted (no handler slot took a job); it claims once a lease "
                           "until one does", self.worker_id, futile)
        self._disown(stale)
        self._release(stale, "not started within the look-ahead bound")

    def _burst_over(self) -> bool:
        """With ``burst``: whether the queues are drained and nothing is held; if so, the
        other claim loops are stopped in the same step. A claim of another loop that
        overlapped the probe may hold rows the probe skipped as locked: its outcome is
        waited for (at most ``idle_min``), and a claim that came back with jobs means not
        drained (they would otherwise be claimed and given back at the exit). One that
        came back empty holds nothing: the probe stands (the other loops, woken by the
        same last write, claim beside it; the exit came a further idle round later)."""
        with self._lock:
            if self._busy or self._acking:
                return False
            found = self._claims_found
        if not self._drained():
            return False
        deadline = time.monotonic() + self.settings.idle_min
        while True:
            with self._lock:
                if self._claims_found != found or self._busy or self._acking:
                    return False
                if not self._claiming:
                    self._stopping.set()  # the other claim loops end too, and begin no claim
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(CLAIM_SETTLE_POLL_S)

    def _drained(self) -> bool:
        """The ``burst`` exit test: no job of the queues is ready and due or running
        (whoever runs it), and every job this worker's reaper returned is due."""
        return not self.maintenance.reaped_waiting() and \
            queues_drained(self.queue.backend, self.queues)
