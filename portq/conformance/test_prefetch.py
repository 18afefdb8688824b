"""The worker's opt-in throughput knobs against a real engine: ``prefetch`` (claim ahead of
free handler threads), ``ack_delay`` (completions written after the handler's thread
moved on) and ``claimers`` (several claim loops). Ownership rules do not change: a worker
owns at most ``concurrency + prefetch`` jobs, runs at most ``concurrency`` handlers, keeps
every owned job's lease alive, gives unstarted jobs back as soon as shutdown starts, and
writes each completion once, fenced.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

import portq
from portq.conformance.helpers import (
    PeakHandler,
    completion_sizes,
    counts,
    quiet_worker,
    running,
    take_away,
    wait_for_succeeded,
    wait_until,
)
from portq.job import Job


def test_prefetch_owns_at_most_concurrency_plus_prefetch(queue: portq.Queue,
                                                         qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(30)])
    handler = PeakHandler(0.03)
    worker = quiet_worker(queue, qname, handler, concurrency=2, prefetch=3, lease=30,
                          idle_min=0.01, idle_max=0.05)
    assert (worker.capacity, worker.batch) == (5, 5)
    with running(worker):
        finished, most_running = wait_for_succeeded(queue, [qname], 30, timeout=60)
        assert finished
    assert handler.most <= 2, "more handlers ran than concurrency allows"
    assert 2 < most_running <= 5, f"database showed {most_running} running (want 3-5)"
    assert worker.counters.claimed == worker.counters.succeeded == 30
    assert {r.attempts for r in queue.jobs("succeeded", queue=qname)} == {1}


def test_claimers_share_the_capacity_and_claim_each_job_once(
        queue: portq.Queue, qname: str, caplog: pytest.LogCaptureFixture) -> None:
    """Three claim loops, each wanting a whole batch (= capacity 6): the slots one loop
    reserves for its claim are not claimed again by another."""
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(120)])
    handler = PeakHandler(0.01)
    worker = quiet_worker(queue, qname, handler, concurrency=2, prefetch=4, claimers=3,
                          ack_delay=0.0, lease=30, idle_min=0.01, idle_max=0.05)
    assert (worker.capacity, worker.batch) == (6, 6)
    with caplog.at_level(logging.DEBUG, logger="portq.worker"), running(worker):
        finished, most_running = wait_for_succeeded(queue, [qname], 120, timeout=60)
        assert finished
    assert handler.most <= 2, "more handlers ran than concurrency allows"
    assert most_running <= 6, f"database showed {most_running} running (capacity 6)"
    assert worker.counters.claimed == worker.counters.succeeded == 120
    assert worker.counters.lost == 0
    assert {r.attempts for r in queue.jobs("succeeded", queue=qname)} == {1}
    claim_threads = {r.threadName for r in caplog.records if r.getMessage().startswith(
        "job.claimed") and qname in r.getMessage()}
    assert len(claim_threads) >= 2, f"only {claim_threads} claimed"


@pytest.mark.parametrize("claimers", [1, 3])
def test_shutdown_gives_prefetched_jobs_back_at_once(queue: portq.Queue, qname: str,
                                                     claimers: int) -> None:
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(4)])
    gate = threading.Event()
    started: list[int] = []

    def handler(job: Job) -> None:
        started.append(job.id)
        gate.wait(30)

    worker = quiet_worker(queue, qname, handler, concurrency=1, prefetch=3, grace=30,
                          lease=30, idle_min=0.01, idle_max=0.05, claimers=claimers)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: counts(queue, qname)["running"] == 4 and bool(started))
        worker.stop()
        # the three jobs no handler started are ready again long before the grace ends,
        # while the running one keeps its lease
        assert wait_until(lambda: counts(queue, qname)["ready"] == 3, timeout=3)
        assert counts(queue, qname)["running"] == 1
    finally:
        gate.set()
        thread.join(40)
    assert not thread.is_alive()
    assert worker.counters.released == 3 and worker.counters.succeeded == 1
    # a new worker runs the given-back jobs under a new generation
    again = quiet_worker(queue, qname, lambda job: None, idle_min=0.01, idle_max=0.05)
    with running(again):
        assert wait_until(lambda: counts(queue, qname)["succeeded"] == 4)
    done = {r.id: r.attempts for r in queue.jobs("succeeded", queue=qname)}
    assert done == {i: (1 if i == started[0] else 2) for i in ids}


def test_prefetched_jobs_keep_their_lease_while_they_wait(queue: portq.Queue,
                                                          qname: str) -> None:
    """Three 0.7 s jobs on one thread with a 1 s lease: the last waits 1.4 s for the thread,
    longer than its lease; the heartbeat keeps it, and a busy reaper takes nothing."""
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    worker = quiet_worker(queue, qname, lambda job: time.sleep(0.7), concurrency=1,
                          prefetch=2, lease=1.0, idle_min=0.01, idle_max=0.05)
    with running(worker):
        deadline = time.monotonic() + 20
        while counts(queue, qname)["succeeded"] < 3 and time.monotonic() < deadline:
            queue.reap(delay=0)
            time.sleep(0.1)
    # the reaper also returns other tests' expired jobs, so this test's are judged by their
    # generation, which a reap and reclaim would have raised
    assert worker.counters.lost == 0
    assert worker.counters.succeeded == 3
    assert {r.attempts for r in queue.jobs("succeeded", queue=qname)} == {1}


def test_deferred_acks_are_batched_and_written_once(queue: portq.Queue, qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(60)])
    worker = quiet_worker(queue, qname, lambda job: None, concurrency=4, prefetch=8,
                          ack_delay=0.05, lease=30, idle_min=0.01, idle_max=0.05)
    with completion_sizes(queue) as batches, running(worker):
        finished, most_running = wait_for_succeeded(queue, [qname], 60, timeout=30)
        assert finished
    # a job whose ack waits is still owned: it counts against concurrency + prefetch
    assert most_running <= 12, f"database showed {most_running} running (capacity 12)"
    assert worker.counters.succeeded == 60 and worker.counters.lost == 0
    assert sum(batches) == 60 and len(batches) < 30, batches
    assert {r.attempts for r in queue.jobs("succeeded", queue=qname)} == {1}


def test_deferred_ack_of_a_job_taken_away_is_not_written(queue: portq.Queue,
                                                         qname: str) -> None:
    """The heartbeat (lease 0.9 s) sees the job taken away while its ack waits (2 s): the
    ack is dropped, and the loss counted once."""
    job_id = queue.enqueue(qname, "x")
    handled = threading.Event()
    worker = quiet_worker(queue, qname, lambda job: handled.set(), ack_delay=2.0,
                          lease=0.9, idle_min=0.01, idle_max=0.05)
    with running(worker):
        assert handled.wait(10)
        take_away(queue, job_id)  # another owner has it while the ack waits
        assert wait_until(lambda: worker.counters.lost == 1, timeout=10)
        time.sleep(2.5)  # past the ack's delay
        assert worker.held == 0
    assert worker.counters.succeeded == 0 and worker.counters.lost == 1
    assert counts(queue, qname)["succeeded"] == 0  # the dropped ack was never written


def test_stop_writes_waiting_acks_before_it_returns(queue: portq.Queue, qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    handled: list[int] = []
    worker = quiet_worker(queue, qname, lambda job: handled.append(job.id), ack_delay=20.0,
                          lease=60, idle_min=0.01, idle_max=0.05)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    assert wait_until(lambda: len(handled) == 3)
    assert counts(queue, qname)["succeeded"] == 0, "ack written before ack_delay"
    stopped = time.monotonic()
    worker.stop()
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - stopped < 5
    assert counts(queue, qname)["succeeded"] == 3 and worker.counters.succeeded == 3


#: every test here runs on both worker fronts (Worker, AsyncWorker): see plugin.FRONTS
WORKER_FRONTS = True
