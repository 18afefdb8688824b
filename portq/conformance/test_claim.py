"""Invariants 1, 5 and 7: no duplicate or lost claims under concurrency; ordering;
one queue per claim; dead and future jobs are never claimed."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

import portq
from portq.conformance.helpers import counts


def test_priority_then_run_at_then_id(queue: portq.Queue, qname: str) -> None:
    low = queue.enqueue(qname, "low", priority=-5)
    a = queue.enqueue(qname, "a")
    b = queue.enqueue(qname, "b")
    high = queue.enqueue(qname, "high", priority=10)
    mid = queue.enqueue(qname, "mid", priority=3)
    claimed = [j.id for j in queue.claim(qname, "w", limit=3)]
    assert sorted(claimed) == sorted([high, mid, a])
    rest = [j.id for j in queue.claim(qname, "w", limit=3)]
    assert sorted(rest) == sorted([b, low])
    # and one at a time, the order itself is visible
    ids = [queue.enqueue(qname, i, priority=p) for i, p in enumerate([1, 5, 5, 2, 9])]
    seq = [queue.claim(qname, "w", limit=1)[0].id for _ in ids]
    assert seq == [ids[4], ids[1], ids[2], ids[3], ids[0]]


def test_claim_is_bounded_and_single_queue(queue: portq.Queue, qname: str) -> None:
    other = qname + "-other"
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(7)])
    queue.enqueue_many([{"queue": other, "payload": i} for i in range(3)])
    jobs = queue.claim(qname, "w", limit=5)
    assert len(jobs) == 5 and {j.queue for j in jobs} == {qname}
    assert len(queue.claim(qname, "w", limit=5)) == 2
    assert queue.claim(qname, "w", limit=5) == []
    assert counts(queue, other)["ready"] == 3


def test_claim_sets_generation_and_lease(queue: portq.Queue, qname: str) -> None:
    queue.enqueue(qname, 1, max_attempts=3)
    (job,) = queue.claim(qname, "w1", limit=1, lease=60)
    assert job.attempt == 1 and job.max_attempts == 3
    assert job.claim is not None and job.claim.generation == 1
    assert job.claim.worker_id == "w1"
    c = counts(queue, qname)
    assert (c["ready"], c["running"]) == (0, 1)


def test_claims_record_when_each_attempt_started(queue: portq.Queue, qname: str) -> None:
    """Every claim sets ``started_at`` (the latest attempt's start) by the database clock,
    the first one also ``first_started_at``; both stay once the job finished."""
    job_id = queue.enqueue(qname, 1, max_attempts=2)
    record = queue.job(job_id)
    assert record is not None and (record.started_at, record.first_started_at) == (None, None)
    (job,) = queue.claim(qname, "w1", limit=1, lease=60)
    first = queue.job(job_id)
    assert first is not None and first.started_at is not None and first.created_at is not None
    assert first.first_started_at == first.started_at >= first.created_at
    assert first.lease_until is not None and first.started_at < first.lease_until
    assert queue.fail(job, "again", retry_in=0)
    time.sleep(0.01)
    (job,) = queue.claim(qname, "w2", limit=1, lease=60)
    second = queue.job(job_id)
    assert second is not None and second.started_at is not None
    assert second.first_started_at == first.started_at < second.started_at
    assert queue.complete(job)
    done = queue.job(job_id)
    assert done is not None and done.finished_at is not None and done.started_at is not None
    assert (done.first_started_at, done.started_at) == (first.started_at, second.started_at)
    assert done.started_at <= done.finished_at


def test_future_and_dead_jobs_are_not_claimed(queue: portq.Queue, qname: str) -> None:
    queue.enqueue(qname, "future", delay=3600)
    dead_id = queue.enqueue(qname, "dies", max_attempts=1)
    (job,) = queue.claim(qname, "w", limit=5)
    assert job.id == dead_id
    assert queue.fail(job, "boom", retry_in=0)  # attempts spent -> dead despite retry_in
    assert queue.claim(qname, "w", limit=5) == []
    c = counts(queue, qname)
    assert (c["dead"], c["scheduled"], c["ready"]) == (1, 1, 0)


@pytest.mark.slow
def test_concurrent_claimers_never_share_a_generation(queue: portq.Queue, qname: str,
                                                      engine_url: str) -> None:
    """>= 10,000 jobs, 4 claimers with their own connections: zero duplicates, zero lost."""
    total, claimers, batch = 10_000, 4, 25
    for start in range(0, total, 2000):
        queue.enqueue_many([{"queue": qname, "payload": i}
                            for i in range(start, min(total, start + 2000))])
    seen: list[list[tuple[int, int]]] = [[] for _ in range(claimers)]
    completed: list[int] = [0] * claimers
    errors: list[BaseException] = []
    start_gate = threading.Barrier(claimers)

    def claimer(n: int) -> None:
        try:
            with portq.connect(engine_url, prefix=queue.backend.prefix, pool_size=2) as q:
                start_gate.wait()
                idle = 0
                while idle < 3:
                    jobs = q.claim(qname, f"claimer-{n}", limit=batch, lease=120)
                    if not jobs:
                        idle += 1
                        time.sleep(0.05)
                        continue
                    idle = 0
                    for job in jobs:
                        assert job.claim is not None
                        seen[n].append((job.id, job.claim.generation))
                        completed[n] += q.complete(job)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(claimers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    claims = Counter(c for per in seen for c in per)
    duplicates = {c: n for c, n in claims.items() if n > 1}
    assert duplicates == {}
    assert len({job_id for job_id, _ in claims}) == total, "a job was never claimed"
    assert sum(completed) == total
    c = counts(queue, qname)
    assert (c["succeeded"], c["ready"], c["running"]) == (total, 0, 0)
    assert sum(1 for per in seen if per) >= 2, "claimers did not actually run concurrently"
