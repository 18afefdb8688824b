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
import threading
import time
from collections.abc import Callable
from typing import Protocol

from portq.job import Job
from portq.runtime.claiming import FUTILE_GIVE_BACKS as FUTILE_GIVE_BACKS
from portq.runtime.claiming import ClaimLoops
from portq.runtime.counters import WorkerCounters
from portq.runtime.leases import Leases
from portq.runtime.maintenance import run_listener
from portq.runtime.pacing import COMPLETION_BATCHERS


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


class Runtime(ClaimLoops, Leases):
    """One worker's claiming, ledger, writing, leases and shutdown (see the module): the
    thread start-up and the shutdown here; made as :class:`~portq.runtime.ledger.Ledger`
    is, over its parts :class:`~portq.runtime.claiming.ClaimLoops` (over the writers,
    :class:`~portq.runtime.writer.Writer`) and :class:`~portq.runtime.leases.Leases`
    (over the handler slots, :class:`~portq.runtime.slots.HandlerSlots`)."""

    # ---- run ----------------------------------------------------------------------------

    def run(self, executor: Executor) -> WorkerCounters:
        """Claim and run until stopped (or drained, with ``burst``), then shut down, with
        ``executor`` running the handlers. Runs the main claim loop on the calling
        thread."""
        self.executor = executor
        self._start_threads()
        try:
            self._claim_loop()
        finally:
            self._shutdown()
        return self.counters

    def _start_threads(self) -> None:
        s = self.settings
        self._executor.start(self)
        if self.handler.progress is not None:
            self.handler.progress.start()
        # engines that know their server's history (PostgreSQL) call it on a failover
        self.queue.backend.watch_identity(self._history_changed)
        for n in range(1, s.claimers):
            self._claim_threads.append(self._spawn(
                functools.partial(self._claim_loop, index=n), f"portq-claim-{n}"))
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
        if self.handler.progress is not None:
            self.handler.progress.close()
        self._done.set()
        self.line.close()
        self._executor.close()

    def _running_owned(self) -> int:
        with self._lock:
            return len(self._inflight) - len(self._acking)
