"""Writing running jobs' progress reports (:meth:`portq.Job.progress`) for a worker.

A report never waits for the database: it is kept as its job's latest, and one thread of
this writer's own writes the latest report of every job that has one, all in one
transaction, at most once per :attr:`ProgressWriter.interval` (a second): so at most one
write per job per second, the latest value kept, and at most one progress transaction per
second per worker whatever the number of jobs (on SQLite, one write lock for every
writer, that keeps progress out of the way of claims and completions). The first report
after a quiet second is written at once. Each write is fenced like every write of the job's
owner (``set_progress``: job, generation, worker, running, lease not expired), so a worker
that lost the job writes nothing. A report still waiting when its handler returns is
dropped: the outcome's write follows at once, and a fenced write after it would be refused
anyway. A worker starts the thread as it starts and stops it as it shuts down
(:meth:`ProgressWriter.start`, :meth:`ProgressWriter.close`), so that no report waits for a
thread to start (the first one did: up to 9 ms beside six busy processes on 2 cores, over
50 ms under CI's load); a runner outside a worker (``portq.testing``) starts it on its first
report, and it then ends after :attr:`IDLE_S` without any."""

from __future__ import annotations

import logging
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from portq.job import Job

if TYPE_CHECKING:
    from portq.protocol import Backend

log = logging.getLogger("portq.worker")

#: (job id, generation): one attempt of one job
Attempt = tuple[int, int]


class ProgressWriter:
    """One worker's progress writes (see the module)."""

    IDLE_S = 30.0

    def __init__(self, backend: Backend, interval: float = 1.0) -> None:
        self.backend = backend
        self.interval = interval
        self._cond = threading.Condition()
        self._waiting: dict[Attempt, tuple[Job, float | None, str]] = {}
        self._sent = -interval  # when the last batch was sent (time.monotonic())
        self._thread: threading.Thread | None = None
        self._kept = False  # started by a worker: no idle end, only close()
        self._closing = False
        #: reports written, reports the database refused (the claim no longer owned the
        #: job), and transactions sent
        self.written = self.refused = self.batches = 0
        #: held around each write: its worker's lock on statements that write the rows it
        #: owns (``Ledger._row_writes``; a write of several reports locks several rows)
        self.row_writes: AbstractContextManager[object] = nullcontext()

    def start(self) -> None:
        """Start the writing thread, kept until :meth:`close` (a worker, as it starts)."""
        with self._cond:
            self._kept, self._closing = True, False
            if self._thread is None:
                self._start_locked()

    def close(self) -> None:
        """End the writing thread, after the write it may be sending (a worker, once its
        handlers have returned: a report still waiting is dropped, as when its handler
        returns)."""
        with self._cond:
            self._kept, self._closing = False, True
            self._waiting.clear()
            self._cond.notify()

    def report(self, job: Job, fraction: float | None, note: str) -> None:
        """Keep ``job``'s latest report for the writer (any thread; never blocks on I/O,
        nor, in a worker, on a thread start)."""
        with self._cond:
            self._waiting[(job.id, job.attempt)] = (job, fraction, note)
            if self._thread is None:  # outside a worker, or a handler outliving its worker
                self._closing = False
                self._start_locked()
            self._cond.notify()

    def _start_locked(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="portq-progress",
                                        daemon=True)
        self._thread.start()

    def finished(self, job: Job) -> None:
        """``job``'s handler returned: forget it (a report still waiting is dropped)."""
        with self._cond:
            self._waiting.pop((job.id, job.attempt), None)

    def _serve(self) -> None:
        idle_since = time.monotonic()
        while True:
            with self._cond:
                now = time.monotonic()
                if self._closing or (not self._waiting and not self._kept and
                                     now - idle_since >= self.IDLE_S):
                    self._thread = None  # the next report (or start) starts another
                    return
                if not self._waiting:
                    self._cond.wait(self.IDLE_S)
                    continue
                if now < self._sent + self.interval:
                    self._cond.wait(self._sent + self.interval - now)
                    continue
                batch = list(self._waiting.values())
                self._waiting.clear()
                self._sent = now
            self._write(batch)
            idle_since = time.monotonic()

    def _write(self, batch: list[tuple[Job, float | None, str]]) -> None:
        reports = [(job.claim, fraction, note) for job, fraction, note in batch
                   if job.claim is not None]
        try:
            with self.row_writes:
                results = self.backend.set_progress_many(reports)
        except Exception as exc:  # noqa: BLE001 - progress is best effort: the jobs go on
            log.warning("job.progress_error job_ids=%s error=%s: %s",
                        ",".join(str(job.id) for job, _, _ in batch), type(exc).__name__,
                        exc)
            return
        with self._cond:
            self.batches += 1
            self.written += sum(results)
            self.refused += len(results) - sum(results)
        for (claim, _, _), ok in zip(reports, results, strict=True):
            if not ok:
                log.debug("job.progress_refused job_id=%d generation=%d: the claim no "
                          "longer owns the job", claim.job_id, claim.generation)
