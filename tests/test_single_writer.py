"""A single writer (SQLite: one claim loop, which writes the outcomes too) writes the
completions of several claims in one statement, and never leaves outcomes waiting
through an idle sleep."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import portq
from portq.conformance.helpers import (
    claim_sizes,
    completion_sizes,
    counts,
    quiet_worker,
    running,
    wait_until,
)
from portq.job import Job
from portq.runtime.claiming import SINGLE_WRITER_CLAIMS_PER_WRITE
from portq.runtime.pacing import BATCH_LIMIT


@pytest.fixture
def single(queue: portq.Queue) -> Iterator[portq.Queue]:
    if not queue.backend.capabilities.single_writer:
        pytest.skip("a worker of this engine has writer threads of its own")
    yield queue


FRONTS = pytest.mark.parametrize("worker_front", ["Worker", "AsyncWorker"], indirect=True)


@FRONTS
def test_completions_of_several_claims_go_in_one_statement(single: portq.Queue,
                                                            qname: str,
                                                            worker_front: str) -> None:
    """Claims of 10: completions wait for up to SINGLE_WRITER_CLAIMS_PER_WRITE claims'
    worth (40) before they are written, so there are fewer completion statements than
    claims, and some carry more than one claim's jobs. Every job succeeds once. With
    the threads' no-op jobs the look-ahead leaves plenty of free slots, and most
    statements carry the whole 40; the asyncio front's plain handlers run on threads it
    hands them to, its look-ahead is smaller, and a write often comes first because too
    few slots are free for a whole claim (outcomes hold theirs)."""
    queue = single
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(600)])
    worker = quiet_worker(queue, qname, lambda job: None, concurrency=4, batch=10,
                          burst=True, idle_min=0.01, idle_max=0.05, registry_interval=None)
    with completion_sizes(queue) as sizes, claim_sizes(queue) as claims:
        assert worker.run().succeeded == 600
    assert sum(sizes) == 600
    assert max(sizes) > 10, sizes
    assert max(sizes) <= BATCH_LIMIT, sizes
    if worker_front == "Worker":
        assert sorted(sizes)[len(sizes) // 2] >= SINGLE_WRITER_CLAIMS_PER_WRITE * 10, sizes
    assert len(sizes) < len([c for c in claims if c]), (sizes, claims)
    assert counts(queue, qname)["succeeded"] == 600


@FRONTS
def test_outcomes_are_written_before_an_idle_sleep(single: portq.Queue, qname: str) -> None:
    """Three jobs claimed together, all three handlers returned before the next claim,
    which finds the queue empty: the outcomes waiting are written next, not after an
    idle sleep (``idle_min`` here is 2.5 s) that nothing would cut short. Each job
    is succeeded in the database well within a second of its handler's return."""
    queue = single
    returned: dict[int, float] = {}
    all_returned = threading.Event()
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])

    def handler(job: Job) -> None:
        returned[job.id] = time.monotonic()
        if len(returned) == 3:
            all_returned.set()
    claim = queue.claim

    def after_the_handlers(*args: Any, **kwargs: Any) -> list[Job]:
        if returned:
            assert all_returned.wait(10)
            # as when a wait for free slots took the handlers' wake-up meanwhile
            worker.runtime._wake.clear()
        return claim(*args, **kwargs)
    queue.claim = after_the_handlers  # type: ignore[method-assign]
    worker = quiet_worker(queue, qname, handler, concurrency=4, batch=10, idle_min=2.5,
                          idle_max=3.0, registry_interval=None)
    try:
        with running(worker):
            assert wait_until(lambda: all(
                (j := queue.job(i)) is not None and j.state == "succeeded" for i in ids),
                interval=0.01)
            written = time.monotonic()
    finally:
        del queue.claim
    assert set(returned) == set(ids), returned
    late = written - max(returned.values())
    assert late < 1.0, f"outcomes written {late:.2f}s after the last handler returned"


@FRONTS
def test_outcomes_wait_no_longer_than_the_linger_while_claims_go_on(
        single: portq.Queue, qname: str) -> None:
    """Claims that each find a few jobs and take 50 ms (a slow disk): the outcomes are
    written once the first has waited SINGLE_WRITER_LINGER_S, at the next claim's end,
    not after 4 claims' worth (here 200 ms)."""
    queue = single
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(60)])
    returned: dict[int, float] = {}
    written: dict[int, float] = {}
    claim, complete_many = queue.claim, queue.complete_many

    def slow_claim(*args: Any, **kwargs: Any) -> list[Job]:
        jobs = claim(*args, **kwargs)
        time.sleep(0.05)
        return jobs

    def timed(jobs: list[Job]) -> list[bool]:
        done = complete_many(jobs)
        written.update((job.id, time.monotonic()) for job in jobs)
        return done

    def handler(job: Job) -> None:
        returned[job.id] = time.monotonic()
    queue.claim = slow_claim  # type: ignore[method-assign]
    queue.complete_many = timed  # type: ignore[method-assign,assignment]
    worker = quiet_worker(queue, qname, handler, concurrency=4, batch=5, burst=True,
                          idle_min=0.01, idle_max=0.05, registry_interval=None)
    try:
        assert worker.run().succeeded == 60
    finally:
        del queue.claim, queue.complete_many
    waits = sorted(written[i] - returned[i] for i in returned)
    assert waits[-1] < 0.15, waits[-5:]
