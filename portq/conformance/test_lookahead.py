"""The worker's automatic look-ahead against a real engine: jobs shorter than a claim's
round trip are claimed ahead of free handler threads, and a job claimed ahead that no
thread starts within a fraction of its lease (here: behind a job that blocks) is given
back at once, its attempt with it, instead of waiting out the slow job. And how the
finished jobs' completions are batched: a slot serves on while its completion is written,
many slots of short jobs write in batches, and a write carries everything that finished
while the one before it was written."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

import portq
from portq.conformance.helpers import (
    completion_sizes,
    counts,
    not_applicable,
    quiet_worker,
    running,
    wait_until,
)
from portq.job import Claim, Job
from portq.worker import BATCH_LIMIT, LOOKAHEAD_LEASE_FRACTION


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


def test_a_slow_completion_write_frees_its_handler_slot_and_a_stalled_writer_holds_claims(
        queue: portq.Queue, qname: str) -> None:
    """A finished job's handler slot serves the next job while its completion is still
    being written (a write's round trip must not idle the slot: with 40 slots of 5 ms jobs
    a third of them did), and a writer that stalls holds the claims back: with jobs that
    outlast a claim (no look-ahead), the worker runs one more job per slot while no
    completion can be written, then stops claiming until writes resume; then every job
    completes once."""
    if queue.backend.capabilities.single_writer:
        not_applicable("one thread both claims and writes on a single-writer engine "
                       "(SQLite's one write lock): a stalled write stalls its claims")
    total, concurrency = 40, 2
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(total)])
    ran: list[int] = []
    writes_may_go = threading.Event()
    complete_many = queue.complete_many

    def stalled(jobs: Sequence[Job | Claim]) -> list[bool]:  # the real write, held back
        writes_may_go.wait(60)
        return complete_many(jobs)

    def handler(job: Job) -> None:
        ran.append(job.id)
        time.sleep(0.1)  # outlasts a claim's round trip: no look-ahead

    queue.complete_many = stalled  # type: ignore[method-assign]
    worker = quiet_worker(queue, qname, handler, concurrency=concurrency, lease=30,
                          idle_min=0.01, idle_max=0.05)
    try:
        with running(worker):
            # a second job ran on each slot while the first one's completion waited
            assert wait_until(lambda: len(ran) >= 2 * concurrency, timeout=15), ran
            # and the claims stop: what ran stops growing, short of the jobs waiting
            plateau = len(ran)
            for _ in range(50):
                time.sleep(0.3)
                if len(ran) == plateau:
                    break
                plateau = len(ran)
            assert len(ran) == plateau < total, (len(ran), plateau)
            assert counts(queue, qname)["succeeded"] == 0
            writes_may_go.set()
            assert wait_until(lambda: counts(queue, qname)["succeeded"] == total, timeout=60)
    finally:
        writes_may_go.set()
        del queue.complete_many
    assert worker.counters.succeeded == total and worker.counters.lost == 0
    assert {r.attempts for r in queue.jobs("succeeded", queue=qname, limit=total)} == {1}


#: every test here runs on both worker fronts (Worker, AsyncWorker): see plugin.FRONTS
WORKER_FRONTS = True


@pytest.mark.serial  # a completion rate of 8,000 a second: a busy machine gathers fewer
def test_many_slots_of_short_io_bound_jobs_write_their_completions_in_batches(
        queue: portq.Queue, qname: str) -> None:
    """Many handler slots of jobs a few milliseconds long finish a few at a time: the
    writer waits a little (at most ``WRITE_LINGER_S``) for the next ones, whose outcomes
    hold no slot meanwhile, instead of a statement and a round trip per few jobs (40
    slots of 5 ms jobs wrote 8-10 a statement on PostgreSQL before); every job completes
    once. (It waits for a claim's worth at most, and for no more than half the slots,
    so that the batch gathering and the one being written stay within the outcomes that
    hold no slot.)"""
    if queue.backend.capabilities.single_writer:
        not_applicable("a single writer (SQLite) writes in its claim loop, several claims' "
                       "worth at a time: tests/test_single_writer.py")
    total, concurrency = 800, 40
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(total)])
    worker = quiet_worker(queue, qname, lambda job: time.sleep(0.005),
                          concurrency=concurrency, lease=30, idle_min=0.01, idle_max=0.05)
    with completion_sizes(queue) as sizes, running(worker):
        assert wait_until(lambda: counts(queue, qname)["succeeded"] == total, timeout=60)
    assert worker.counters.succeeded == total and worker.counters.lost == 0
    # half the slots a statement at least (here 37-48; without the wait PostgreSQL wrote
    # 9-13.5, MariaDB's AsyncWorker 14-16.5 and its Worker, whose writes are slower and
    # gather more on their own, 21-25)
    assert statistics.median(sizes) >= concurrency // 2, sizes


def test_a_completion_write_takes_everything_that_finished_during_the_one_before(
        queue: portq.Queue, qname: str) -> None:
    """The completion batcher's next statement carries every outcome that came in while
    its previous one was being written, more than a claim's ``BATCH_LIMIT`` included (a
    worker of many slots finishes more than that in one write's time; capped at it, the
    one batcher fell behind for good: 200 slots of 5 ms jobs ran at two thirds of the
    speed). Their results go first, a ``BATCH_LIMIT`` a transaction (the heartbeat's
    renewals wait for each). Here the first job's write is held until every other
    handler, started only once that write began, has returned."""
    if queue.backend.capabilities.single_writer:
        not_applicable("a single writer (SQLite) writes in its claim loop, at most a "
                       "claim's BATCH_LIMIT at a time (its writes hold the one write "
                       "lock): tests/test_single_writer.py")
    total = concurrency = 2 * BATCH_LIMIT + 50
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(total)])
    writing = threading.Event()
    returned = threading.Semaphore(0)
    first = threading.Lock()
    backend, complete_many = queue.backend, queue.complete_many
    store_results = backend.store_results
    stored: list[int] = []

    def handler(job: Job) -> dict[str, Any]:
        if not first.acquire(blocking=False):  # all but the first: after its write began
            writing.wait(30)
            returned.release()
        return {"n": job.payload}

    def first_held(jobs: Sequence[Job | Claim]) -> list[bool]:
        if not writing.is_set():
            writing.set()
            for _ in range(total - 1):
                returned.acquire(timeout=30)
            time.sleep(0.05)  # the last outcomes reach the writer's mailbox
        return complete_many(jobs)

    def counted(results: Sequence[tuple[Claim, str]]) -> list[bool]:
        stored.append(len(results))
        return store_results(results)

    worker = quiet_worker(queue, qname, handler, concurrency=concurrency, lease=30,
                          idle_min=0.01, idle_max=0.05)
    queue.complete_many = first_held  # type: ignore[method-assign]
    backend.store_results = counted  # type: ignore[method-assign]
    try:
        with completion_sizes(queue) as sizes, running(worker):
            assert wait_until(lambda: counts(queue, qname)["succeeded"] == total,
                              timeout=60)
    finally:
        vars(queue).pop("complete_many", None)  # completion_sizes let go of it already
        del backend.store_results
    assert worker.counters.succeeded == total and worker.counters.lost == 0
    # the first job's write, then one statement for all the rest; their results before
    # it, in transactions of BATCH_LIMIT
    assert sizes == [1, total - 1], sizes
    assert stored == [1, BATCH_LIMIT, BATCH_LIMIT, total - 1 - 2 * BATCH_LIMIT], stored
    for row in queue.jobs("succeeded", queue=qname, limit=total)[::50]:
        assert queue.result(row.id) == {"n": row.payload}
