"""The worker runtime: every rule of a worker, once, for both fronts.

A :class:`Runtime` claims jobs (claim loops sized by :class:`~portq.runtime.pacing.Pacing`
and :class:`~portq.runtime.pacing.LookAhead`), keeps the ledger of what it owns, writes
every outcome (completion batchers, or the one claim loop where the engine has a single
writer), renews leases, enforces job timeouts, watches for stalled database calls, reaps,
prunes and shuts down. It runs on threads of its own whichever front drives it; the front
(an :class:`Executor`) only runs handlers: on threads (:class:`portq.Worker`) or as
asyncio tasks (:class:`portq.aio.AsyncWorker`). A handler slot takes a job from the
waiting line (:meth:`Runtime.next_job` / :meth:`Runtime.take_job`), asks :meth:`begin`,
runs the handler, and hands what happened to :meth:`finish`; nothing on that path touches
the database, so the asyncio front never blocks its loop.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from portq.errors import ConfigurationError
from portq.handler import HandlerRunner
from portq.job import Job
from portq.protocol import Backend
from portq.queue import MAX_SNOOZES, Queue, _claim_of, validate_queue
from portq.retry import Backoff
from portq.runtime.counters import Outcomes, WorkerCounters, WriteRetry
from portq.runtime.execution import (
    DEAD,
    RELEASE,
    RETRY,
    SNOOZE,
    SUCCEEDED,
    Outcome,
    outcome_of,
    start_refusal,
)
from portq.runtime.mailbox import Mailbox
from portq.runtime.maintenance import Maintenance, queues_drained, run_listener
from portq.runtime.options import Settings
from portq.runtime.pacing import BATCH_LIMIT, COMPLETION_BATCHERS, LookAhead, Pacing
from portq.runtime.watch import Watch

log = logging.getLogger("portq.worker")

#: claims in a row whose jobs were all given back unstarted before the worker stops
#: claiming until a handler starts a job again (its handler slots are not serving)
FUTILE_GIVE_BACKS = 3


class Executor(Protocol):
    """How a front runs handlers (threads, or tasks on an event loop)."""

    def start(self, runtime: Runtime) -> None:
        """Start serving the runtime's waiting line."""

    def jobs_waiting(self) -> None:
        """New jobs joined the waiting line (called from any thread)."""

    def timed_out(self, job: Job) -> None:
        """``job`` ran past its timeout: stop its handler where that is possible."""

    def abandon(self, job: Job) -> bool:
        """``job``'s handler did not stop within the grace after its timeout: stop using
        its slot (a thread is replaced, never reused); whether a slot was freed."""

    def cancel_running(self) -> None:
        """Shutdown's grace is over: stop the handlers still running where possible."""

    def close(self) -> None:
        """No more jobs will come: the handler slots end once the line is empty."""


