"""The claim loop's sizing decisions, free of I/O: round-robin turns and shares of free
slots (:class:`Pacing`), the look-ahead (:class:`LookAhead`) and the claim batch."""

from __future__ import annotations

import math
import random
import threading
from collections import deque
from collections.abc import Sequence

from portq.queue import positive_int


class RoundRobin:
    """Which queue comes first in a claim round, shared by a worker's claim loops: each
    round takes the next start, so that loops claiming at once begin with different
    queues; a round that claimed from no queue gives its start back if no round took one
    since (the queue keeps its turn)."""

    def __init__(self, queues: Sequence[str]) -> None:
        self.queues = list(queues)
        self._next = 0
        self._lock = threading.Lock()

    def take(self) -> int:
        """This round's start (an index into the queues, modulo their number)."""
        with self._lock:
            start, self._next = self._next, self._next + 1
            return start

    def give_back(self, start: int) -> None:
        """The round that took ``start`` claimed from no queue."""
        with self._lock:
            if self._next == start + 1:
                self._next = start


class Pacing:
    """One claim loop's decisions, shared by :class:`Worker` and
    ``portq.aio.AsyncWorker``: which queue's turn comes first (from the worker's
    :class:`RoundRobin`), how many free slots each queue of a round may claim, and how
    long to sleep when the queues are empty or the database fails."""

    def __init__(self, turns: RoundRobin, idle_min: float, idle_max: float) -> None:
        self.queues = turns.queues
        self.idle_min, self.idle_max = idle_min, idle_max
        self._turns = turns
        self._start = 0
        self._idle_rounds = 0

    def turns(self) -> list[str]:
        """This round's queues, round-robin."""
        n = len(self.queues)
        if n == 1:
            return self.queues
        self._start = self._turns.take()
        return [self.queues[(self._start + i) % n] for i in range(n)]

    @staticmethod
    def share(free: int, queues_left: int) -> int:
        """Free slots one queue may claim when ``queues_left`` still wait their turn."""
        return -(-free // queues_left)

    def finish_round(self, tried: int, claimed: int) -> None:
        """Track idleness; a round in which no queue got a turn gives its start back."""
        if not tried and len(self.queues) > 1:
            self._turns.give_back(self._start)
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


#: a job left unstarted longer than this fraction of the lease is given back
LOOKAHEAD_LEASE_FRACTION = 0.1
#: the look-ahead never holds more jobs than the handlers start in this share of that
#: bound: the rest is slack for a slow moment (a loaded machine, a busy event loop), so
#: that jobs claimed ahead are not given back for want of a few milliseconds
LOOKAHEAD_BOUND_SHARE = 1 / 3
#: claim round trips of jobs the look-ahead covers when jobs are shorter than a round trip
LOOKAHEAD_CYCLES = 8
#: claim round trips of jobs the look-ahead covers when jobs outlast a round trip
LOOKAHEAD_SLOW_CYCLES = 4
#: most jobs of look-ahead per claim loop
LOOKAHEAD_PER_CLAIMER = 160
#: one claim loop keeps up, and the others rest, while the handlers start fewer than
#: this share of a claim batch during the fastest recent claim's round trip
#: (:meth:`LookAhead.one_loop_keeps_up`). Seen during runs on PostgreSQL, one process
#: (10th-90th percentile of that share): 40 slots of 5 ms jobs 0.19-0.25, 4 threads of
#: 0.5 ms jobs 0.22-0.34, 200 slots of 5 ms jobs 0.41-1.3, 40 slots of 1 ms jobs 0.5-1.7
#: (which one loop left 8-15% slower). Against all loops claiming (4 interleaved rounds,
#: a fresh process a run, paired ratios): 40 slots of 5 ms jobs 1.018 [1.010-1.031] on
#: the asyncio front (6,834 -> 6,957 jobs/s) and 1.034 [1.027-1.035] on threads; 4
#: threads of 0.5 ms jobs 1.064 [1.056-1.093]; unchanged (all loops claim): no-op jobs
#: 0.995 [0.935-1.018], 200 slots of 5 ms jobs 1.001 [0.939-1.030]
ONE_LOOP_SHARE = 1 / 3
#: claim loops a worker runs (no more than its handler threads) while it has a look-ahead
AUTO_CLAIMERS = 4
#: most jobs in one claim (and in one write of a single writer's outcomes: its writes hold
#: the database's one write lock)
BATCH_LIMIT = 100
#: most completions a completion batcher writes in one statement: whatever finished while
#: its previous one committed, up to this. Many slots finish more than a claim's worth in
#: that time; capped at BATCH_LIMIT, the one batcher was busy writing all the time and
#: held the worker back (PostgreSQL, an AsyncWorker of 200 slots, medians of 4 interleaved
#: rounds: 5 ms jobs 15,055 jobs/s against 20,412 with this cap, no-op jobs 14,576 against
#: 24,235; 4 and 40 slots, where it never fell behind, within the noise)
WRITE_BATCH_LIMIT = 1000
#: completion batchers a worker runs: one, which writes whatever finished while its
#: previous batch committed (two split those batches: more commits, and measured slower
#: on PostgreSQL and MariaDB, no-op and I/O-bound jobs, both fronts; claims that carried
#: the waiting completions in their own statement were slower too: docs/operations.md)
COMPLETION_BATCHERS = 1
#: claim batch when none is given: enough to amortise a round trip, never over capacity
DEFAULT_BATCH = 20


class LookAhead:
    """How many claimed jobs may wait for a handler thread, from what the worker measures
    (shared by :class:`Worker` and ``portq.aio.AsyncWorker``).

    Little's law: to keep ``concurrency`` handlers busy, jobs must be claimed ahead for as
    long as a claim takes to come back. When a job outlasts a claim's round trip (the
    fastest of the recent claims, so that a loaded moment does not count as the norm), it
    covers :data:`LOOKAHEAD_SLOW_CYCLES` such round trips of starts: with many slots and
    I/O-bound jobs (40 slots of 5 ms jobs start 8,000 a second) the slots freed while a
    claim is on its way find jobs waiting instead of idling a round trip; for jobs much
    longer than a round trip that is 0 (a worker then holds no job no thread is ready to
    run). When jobs are shorter than a round trip, it covers
    :data:`LOOKAHEAD_CYCLES` round trips of jobs, but never more jobs than the handlers start
    in a third (``LOOKAHEAD_BOUND_SHARE``) of the bound after which an unstarted job is
    given back (``LOOKAHEAD_LEASE_FRACTION`` of the lease), and never more than
    ``ceiling``. Until the
    first job has finished nothing is known, and it is 0."""

    def __init__(self, concurrency: int, lease: float, ceiling: int) -> None:
        self.concurrency, self.ceiling = concurrency, ceiling
        #: a job claimed this long ago and not started is given back
        self.max_wait = lease * LOOKAHEAD_LEASE_FRACTION
        self._job_s: float | None = None     # moving average of a handler's run time
        self._cycle_s: float | None = None   # moving average of a claim's round trip
        self._recent: deque[float] = deque(maxlen=32)  # the last claims' round trips
        self._fastest = math.inf  # the fastest of them
        self._size: int | None = None  # size() until a measurement changes
        self._sized_for = 0.0  # the run time that size was worked out for

    @staticmethod
    def _average(old: float | None, sample: float) -> float:
        return sample if old is None else old + 0.2 * (sample - old)

    def job_ran(self, seconds: float) -> None:
        """A handler returned after ``seconds`` (callers serialise the calls)."""
        self._job_s = job_s = self._average(self._job_s, max(seconds, 1e-6))
        if abs(job_s - self._sized_for) > 0.1 * self._sized_for:  # worth working out again
            self._size = None

    def seconds_to_finish(self, jobs: int) -> float:
        """How long the handlers take, on average, to finish ``jobs`` jobs between them
        (0 until one has finished)."""
        job = self._job_s
        return 0.0 if job is None else jobs * job / self.concurrency

    def jobs_shorter_than(self, seconds: float) -> bool:
        """Whether handlers have run, on average, less than ``seconds`` a job."""
        return self._job_s is not None and self._job_s < seconds

    def stalled(self, waited: float) -> None:
        """Jobs claimed ahead waited ``waited`` seconds without a thread freeing up: take
        the run time to be at least that (no look-ahead until short jobs bring it down)."""
        self._job_s = max(self._job_s or 0.0, waited)
        self._size = None

    def claim_took(self, seconds: float) -> None:
        """A claim came back after ``seconds``."""
        self._cycle_s = self._average(self._cycle_s, seconds)
        self._recent.append(seconds)
        self._fastest = min(self._recent)
        self._size = None

    def one_loop_keeps_up(self, batch: int) -> bool:
        """Whether one claim loop keeps the line filled: the handlers start fewer than
        :data:`ONE_LOOP_SHARE` of a ``batch`` during the fastest recent claim's round
        trip (one loop's claims have room to spare). More loops would then only split
        the same jobs into more, smaller claims, each a round trip, a wake-up of the
        handlers and the GIL for its rows. False until a job and a claim have been
        measured."""
        job, fastest = self._job_s, self._fastest
        if job is None or fastest == math.inf:
            return False
        return self.concurrency / job * fastest < ONE_LOOP_SHARE * batch

    def size(self) -> int:
        """Jobs that may wait for a handler thread now (worked out again only after a
        measurement changed: it is read a few times per job)."""
        if self._size is None:
            self._sized_for = self._job_s or 0.0
            self._size = self._work_out_size()
        return self._size

    def _work_out_size(self) -> int:
        job, cycle = self._job_s, self._cycle_s
        if job is None or cycle is None:
            return 0
        starts_per_s = self.concurrency / job
        # jobs that outlast a claim's round trip: only what starts while one claim is on
        # its way (so the threads freed meanwhile find jobs waiting, not a claim in
        # flight); 0 for jobs much longer than a round trip
        if job >= self._fastest:  # a loaded moment's slow claims count as 4 fast ones at most
            round_trip = min(cycle, 4 * self._fastest)
            return int(min(self.ceiling, starts_per_s * round_trip * LOOKAHEAD_SLOW_CYCLES,
                           starts_per_s * self.max_wait * LOOKAHEAD_BOUND_SHARE))
        return int(min(self.ceiling, starts_per_s * cycle * LOOKAHEAD_CYCLES,
                       starts_per_s * self.max_wait * LOOKAHEAD_BOUND_SHARE))



def claim_batch(batch: int | None, concurrency: int, capacity: int,
                one_writing_loop: bool = False) -> int:
    """Most jobs in one claim: ``batch`` when given, else enough to amortise a round trip
    (:data:`DEFAULT_BATCH`, or ``concurrency`` when larger), never over ``capacity`` or
    :data:`BATCH_LIMIT` (shared by both workers). A worker of ``one_writing_loop`` (a
    single writer: one claim loop, which writes the outcomes too, each of its claims
    taking the database's one write lock) claims what the :data:`AUTO_CLAIMERS` loops of
    another engine's worker would between them (SQLite, no-op jobs, one process, medians
    of 3 interleaved rounds: 32,680 jobs/s against 21,755 with one loop's batch)."""
    if batch is not None:
        return positive_int(batch, "batch")
    loops = min(concurrency, AUTO_CLAIMERS) if one_writing_loop else 1
    return min(capacity, max(concurrency, DEFAULT_BATCH) * loops, BATCH_LIMIT)
