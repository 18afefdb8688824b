"""The worker's automatic look-ahead against a real engine: jobs shorter than a claim's
round trip are claimed ahead of free handler threads, and a job claimed ahead that no
thread starts within a fraction of its lease (here: behind a job that blocks) is given
back at once, its attempt with it, instead of waiting out the slow job."""

from __future__ import annotations

import threading

import pytest

import portq
from portq.conformance.helpers import counts, quiet_worker, running, wait_until
from portq.job import Job
from portq.worker import LOOKAHEAD_LEASE_FRACTION


@pytest.mark.serial  # a tenth of the lease, against a busy machine
def test_jobs_claimed_ahead_are_given_back_when_a_job_blocks(queue: portq.Queue,
                                                             qname: str) -> None:
    total, blocker = 300, 150
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(total)])
    unblock = threading.Event()
    blocked = threading.Event()

    def handler(job: Job) -> None:
        if job.payload == blocker:
            blocked.set()
            unblock.wait(60)

    lease = 2.0  # jobs claimed ahead are given back after LOOKAHEAD_LEASE_FRACTION of it
    worker = quiet_worker(queue, qname, handler, concurrency=1, lease=lease,
                          idle_min=0.01, idle_max=0.05)
    assert worker.auto_lookahead
    with running(worker):
        assert blocked.wait(30), "the blocking job never started"
        # with one thread, a job given back unstarted can only have been claimed ahead
        assert wait_until(lambda: worker.counters.released >= 1,
                          timeout=10 * lease * LOOKAHEAD_LEASE_FRACTION + 5)
        # and no more is claimed ahead while the thread is stuck: only the blocker runs
        assert wait_until(lambda: counts(queue, qname)["running"] == 1, timeout=5)
        assert worker.held == 1
        unblock.set()
        assert wait_until(lambda: counts(queue, qname)["succeeded"] == total, timeout=60)
    assert worker.counters.lost == 0 and worker.counters.succeeded == total
    attempts = {r.attempts for r in queue.jobs("succeeded", queue=qname, limit=total)}
    assert attempts <= {1, 2}, attempts  # a job given back runs as its next generation
    assert 2 in attempts


#: every test here runs on both worker fronts (Worker, AsyncWorker): see plugin.FRONTS
WORKER_FRONTS = True