class Runtime:
    """One worker's claiming, ledger, writing, leases and shutdown (see the module)."""

    def __init__(self, queue: Queue[Backend], queues: Sequence[str], handler: Callable[[Job], Any],
                 settings: Settings, *, worker_id: str, logger: logging.Logger = log) -> None:
        if not queues:
            raise ConfigurationError("a worker needs at least one queue")
        if len(set(queues)) != len(queues):
            raise ConfigurationError(f"queue listed twice: {list(queues)}")
        self.queue = queue
        self.queues = [validate_queue(n) for n in queues]
        # refuses what cannot be a handler; runs the middleware chain around it
        self.handler = HandlerRunner(handler, settings.options.middleware, queue=queue)
        self.settings = s = settings
        self.executor: Executor | None = None  # the front's, given to run()
        self.worker_id = worker_id
        self.log = logger
        self.backoff: Backoff = s.options.backoff or queue.backoff
        self.lookahead = LookAhead(s.concurrency, s.lease, s.prefetch)
        self.counters = WorkerCounters()
        self.outcomes = Outcomes(self.counters, worker_id, logger)
        self.maintenance = Maintenance(
            queue, self.counters, worker_id, logger, reap_interval=s.options.reap_interval,
            reap_delay=s.options.reap_delay, prune_interval=s.options.prune_interval,
            prune_older_than=s.options.prune_older_than, lease=s.lease)
        self.watch = Watch(worker_id, s.lease / 3, logger)
        #: seconds a claim loop waits for a whole batch of slots to free (short jobs)
        self.gather_seconds = 0.005
        self._lock = threading.Lock()
        self._inflight: dict[int, Job] = {}  # jobs this worker still owns
        self._busy = 0  # claimed jobs whose handler has not returned (waiting or running)
        self._acking: dict[int, Job] = {}  # outcome handed to the writer, not yet written
        # owned jobs whose outcome is being written: a renewal refused meanwhile may only
        # mean that the outcome committed, so the write's own result decides
        self._writing: dict[int, Job] = {}
        self._claiming = 0  # slots reserved by claims in progress
        self._claims_begun = 0  # claims begun so far, by every claim loop
        self._running: dict[int, tuple[Job, float | None]] = {}  # started: (job, deadline)
        self._freed: set[int] = set()  # timed-out jobs whose slot was taken back
        # when the last renewal that succeeded was sent, per job (its lease runs from then)
        self._renewed_at: dict[int, float] = {}
        self._started = 0  # handlers started (to notice claims that never start)
        self._futile = 0  # give-backs in a row with no handler started between them
        self._stall_said = False  # worker.stalled logged since a handler last started
        self.line: Mailbox[tuple[Job, float]] = Mailbox()  # (job, monotonic claim time)
        self._writes: Mailbox[Outcome] = Mailbox()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []
        self._writers: list[threading.Thread] = []
        self._claim_threads: list[threading.Thread] = []

    # ---- what fronts and callers read ---------------------------------------------------

    @property
    def inflight(self) -> int:
        """Jobs this worker claimed and still owns."""
        with self._lock:
            return len(self._inflight)

    @property
    def busy(self) -> int:
        """Claimed jobs whose handler has not returned (running or waiting for a slot)."""
        with self._lock:
            return self._busy

    @property
    def held(self) -> int:
        """Jobs counted against the capacity: :attr:`busy` plus outcomes not yet written."""
        with self._lock:
            return self._busy + len(self._acking)

    def stop(self) -> None:
        """Stop claiming; running jobs get the grace, then are released (thread-safe)."""
        self._stopping.set()
        self._wake.set()

    @property
    def _executor(self) -> Executor:
        assert self.executor is not None, "Runtime.run() gives the executor"
        return self.executor

    def wake(self) -> None:
        """Interrupt an idle sleep (a slot freed, or a new job was announced)."""
        self._wake.set()

    # ---- run ----------------------------------------------------------------------------

    def run(self, executor: Executor) -> WorkerCounters:
        """Claim and run until stopped (or drained, with ``burst``), then shut down, with
        ``executor`` running the handlers. Runs the main claim loop on the calling
        thread."""
        self.executor = executor
        self._start_threads()
        try:
            self._claim_loop(main=True)
        finally:
            self._shutdown()
        return self.counters

    def _start_threads(self) -> None:
        s = self.settings
        self._executor.start(self)
        # engines that know their server's history (PostgreSQL) call it on a failover
        self.queue.backend.watch_identity(self._history_changed)
        for n in range(1, s.claimers):
            self._claim_threads.append(self._spawn(
                functools.partial(self._claim_loop, main=False), f"portq-claim-{n}"))
        if not s.single_writer:  # a single writer's claim loop writes them itself
            self._start_writers(min(s.claimers, COMPLETION_BATCHERS))
        if s.options.heartbeat:
            self._spawn(self._heartbeat, "portq-heartbeat")
        self._spawn(self._watchdog, "portq-watchdog")
        if s.options.listen:
            listener = self.queue.backend.listener(self.queues)
            if listener is not None:
                self._spawn(functools.partial(run_listener, listener, self._done, self.wake,
                                              self._cancel_announced, self.worker_id),
                            "portq-listen")

    def _start_writers(self, n: int) -> None:
        self._writers = [self._spawn(self._write_loop, f"portq-acks-{i}") for i in range(n)]

    def _spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)
        return t

    # ---- the claim loops ----------------------------------------------------------------

    def _claim_loop(self, main: bool = True) -> None:
        """Claim rounds until stopped. The ``main`` loop also gives back jobs left
        unstarted too long, reaps, prunes and, with ``burst``, decides when the queues are
        drained; the others only claim, and with the automatic look-ahead only while
        there is one (slow jobs need no second claim loop)."""
        s = self.settings
        pacing = Pacing(self.queues, s.idle_min, s.idle_max)
        while not self._stopping.is_set():
            if s.auto_lookahead:
                if main:
                    self._give_back_stale()
                elif self.lookahead.size() == 0:
                    self._stopping.wait(0.05)
                    continue
            written = self._write_outcomes(self._writes.take(BATCH_LIMIT)) \
                if s.single_writer else 0
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
                continue
            if claimed or written:
                self._gather_free_slots()
                if self._free() <= 0 and not self._outcomes_waiting():
                    # woken as soon as a slot frees (or, for a single writer, a job is done)
                    self._sleep(min(s.idle_max, self.lookahead.max_wait / 2)
                                if s.auto_lookahead else s.idle_max)
            else:
                self._sleep(min(pacing.idle_delay(), self.maintenance.seconds_to_reap()))

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
                want = min(pacing.share(free, len(turns) - i), self.settings.batch) \
                    if free > 0 and not self._stopping.is_set() else 0
                self._claiming += want
                if want > 0:
                    self._claims_begun += 1
            if want <= 0:
                break
            claimed += self._claim(name, want)
            tried += 1
        pacing.finish_round(tried, claimed)
        return claimed

    def _capacity_now(self) -> int:
        """Jobs this worker may own now: its handler slots plus the look-ahead."""
        s = self.settings
        return s.concurrency + (self.lookahead.size() if s.auto_lookahead else s.prefetch)

    def _free_locked(self, capacity: int | None = None) -> int:
        """Slots neither held nor reserved by a claim in progress (``_lock`` held), of
        ``capacity`` (default: :meth:`_capacity_now`)."""
        if capacity is None:
            capacity = self._capacity_now()
        return capacity - self._held_locked()

    def _held_locked(self) -> int:
        """Jobs held (waiting, running, or their outcome being written) and slots
        reserved by claims in progress (``_lock`` held)."""
        return self._busy + len(self._acking) + self._claiming

    def _idle_slots_locked(self) -> int:
        """Handler slots neither busy nor reserved (``_lock`` held): what a queue that may
        have a limit is claimed for, so that no claimed job of it waits in the line."""
        return self.settings.concurrency - self._busy - len(self._acking) - self._claiming

    def _free(self) -> int:
        with self._lock:
            return self._free_locked()

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
        want = max(1, min(self.settings.batch, self._capacity_now()))
        deadline = time.monotonic() + self.gather_seconds
        while not self._stopping.is_set() and \
                self._free() + self._outcomes_waiting() < want and not self._idle():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._sleep(left)

    def _sleep(self, seconds: float) -> None:
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
            for job in jobs:
                self._inflight[job.id] = job
                if self._renewed_at:  # a renewal of its previous attempt is not this one's
                    self._renewed_at.pop(job.id, None)
            self._busy += len(jobs)
        self.counters.add("claimed", len(jobs), name)
        if self.log.isEnabledFor(logging.DEBUG):
            for job in jobs:
                self.log.debug("job.claimed job_id=%d queue=%s generation=%d worker=%s",
                               job.id, job.queue, job.attempt, self.worker_id)
        if jobs:
            self.line.put_many((job, claimed_at) for job in jobs)
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
        other claim loops are stopped in the same step. A claim another loop began while
        the queues were probed may hold rows the probe skipped as locked, so it counts as
        not drained (its jobs would otherwise be claimed and given back at the exit)."""
        with self._lock:
            if self._held_locked():
                return False
            begun = self._claims_begun
        if not self._drained():
            return False
        with self._lock:
            if self._claims_begun != begun or self._held_locked():
                return False
            self._stopping.set()  # the other claim loops end too, and begin no claim
        return True

    def _drained(self) -> bool:
        """The ``burst`` exit test: no job of the queues is ready and due or running
        (whoever runs it), and every job this worker's reaper returned is due."""
        return not self.maintenance.reaped_waiting() and \
            queues_drained(self.queue.backend, self.queues)

    # ---- handler slots (called by the executor) -----------------------------------------

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
        ``returned`` its handler slot is free again (after ``ran`` seconds of handler)."""
        with self._lock:
            if ran is not None:
                self.lookahead.job_ran(ran)
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
            batch = min(s.batch, capacity)
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

    # ---- writing outcomes ---------------------------------------------------------------

    def _write_loop(self) -> None:
        """A writer: write the outcomes the handler slots handed over, the completions of
        a batch (up to ``BATCH_LIMIT``) in one statement; once the mailbox is closed,
        write what is left, then stop."""
        while outcomes := self._writes.get_batch(BATCH_LIMIT, self.settings.ack_delay):
            self._write_outcomes(outcomes)
            self._wake.set()

    def _write_outcomes(self, outcomes: Sequence[Outcome]) -> int:
        """Write handed-over outcomes: results first (each in its own transaction), then
        the completions in one statement (``Queue.complete_many``), then failures and
        give-backs one by one; free their slots. How many were handed over."""
        if not outcomes:
            return 0
        with self._lock:
            owned = {j.id for j in self._mark_writing([o.job for o in outcomes])}
        mine = [o for o in outcomes if o.job.id in owned]  # one lost meanwhile: not reported
        completions = [o.job for o in mine if o.kind == SUCCEEDED and
                       (o.result is None or self._store_result(o.job, o.result))]
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
        for o in mine:
            if o.kind in (RETRY, DEAD):
                self._write_failure(o)
            elif o.kind == RELEASE:
                self._release([o.job], o.error)
            elif o.kind == SNOOZE:
                self._write_snooze(o)
        with self._lock:
            for o in outcomes:
                if self._acking.get(o.job.id) is o.job:
                    del self._acking[o.job.id]
                self._forget(o.job)
        return len(outcomes)

    def _store_result(self, job: Job, text: str) -> bool:
        """Store a handler's return value before its completion; False when the claim lost
        the job (logged) or the lease ran out first."""
        with self.watch("store_result"):
            written = self._write([job], lambda: [self.queue.backend.store_result(
                _claim_of(job), text)])
        if written is not None and not written[0][0]:
            self._record(job, SUCCEEDED, False, written[1], "", None)
        return written is not None and written[0][0]

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

    # ---- the ledger (``_lock`` held) ----------------------------------------------------

    def _mark_writing(self, jobs: Sequence[Job]) -> list[Job]:
        """The jobs of ``jobs`` still owned, now marked as being written."""
        owned = [j for j in jobs if self._inflight.get(j.id) is j]
        self._writing.update((j.id, j) for j in owned)
        return owned

    def _forget(self, job: Job) -> None:
        """Stop owning ``job``: its outcome is written, or it was lost."""
        job_id = job.id
        if self._inflight.get(job_id) is job:
            del self._inflight[job_id]
        if self._writing.get(job_id) is job:
            del self._writing[job_id]
        if self._renewed_at and job_id not in self._inflight:
            self._renewed_at.pop(job_id, None)

    def _owned_not_writing(self, job: Job) -> bool:
        with self._lock:
            return self._inflight.get(job.id) is job and self._writing.get(job.id) is not job

    def _disown(self, jobs: Sequence[Job]) -> None:
        """Forget unstarted ``jobs`` taken out of the line (they are to be released)."""
        with self._lock:
            for job in jobs:
                self._forget(job)
                self._busy -= 1

    # ---- leases, timeouts, cancels ------------------------------------------------------

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
                with self.watch("renew_many"):
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

    # ---- shutdown -----------------------------------------------------------------------

    def _shutdown(self) -> None:
        self.stop()
        for thread in self._claim_threads:  # their last claims' jobs join the unstarted
            thread.join()
        if self.settings.single_writer:  # the claim loop that wrote outcomes has ended
            self._start_writers(1)
        unstarted = [job for job, _ in self.line.drain()]
        self._disown(unstarted)
        self._release(unstarted, "not started")
        deadline = time.monotonic() + self.settings.grace
        while self._running_owned() and time.monotonic() < deadline:
            time.sleep(0.02)
        with self._lock:  # handlers still running after the grace: give their jobs back
            leftover = [j for j in self._inflight.values() if self._acking.get(j.id) is not j]
            for job in leftover:
                self._forget(job)
        self._executor.cancel_running()
        self._release(leftover, "grace over")
        self._writes.close()  # the writers write the outcomes still waiting, then stop
        for thread in self._writers:
            thread.join()
        self._done.set()
        self.line.close()
        self._executor.close()

    def _running_owned(self) -> int:
        with self._lock:
            return len(self._inflight) - len(self._acking)

    def _release(self, jobs: Sequence[Job], why: str) -> None:
        """Give ``jobs`` back to ready (the attempt is given back too)."""
        for job in jobs:
            try:
                with self.watch("release"):
                    released = self.queue.release(job)
            except Exception as exc:  # noqa: BLE001 - its lease will expire instead
                self.log.error("job.release_failed job_id=%d worker=%s error=%s",
                               job.id, self.worker_id, exc)
                continue
            if released:
                self.outcomes.released(job, why)
            else:
                self.outcomes.lost(job, f"could not be given back ({why}): its lease had "
                                   "expired or another owner took it")
