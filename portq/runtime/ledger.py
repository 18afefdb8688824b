"""The state a :class:`~portq.runtime.core.Runtime`'s parts share: its collaborators and
the ledger of the jobs it owns (held, running, being written), with the counts derived
from it. The claim loops, handler slots, writers and lease keeper are each a class of
their own module over this one; :class:`~portq.runtime.core.Runtime` combines them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from portq.errors import ConfigurationError
from portq.handler import HandlerRunner
from portq.job import Job
from portq.protocol import Backend
from portq.queue import Queue, validate_queue
from portq.retry import Backoff
from portq.runtime.counters import Outcomes, WorkerCounters
from portq.runtime.execution import Outcome
from portq.runtime.mailbox import Mailbox
from portq.runtime.maintenance import Maintenance
from portq.runtime.options import Settings
from portq.runtime.pacing import LookAhead, RoundRobin
from portq.runtime.watch import Watch

if TYPE_CHECKING:
    from portq.runtime.core import Executor

log = logging.getLogger("portq.worker")


class Ledger:
    """One runtime's settings, collaborators and ledger of owned jobs (``_lock`` guards
    the ledger)."""

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
        #: whose turn comes first in a claim round, shared by the claim loops
        self.turns = RoundRobin(self.queues)
        self.counters = WorkerCounters()
        self.outcomes = Outcomes(self.counters, worker_id, logger)
        self.maintenance = Maintenance(
            queue, self.counters, worker_id, logger, reap_interval=s.options.reap_interval,
            reap_delay=s.options.reap_delay, prune_interval=s.options.prune_interval,
            prune_older_than=s.options.prune_older_than, lease=s.lease)
        self.watch = Watch(worker_id, s.lease / 3, logger)
        #: seconds a claim loop waits for a whole batch of slots to free (short jobs)
        self.gather_seconds = 0.005
        #: finished jobs whose outcome may wait for its write without holding a slot
        #: against new claims (see :meth:`_free_locked`): with the automatic look-ahead
        #: only (a fixed ``prefetch`` keeps its bound of concurrency + prefetch owned)
        self.ack_allowance = s.concurrency if s.auto_lookahead and not s.single_writer \
            else 0
        self._lock = threading.Lock()
        #: held around each statement that writes rows this worker owns (renewals,
        #: outcomes, give-backs), never around a claim: two such statements of one worker
        #: on shared rows, each locking them in its own order, deadlocked (the heartbeat's
        #: renewal against the writer's completions; PostgreSQL takes its deadlock_timeout,
        #: 1 s, to break one, and a short lease ran out meanwhile)
        self._row_writes = threading.Lock()
        if self.handler.progress is not None:
            self.handler.progress.row_writes = self._row_writes
        self._inflight: dict[int, Job] = {}  # jobs this worker still owns
        self._busy = 0  # claimed jobs whose handler has not returned (waiting or running)
        self._acking: dict[int, Job] = {}  # outcome handed to the writer, not yet written
        # owned jobs whose outcome is being written: a renewal refused meanwhile may only
        # mean that the outcome committed, so the write's own result decides
        self._writing: dict[int, Job] = {}
        self._claiming = 0  # slots reserved by claims in progress
        self._claims_found = 0  # claims so far that came back with jobs, by every loop
        self._running: dict[int, tuple[Job, float | None]] = {}  # started: (job, deadline)
        self._freed: set[int] = set()  # timed-out jobs whose slot was taken back
        # when the last renewal that succeeded was sent, per job (its lease runs from then)
        self._renewed_at: dict[int, float] = {}
        self._started = 0  # handlers started (to notice claims that never start)
        self._futile = 0  # give-backs in a row with no handler started between them
        self._stall_said = False  # worker.stalled logged since a handler last started
        #: when a single writer first left outcomes unwritten to claim on (monotonic)
        self._unwritten_since: float | None = None
        self.line: Mailbox[tuple[Job, float]] = Mailbox()  # (job, monotonic claim time)
        self._writes: Mailbox[Outcome] = Mailbox()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []
        self._writers: list[threading.Thread] = []
        self._claim_threads: list[threading.Thread] = []
        #: claim loops that claim now (of ``settings.claimers``) and the most jobs one
        #: claim takes now (:meth:`~portq.runtime.claiming.ClaimLoops.workers_serving`)
        self.claim_loops = s.claimers
        self.claim_batch = s.batch

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

    # ---- capacity (``_lock`` held) ------------------------------------------------------

    def _capacity_now(self) -> int:
        """Jobs this worker may own now: its handler slots plus the look-ahead."""
        s = self.settings
        return s.concurrency + (self.lookahead.size() if s.auto_lookahead else s.prefetch)

    def _free_locked(self, capacity: int | None = None) -> int:
        """Slots neither held nor reserved by a claim in progress (``_lock`` held), of
        ``capacity`` (default: :meth:`_capacity_now`). Outcomes waiting for their write
        hold slots only past :attr:`ack_allowance`: a handler slot is free once its
        handler returned, so that a write's round trip does not idle it (with many slots
        of I/O-bound jobs a third of them did), while a writer that falls behind (a slow
        database) still holds the claims back. A single writer (SQLite) writes them
        itself before it claims again: there they hold their slots."""
        if capacity is None:
            capacity = self._capacity_now()
        return capacity - self._busy - self._claiming - \
            max(0, len(self._acking) - self.ack_allowance)

    def _held_locked(self) -> int:
        """Jobs held (waiting, running, or their outcome being written) and slots
        reserved by claims in progress (``_lock`` held)."""
        return self._busy + len(self._acking) + self._claiming

    def _idle_slots_locked(self) -> int:
        """Handler slots neither busy nor reserved (``_lock`` held): what a queue that may
        have a limit is claimed for, so that no claimed job of it waits in the line."""
        return self.settings.concurrency - self._busy - len(self._acking) - self._claiming

    # ---- the ledger (``_lock`` held) ----------------------------------------------------

    def _mark_writing(self, jobs: Sequence[Job]) -> list[Job]:
        """The jobs of ``jobs`` still owned, now marked as being written."""
        inflight = self._inflight
        owned = [j for j in jobs if inflight.get(j.id) is j]
        self._writing.update({j.id: j for j in owned})
        return owned

    def _forget(self, job: Job) -> None:
        """Stop owning ``job``: its outcome is written, or it was lost."""
        self._forget_all((job,))

    def _forget_all(self, jobs: Sequence[Job], written: bool = False) -> None:
        """:meth:`_forget` each of ``jobs``; with ``written`` (the writer, after their
        outcomes' writes) their outcomes stop holding slots too."""
        inflight, writing, acking, renewed = \
            self._inflight, self._writing, self._acking, self._renewed_at
        for job in jobs:
            job_id = job.id
            if written and acking.get(job_id) is job:
                del acking[job_id]
            if inflight.get(job_id) is job:
                del inflight[job_id]
            if writing.get(job_id) is job:
                del writing[job_id]
            if renewed and job_id not in inflight:
                renewed.pop(job_id, None)

    def _owned_not_writing(self, job: Job) -> bool:
        with self._lock:
            return self._inflight.get(job.id) is job and self._writing.get(job.id) is not job

    def _disown(self, jobs: Sequence[Job]) -> None:
        """Forget unstarted ``jobs`` taken out of the line (they are to be released)."""
        with self._lock:
            for job in jobs:
                self._forget(job)
                self._busy -= 1

