"""The worker registry: each running worker keeps a heartbeat row in ``portq_worker``.

A :class:`Registration` writes the row when its worker starts, renews it every
``interval`` seconds (the row expires ``3 x interval`` after the last beat, by the
database clock) and deletes it when the worker stops. A worker killed with SIGKILL leaves
its row behind until it expires; the next heartbeat of any worker deletes it. The rows
feed ``portq workers``, ``portq stats`` and the dashboard's Workers and Schedules pages.

Registration is best effort: a failed beat is logged and retried at the next interval,
never stopping the worker (its jobs are fenced by their own leases, not by this row).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from portq.job import WorkerInfo
from portq.queue import duration_ms

if TYPE_CHECKING:
    from portq.protocol import Backend
    from portq.queue import Queue
    from portq.schedule import Scheduler

log = logging.getLogger("portq.registry")
DEFAULT_REGISTRY_INTERVAL = 10.0
#: seconds after the first beat that early extra beats come (then every interval), so
#: that workers started together soon see each other in the count of workers serving
#: their queues
EARLY_BEATS_S = (0.25, 1.0)
REGISTRY_SCHEMA_VERSION = 3  # the migration that creates portq_worker


class Registration:
    """Keeps one worker's registry row alive; see the module docstring.

    ``jobs_in_hand`` and ``schedules`` are read at every beat: the jobs the worker owns
    now and the cron entries (dicts, see :meth:`portq.schedule.Scheduler.entries`) it runs.
    After each beat ``workers_serving`` (when given) is told how many live workers serve
    the busiest of this worker's queues, this one included.
    """

    def __init__(self, queue: Queue[Backend], worker_id: str, queues: Sequence[str],
                 concurrency: int,
                 jobs_in_hand: Callable[[], int],
                 schedules: Callable[[], list[dict[str, Any]]] = list,
                 interval: float = DEFAULT_REGISTRY_INTERVAL,
                 workers_serving: Callable[[int], None] | None = None) -> None:
        self.queue = queue
        self.worker_id = worker_id
        self.queues = tuple(queues)
        self.concurrency = concurrency
        self.jobs_in_hand = jobs_in_hand
        self.schedules = schedules
        self.interval = duration_ms(interval, "registry interval") / 1000
        self.ttl_ms = duration_ms(3 * self.interval, "registry ttl")
        self.workers_serving = workers_serving
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def info(self) -> WorkerInfo:
        return WorkerInfo(worker_id=self.worker_id, host=socket.gethostname()[:255],
                          pid=os.getpid(), queues=self.queues, concurrency=self.concurrency,
                          jobs_in_hand=self.jobs_in_hand(),
                          schedules=tuple(self.schedules()))

    def beat(self) -> bool:
        """Write the row once; False (logged) when the database refused."""
        try:
            self.queue.backend.beat_worker(self.info(), self.ttl_ms)
            if self.workers_serving is not None:
                per_queue = workers_per_queue(self.queue.workers())
                self.workers_serving(max(1, *(per_queue.get(n, 0) for n in self.queues)))
            return True
        except Exception as exc:  # noqa: BLE001 - best effort: try again next interval
            log.warning("worker.register_error worker=%s error=%s: %s", self.worker_id,
                        type(exc).__name__, exc)
            return False

    def deregister(self) -> None:
        try:
            self.queue.backend.deregister_worker(self.worker_id)
        except Exception as exc:  # noqa: BLE001 - the row expires on its own
            log.warning("worker.deregister_error worker=%s error=%s: %s", self.worker_id,
                        type(exc).__name__, exc)

    # ---- a thread beside the worker (either front) --------------------------------------

    def start(self) -> None:
        """Beat now, then every ``interval`` seconds in a daemon thread until :meth:`stop`."""
        self.beat()
        self._thread = threading.Thread(target=self._loop, name="portq-registry",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        waits = [b - a for a, b in zip((0.0, *EARLY_BEATS_S), EARLY_BEATS_S, strict=False)
                 if b < self.interval]
        while not self._stop.wait(waits.pop(0) if waits else self.interval):
            self.beat()

    def stop(self) -> None:
        """Stop beating and delete the row."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.deregister()


class Registrable(Protocol):
    """What :func:`registration_of` reads from a Worker or AsyncWorker."""

    worker_id: str
    queues: list[str]
    scheduler: Scheduler | None

    @property
    def concurrency(self) -> int: ...

    @property
    def registry_interval(self) -> float | None: ...


def registration_of(worker: Registrable, queue: Queue[Backend],
                    jobs_in_hand: Callable[[], int],
                    workers_serving: Callable[[int], None] | None = None
                    ) -> Registration | None:
    """The :class:`Registration` of a Worker or AsyncWorker, or None when its
    ``registry_interval`` is None."""
    if worker.registry_interval is None:
        return None
    scheduler = worker.scheduler
    return Registration(queue, worker.worker_id, worker.queues, worker.concurrency,
                        jobs_in_hand, scheduler.entries if scheduler is not None else list,
                        worker.registry_interval, workers_serving)


def live_workers(queue: Queue[Backend]) -> list[WorkerInfo] | None:
    """The registry's live rows, or None when the schema predates the registry (run
    ``portq migrate``)."""
    if queue.backend.schema_version() < REGISTRY_SCHEMA_VERSION:
        return None
    return queue.workers()


def workers_per_queue(workers: Sequence[WorkerInfo]) -> dict[str, int]:
    """How many of ``workers`` serve each queue."""
    out: dict[str, int] = {}
    for w in workers:
        for name in w.queues:
            out[name] = out.get(name, 0) + 1
    return out
