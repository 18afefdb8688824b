"""The runtime core driven by an executor whose handler slots never take a job (a front
whose threads died): it must notice that everything it claims is given back unstarted and
stop claiming, instead of claiming and giving back without end (each claim a new
generation)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import portq
from portq.conformance.helpers import counts
from portq.job import Job
from portq.runtime.core import FUTILE_GIVE_BACKS, Runtime
from portq.runtime.options import WorkerOptions, settle


class DeadSlots:
    """An executor whose handler slots never serve the waiting line."""

    def start(self, runtime: Runtime) -> None: ...
    def jobs_waiting(self) -> None: ...
    def timed_out(self, job: Job) -> None: ...
    def abandon(self, job: Job) -> bool:
        return False
    def cancel_running(self) -> None: ...
    def close(self) -> None: ...


def test_claims_that_are_never_started_stop_the_claiming(
        queue: portq.Queue, qname: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="portq.worker")
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    options = WorkerOptions(concurrency=1, lease=1.0, idle_min=0.01, idle_max=0.05,
                            reap_interval=None, prune_interval=None, grace=0)
    runtime = Runtime(queue, [qname], lambda job: None, settle(options, queue.backend),
                      worker_id="dead-slots:1:0")
    thread = threading.Thread(target=runtime.run, args=(DeadSlots(),), daemon=True)
    thread.start()
    try:
        time.sleep(3.0)  # 30 look-ahead bounds (0.1 s of the 1 s lease)
        released = runtime.counters.released
    finally:
        runtime.stop()
        thread.join(30)
    assert released == FUTILE_GIVE_BACKS, released
    stalled = [r for r in caplog.records if r.getMessage().startswith("worker.stalled")]
    assert len(stalled) == 1
    # each give-back kept the attempt: nothing ran, so no job may be closer to dead
    records = [queue.job(i) for i in ids]
    assert all(r is not None and r.state == "ready" for r in records)
    assert counts(queue, qname)["ready"] == 3


def test_next_lease_expiry_reads_the_earliest_running_lease(queue: portq.Queue,
                                                              qname: str) -> None:
    """The reaper's schedule: milliseconds to the earliest running lease by the database
    clock, negative once expired, None when nothing runs (on this suite's table, other
    tests' leases may be earlier: the value is at most this test's)."""
    before = queue.backend.next_lease_expiry_ms()
    queue.enqueue(qname, "x")
    [job] = queue.claim(qname, "lease-reader:1:0", limit=1, lease=5.0)
    ms = queue.backend.next_lease_expiry_ms()
    assert ms is not None and ms <= 5000
    if before is None:
        assert 4000 <= ms <= 5000, ms
    assert queue.complete(job)
