"""The thread front of the worker runtime: :class:`Worker` runs handlers on threads.

Every rule lives once in :mod:`portq.runtime` (claim pacing, look-ahead, the ledger of
owned jobs, outcome writing, leases, timeouts, reaping, shutdown); this module drives it
with ``concurrency`` handler threads. A handler may be ``def`` or ``async def`` (awaited on
an event loop kept by its thread). SIGTERM/SIGINT (with ``install_signals``) stop
claiming, wait up to ``grace`` seconds for running jobs, then release the rest to ready
(the attempt is given back); a second signal exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from portq.job import Job
from portq.protocol import Backend
from portq.queue import Queue
from portq.runtime.counters import Outcomes, WorkerCounters, WriteRetry
from portq.runtime.execution import (
    LATE_FOR_LEASE,
    LATE_FOR_RATE_LIMIT,
    RetryAfter,
    failure_summary,
)
from portq.runtime.front import WorkerFront, new_worker_id
from portq.runtime.mailbox import Mailbox
from portq.runtime.maintenance import Maintenance, queues_drained, run_listener
from portq.runtime.pacing import (
    AUTO_CLAIMERS,
    BATCH_LIMIT,
    COMPLETION_BATCHERS,
    DEFAULT_BATCH,
    LOOKAHEAD_CYCLES,
    LOOKAHEAD_LEASE_FRACTION,
    LOOKAHEAD_PER_CLAIMER,
    LookAhead,
    Pacing,
    claim_batch,
)
from portq.runtime.signals import relay_signals
from portq.runtime.threaded import ThreadExecutor

__all__ = [
    "AUTO_CLAIMERS", "BATCH_LIMIT", "COMPLETION_BATCHERS", "DEFAULT_BATCH",
    "LATE_FOR_LEASE", "LATE_FOR_RATE_LIMIT", "LOOKAHEAD_CYCLES", "LOOKAHEAD_LEASE_FRACTION",
    "LOOKAHEAD_PER_CLAIMER", "LookAhead", "Mailbox", "Maintenance", "Outcomes", "Pacing",
    "RetryAfter", "Worker", "WorkerCounters", "WriteRetry", "claim_batch", "failure_summary",
    "new_worker_id", "queues_drained", "run_listener",
]

log = logging.getLogger("portq.worker")
Handler = Callable[[Job], Any]


class Worker(WorkerFront):
    """Claims and runs jobs from ``queues`` with ``handler`` on ``concurrency`` threads.
    Options: :class:`portq.runtime.options.WorkerOptions` (the same as
    :class:`portq.aio.AsyncWorker`'s)."""

    def __init__(self, queue: Queue[Backend], queues: Sequence[str] | str, handler: Handler,
                 **options: Any) -> None:
        super().__init__(queue, queues, handler, options, log)
        self._signals = 0

    def run(self) -> WorkerCounters:
        """Work until :meth:`stop` (or, with ``burst``, until the queues are drained)."""
        restore = self._install_signal_handlers() if self.options.install_signals else None
        registration = self._registration()
        if registration is not None:
            registration.start()
        self._log_started()
        unbound = self._bound_statements()
        try:
            self.runtime.run(ThreadExecutor(self.settings.concurrency))
        finally:
            unbound()
            if registration is not None:
                registration.stop()
            if restore:
                restore()
        self._log_stopped()
        return self.counters

    def _install_signal_handlers(self) -> Callable[[], None] | None:
        """SIGTERM/SIGINT stop the worker, a second one ends the process at once; handled
        on a thread of their own (:func:`relay_signals`: the main thread may hold a lock
        that stopping takes)."""
        if threading.current_thread() is not threading.main_thread():
            return None

        def on_signal(signum: int) -> None:
            self._signals += 1
            if self._signals > 1:
                log.error("worker.killed worker=%s: second signal, exiting at once",
                          self.worker_id)
                os._exit(128 + signum)
            log.info("worker.stopping worker=%s signal=%s grace=%gs",
                     self.worker_id, signal.Signals(signum).name, self.grace)
            self.stop()
        return relay_signals(on_signal)
