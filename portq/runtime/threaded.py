"""The thread front's executor: ``concurrency`` handler threads serving the runtime's
waiting line. A thread whose handler ran past its timeout and did not stop within the
grace is abandoned (it ends when its handler returns, never taking another job) and a new
thread takes its slot."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from portq.job import Job

if TYPE_CHECKING:
    from portq.runtime.core import Runtime


class ThreadExecutor:
    """Runs handlers on threads of its own (see the module)."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._runtime: Runtime | None = None
        self._lock = threading.Lock()
        # job id -> (the attempt, the thread running it)
        self._current: dict[int, tuple[Job, threading.Thread]] = {}
        self._abandoned: set[threading.Thread] = set()
        self._started = 0

    def start(self, runtime: Runtime) -> None:
        self._runtime = runtime
        for _ in range(self.concurrency):
            self._spawn()

    def _spawn(self) -> None:
        with self._lock:
            self._started += 1
            n = self._started
        threading.Thread(target=self._serve, name=f"portq-handler-{n}", daemon=True).start()

    def _serve(self) -> None:
        """A handler thread: run jobs from the line until it closes (or this thread is
        abandoned). Whatever a handler raises, ``SystemExit`` and ``KeyboardInterrupt``
        included, is its attempt's failure; the thread goes on serving."""
        runtime = self._runtime
        assert runtime is not None
        me = threading.current_thread()
        runner = runtime.handler
        try:
            while (job := runtime.next_job()) is not None:
                self._current[job.id] = (job, me)  # one dict store: atomic, no lock
                started = time.perf_counter()
                error: BaseException | None = None
                result = None
                try:
                    result = runner.run(job)
                except BaseException as exc:  # noqa: BLE001 - any is the attempt's failure
                    error = exc
                with self._lock:
                    if self._current.get(job.id, (None,))[0] is job:
                        del self._current[job.id]
                    abandoned = me in self._abandoned
                runtime.finish(job, error, result, time.perf_counter() - started)
                del error, result
                if abandoned:
                    with self._lock:
                        self._abandoned.discard(me)
                    return
        finally:
            runner.close_thread()

    def jobs_waiting(self) -> None:
        """The threads wait on the line itself: nothing to do."""

    def timed_out(self, job: Job) -> None:
        """A thread cannot be interrupted: its handler is told through ``job.cancelled()``."""

    def abandon(self, job: Job) -> bool:
        with self._lock:
            running = self._current.get(job.id)
            if running is None or running[0] is not job:
                return False  # it returned meanwhile
            self._abandoned.add(running[1])
        self._spawn()
        return True

    def cancel_running(self) -> None:
        """Threads cannot be cancelled; their jobs were released (daemon threads)."""

    def close(self) -> None:
        """The runtime closed the line: every thread ends once it is empty."""
