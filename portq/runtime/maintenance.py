"""What a worker does beside its jobs: the reaper and pruner, the listener thread, and
the burst exit test."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from portq.protocol import Backend, Listener
from portq.queue import Queue, duration_ms
from portq.runtime.counters import WorkerCounters

if TYPE_CHECKING:
    from portq.protocol import Backend

log = logging.getLogger("portq.worker")


#: most expired leases one reap returns
REAP_LIMIT = 1000
#: the shortest gap between two reaps of one worker
REAP_MIN_GAP = 0.25
#: a reap is scheduled this long after the earliest lease's expiry (clock granularity)
REAP_SLACK = 0.05


class Maintenance:
    """The reaper (expired leases back to ready, or dead) and pruner (finished jobs
    deleted in bounded batches) that a worker's main claim loop runs now and then (shared
    by both workers; the async one runs :meth:`run_due` on a thread)."""

    def __init__(self, queue: Queue[Backend], counters: WorkerCounters, worker_id: str,
                 logger: logging.Logger, *, reap_interval: float | None, reap_delay: float,
                 prune_interval: float | None, prune_older_than: float,
                 lease: float = 30.0) -> None:
        for what, value in (("reap_interval", reap_interval),
                            ("prune_interval", prune_interval)):
            if value is not None:
                duration_ms(value, what)
        duration_ms(reap_delay, "reap_delay", allow_zero=True)
        duration_ms(prune_older_than, "prune_older_than", allow_zero=True)
        self.queue, self.counters, self.worker_id, self.log = queue, counters, worker_id, logger
        self.reap_interval, self.reap_delay = reap_interval, reap_delay
        self.prune_interval, self.prune_older_than = prune_interval, prune_older_than
        #: the longest a lease found by no look may wait for its reap (half this worker's
        #: lease: other workers' leases are alike, and each look costs one index read)
        self.look_every = max(REAP_MIN_GAP, lease / 2)
        now = time.monotonic()  # jittered first runs: workers started together spread out
        self._next_reap = now + random.uniform(0, min(reap_interval or 0, self.look_every))
        self._next_prune = now + random.uniform(0, prune_interval or 0)
        self._reaped_due_by = 0.0  # monotonic time when the jobs it last reaped are due
        #: the same by the database's clock, which sets their run_at (None: passed, or
        #: not read)
        self._reaped_due_at: datetime | None = None

    def due(self) -> bool:
        """Whether :meth:`run_due` has anything to do now."""
        now = time.monotonic()
        return bool((self.reap_interval and now >= self._next_reap) or
                    (self.prune_interval and now >= self._next_prune))

    def run_due(self) -> None:
        """Reap and prune, each when its interval (jittered ±20 %) has passed."""
        now = time.monotonic()
        if self.reap_interval and now >= self._next_reap:
            n = self.queue.reap(limit=REAP_LIMIT, delay=self.reap_delay)
            if n:
                # they are due reap_delay after the reap's statement, which ran before now
                self._reaped_due_by = time.monotonic() + self.reap_delay
                self.counters.add("reaped", n)
                self.log.warning("worker.reaped worker=%s count=%d (expired leases "
                                 "returned)", self.worker_id, n)
                # stays None if the database clock cannot be read: the monotonic due
                # time above is then all reaped_waiting has
                self._reaped_due_at = None
                self._reaped_due_at = self.queue.backend.db_now() + \
                    timedelta(seconds=self.reap_delay)
            self._next_reap = now + self._reap_gap(n)
        if self.prune_interval and now >= self._next_prune:
            self._next_prune = now + self.prune_interval * random.uniform(0.8, 1.2)
            n = self.queue.prune(self.prune_older_than, limit=1000)
            self.counters.add("pruned", n)
            if n:
                self.log.info("worker.pruned worker=%s count=%d", self.worker_id, n)

    def _reap_gap(self, reaped: int) -> float:
        """Seconds to the next reap: when the earliest running lease expires (by the
        database clock), so that a crashed worker's jobs come back about one lease after
        it died, but at least :data:`REAP_MIN_GAP` and at most the reap interval (jittered
        ±20 %) or half the lease (a lease taken after this look); at once while a full
        batch was reaped."""
        if reaped >= REAP_LIMIT:
            return REAP_MIN_GAP
        gap = min(float(self.reap_interval or 0) * random.uniform(0.8, 1.2), self.look_every)
        expiry_ms = self.queue.backend.next_lease_expiry_ms()
        if expiry_ms is not None:
            gap = min(gap, max(REAP_MIN_GAP, expiry_ms / 1000 + REAP_SLACK))
        return gap

    def seconds_to_reap(self) -> float:
        """Seconds until the next reap is due (an idle claim loop sleeps no longer)."""
        if not self.reap_interval:
            return float("inf")
        return max(0.0, self._next_reap - time.monotonic())

    def reaped_waiting(self) -> bool:
        """Jobs this reaper returned are not due yet (a ``burst`` worker waits for them):
        by this host's monotonic clock, then (one read, once that has passed) by the
        database's, which set their run_at: a step of the system clock, or a database
        clock behind this host's, must not end a burst while they wait."""
        if time.monotonic() < self._reaped_due_by:
            return True
        if self._reaped_due_at is None:
            return False
        if self.queue.backend.db_now() < self._reaped_due_at:
            return True
        self._reaped_due_at = None
        return False


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

