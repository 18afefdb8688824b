"""What both fronts share: the options, the :class:`~portq.runtime.core.Runtime` they drive,
the attributes users and tools read, the start-up line and the registry row."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from portq.backends.base import listen_mode
from portq.job import Job
from portq.protocol import Backend
from portq.queue import Queue
from portq.registry import Registration, registration_of
from portq.runtime.core import Runtime
from portq.runtime.counters import Outcomes, WorkerCounters
from portq.runtime.middleware import Middleware
from portq.runtime.options import Settings, WorkerOptions, settle
from portq.runtime.pacing import LookAhead

if TYPE_CHECKING:
    from portq.schedule import Scheduler


#: the shortest server-side statement bound a worker sets (its lease, if longer)
MIN_STATEMENT_BOUND_MS = 5000


def new_worker_id() -> str:
    """``host:pid:random`` — unique per worker, so fencing can tell workers apart."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class WorkerFront:
    """The part of :class:`portq.Worker` and :class:`portq.aio.AsyncWorker` that is not
    about how handlers are driven (see :class:`~portq.runtime.options.WorkerOptions` for
    the options)."""

    _kind = ""  # "" or " (asyncio)", in the start-up line

    def __init__(self, queue: Queue[Backend], queues: Sequence[str] | str,
                 handler: Callable[[Job], Any], options: dict[str, Any],
                 logger: logging.Logger) -> None:
        self.options = WorkerOptions.of(type(self).__name__, options)
        self.settings: Settings = settle(self.options, queue.backend)
        self.worker_id = self.options.worker_id or new_worker_id()
        names = [queues] if isinstance(queues, str) else list(queues)
        self.runtime = Runtime(queue, names, handler, self.settings,
                               worker_id=self.worker_id, logger=logger)
        self.log = logger
        self.handler = handler
        self.queues = self.runtime.queues
        #: a Scheduler run beside this worker, whose entries the registry row reports
        self.scheduler: Scheduler | None = None
        # a pool big enough for the claim loops, the writers, the heartbeat, the reaper,
        # the registry and a few operator calls
        queue.backend.resize_pool(self.settings.concurrency + 3 + 2 * self.settings.claimers)

    # ---- what users and tools read ------------------------------------------------------

    @property
    def concurrency(self) -> int:
        return self.settings.concurrency

    @property
    def lease(self) -> float:
        return self.settings.lease

    @property
    def grace(self) -> float:
        return self.settings.grace

    @property
    def burst(self) -> bool:
        return self.options.burst

    @property
    def batch(self) -> int:
        return self.settings.batch

    @property
    def capacity(self) -> int:
        return self.settings.capacity

    @property
    def claimers(self) -> int:
        return self.settings.claimers

    @property
    def single_writer(self) -> bool:
        return self.settings.single_writer

    @property
    def auto_lookahead(self) -> bool:
        return self.settings.auto_lookahead

    @property
    def prefetch(self) -> int:
        return self.settings.prefetch

    @property
    def registry_interval(self) -> float | None:
        return self.options.registry_interval

    @property
    def lookahead(self) -> LookAhead:
        return self.runtime.lookahead

    @property
    def ack_allowance(self) -> int:
        """Finished jobs whose outcome may wait for its write without holding a handler
        slot against new claims (the database still shows them running meanwhile)."""
        return self.runtime.ack_allowance

    @property
    def counters(self) -> WorkerCounters:
        return self.runtime.counters

    @property
    def outcomes(self) -> Outcomes:
        return self.runtime.outcomes

    @property
    def inflight(self) -> int:
        """Jobs this worker claimed and still owns."""
        return self.runtime.inflight

    @property
    def busy(self) -> int:
        """Claimed jobs whose handler has not returned: running, or waiting for a slot. A
        job whose ownership was lost counts until its handler returns, so a worker never
        runs more than ``concurrency`` handlers."""
        return self.runtime.busy

    @property
    def held(self) -> int:
        """Jobs counted against the capacity: :attr:`busy` plus outcomes not yet written."""
        return self.runtime.held

    def use(self, middleware: Middleware) -> None:
        """Run ``middleware`` around every handler call from the next job on, inside the
        worker's ``middleware=[...]`` (see :mod:`portq.runtime.middleware`)."""
        self.runtime.handler.use(middleware)

    def stop(self) -> None:
        """Stop claiming; running jobs get ``grace`` seconds, then are released (safe from
        any thread)."""
        self.runtime.stop()

    def wake(self) -> None:
        """Interrupt an idle sleep (a slot freed, or a new job was announced)."""
        self.runtime.wake()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.worker_id!r}, queues={self.queues}, "
                f"url={self.runtime.queue.url!r})")

    # ---- for the fronts' run() ----------------------------------------------------------

    def _registration(self) -> Registration | None:
        return registration_of(self, self.runtime.queue, lambda: self.held,
                               self.runtime.workers_serving)

    def _bound_statements(self) -> Callable[[], None]:
        """While the worker runs, every statement of its queue's connections is bounded
        server-side (its lease, at least :data:`MIN_STATEMENT_BOUND_MS`), so that a stalled
        one cannot hold a connection or a lock for ever; what restores the bound before."""
        backend = self.runtime.queue.backend
        before = backend.statement_timeout_ms
        bound = max(self.settings.lease_ms, MIN_STATEMENT_BOUND_MS)
        backend.bound_statements(bound if before is None else min(before, bound))
        return lambda: backend.bound_statements(before)

    def _log_started(self) -> None:
        s = self.settings
        self.log.info(
            "worker.started worker=%s engine=%s url=%s queues=%s concurrency=%d lease=%gs "
            "prefetch=%s claim_loops=%d pool=%d job_timeout=%s new_jobs=%s%s", self.worker_id,
            self.runtime.queue.backend.engine, self.runtime.queue.url, ",".join(self.queues),
            s.concurrency, s.lease, f"auto<={s.prefetch}" if s.auto_lookahead else s.prefetch,
            s.claimers, self.runtime.queue.backend.pool_size,
            "none" if s.job_timeout is None else f"{s.job_timeout:g}s",
            listen_mode(self.runtime.queue.backend, s.options.listen), self._kind)

    def _log_stopped(self) -> None:
        self.log.info("worker.stopped worker=%s %s", self.worker_id,
                      " ".join(f"{k}={v}" for k, v in self.counters.as_dict().items()))
