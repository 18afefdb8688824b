"""Writing running jobs' progress reports (:meth:`portq.Job.progress`) for a worker.

A report never waits for the database: it is kept as the job's latest and written by one
thread of this writer's own, at most once per :attr:`ProgressWriter.interval` per job (a
report made sooner waits, replaced by any later one: the latest is what gets written).
Each write is fenced like every write of the job's owner (``set_progress``: job,
generation, worker, running, lease not expired), so a worker that lost the job writes
nothing. A report still waiting when its handler returns is dropped: the outcome's write
follows at once, and a fenced write after it would be refused anyway. The thread starts on
the first report and ends after :attr:`IDLE_S` without any."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from portq.job import Job

if TYPE_CHECKING:
    from portq.backends.base import SqlBackend

log = logging.getLogger("portq.worker")

#: (job id, generation): one attempt of one job
Attempt = tuple[int, int]


class ProgressWriter:
    """One worker's progress writes (see the module)."""

    IDLE_S = 30.0

    def __init__(self, backend: SqlBackend, interval: float = 1.0) -> None:
        self.backend = backend
        self.interval = interval
        self._cond = threading.Condition()
        self._waiting: dict[Attempt, tuple[Job, float | None, str]] = {}
        self._last: dict[Attempt, float] = {}  # when each attempt's last write was sent
        self._thread: threading.Thread | None = None
        #: writes sent and writes the database refused (the claim no longer owned the job)
        self.written = self.refused = 0

    def report(self, job: Job, fraction: float | None, note: str) -> None:
        """Keep ``job``'s latest report for the writer (any thread; never blocks on I/O)."""
        with self._cond:
            self._waiting[(job.id, job.attempt)] = (job, fraction, note)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="portq-progress",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def finished(self, job: Job) -> None:
        """``job``'s handler returned: forget it (a report still waiting is dropped)."""
        with self._cond:
            self._waiting.pop((job.id, job.attempt), None)
            self._last.pop((job.id, job.attempt), None)

    def _due(self, now: float) -> tuple[list[tuple[Job, float | None, str]], float | None]:
        """Reports whose attempt may be written now (taken out), and the seconds until
        the next one may (None: none waits). ``_cond`` held."""
        due, wait = [], None
        for attempt, report in list(self._waiting.items()):
            at = self._last.get(attempt, -self.interval) + self.interval
            if at <= now:
                due.append(report)
                del self._waiting[attempt]
                self._last[attempt] = now
            else:
                wait = at - now if wait is None else min(wait, at - now)
        return due, wait

    def _serve(self) -> None:
        idle_since = time.monotonic()
        while True:
            with self._cond:
                due, wait = self._due(time.monotonic())
                if not due:
                    if wait is None and time.monotonic() - idle_since >= self.IDLE_S:
                        self._thread = None  # the next report starts another
                        return
                    self._cond.wait(self.IDLE_S if wait is None else wait)
                    continue
            for job, fraction, note in due:
                self._write(job, fraction, note)
            idle_since = time.monotonic()

    def _write(self, job: Job, fraction: float | None, note: str) -> None:
        claim = job.claim
        if claim is None:
            return
        try:
            ok = self.backend.set_progress(claim, fraction, note)
        except Exception as exc:  # noqa: BLE001 - progress is best effort: the job goes on
            log.warning("job.progress_error job_id=%d queue=%s generation=%d error=%s: %s",
                        job.id, job.queue, job.attempt, type(exc).__name__, exc)
            return
        with self._cond:
            if ok:
                self.written += 1
            else:
                self.refused += 1
        if not ok:
            log.debug("job.progress_refused job_id=%d queue=%s generation=%d: the claim no "
                      "longer owns the job", job.id, job.queue, job.attempt)
