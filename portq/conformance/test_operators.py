"""Operator reads and bulk actions: the whole job row and its error history, listing by any
state or all, paging by key, and bounded bulk retry/cancel (``portq jobs``, ``portq job``,
``portq retry/cancel --queue Q --state S``)."""

from __future__ import annotations

import threading

import pytest

import portq
from portq.conformance.helpers import counts


def test_job_returns_whole_row_and_error_history(queue: portq.Queue, qname: str) -> None:
    job_id = queue.enqueue(qname, {"n": 1}, priority=3, key=f"{qname}-k", max_attempts=2)
    for attempt in (1, 2):
        (job,) = queue.claim(qname, "w-ops", limit=1)
        assert queue.fail(job, f"boom {attempt}\nsecond line", retry_in=0)
    rec = queue.job(job_id)
    assert rec is not None
    assert (rec.id, rec.queue, rec.state, rec.payload, rec.priority, rec.attempts,
            rec.max_attempts, rec.key) == (job_id, qname, "dead", {"n": 1}, 3, 2, 2,
                                           f"{qname}-k")
    assert rec.last_error == "boom 2\nsecond line"
    assert rec.run_at is not None and rec.created_at is not None
    assert rec.finished_at is not None and rec.finished_at >= rec.created_at
    errors = queue.error_history(job_id)
    assert [(e.attempt, e.worker_id, e.error) for e in errors] == [
        (1, "w-ops", "boom 1\nsecond line"), (2, "w-ops", "boom 2\nsecond line")]
    assert all(e.failed_at is not None and e.failed_at >= rec.created_at for e in errors)
    assert queue.job(job_id + 10_000_000) is None


def test_jobs_lists_any_state_or_all_and_pages_by_key(queue: portq.Queue,
                                                      qname: str) -> None:
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(5)])
    (running,) = queue.claim(qname, "w", limit=1)
    assert queue.cancel(ids[4])
    assert [r.id for r in queue.jobs("ready", queue=qname)] == ids[1:4]
    assert [r.id for r in queue.jobs("running", queue=qname)] == [running.id]
    assert [r.id for r in queue.jobs("cancelled", queue=qname)] == [ids[4]]
    everything = queue.jobs(None, queue=qname)
    assert [r.id for r in everything] == ids
    assert [r.state for r in everything] == ["running", "ready", "ready", "ready",
                                             "cancelled"]
    assert [r.id for r in queue.jobs("all", queue=qname)] == ids
    page1 = queue.jobs(queue=qname, limit=2)
    page2 = queue.jobs(queue=qname, limit=2, after_id=page1[-1].id)
    page3 = queue.jobs(queue=qname, limit=2, after_id=page2[-1].id)
    assert [r.id for r in page1 + page2 + page3] == ids
    with pytest.raises(portq.ConfigurationError, match="states ready, running"):
        queue.jobs("finished", queue=qname)


def _dead_jobs(queue: portq.Queue, qname: str, n: int) -> list[int]:
    ids = queue.enqueue_many([{"queue": qname, "payload": i, "max_attempts": 1}
                              for i in range(n)])
    for job in queue.claim(qname, "w", limit=n):
        assert queue.fail(job, "boom", retry_in=None)
    assert counts(queue, qname)["dead"] == n
    return ids


def test_retry_many_is_bounded_and_touches_only_its_queue(queue: portq.Queue,
                                                          qname: str) -> None:
    ids = _dead_jobs(queue, qname, 5)
    other = _dead_jobs(queue, qname + "-other", 2)
    assert queue.retry_many(qname, states=["dead"], limit=3, extra_attempts=2) == 3
    c = counts(queue, qname)
    assert (c["ready"], c["dead"]) == (3, 2)
    assert [r.id for r in queue.jobs("ready", queue=qname)] == ids[:3], "oldest id first"
    assert {r.max_attempts for r in queue.jobs("ready", queue=qname)} == {3}
    assert queue.retry_many(qname, states=["dead"], limit=3) == 2
    assert queue.retry_many(qname, states=["dead"], limit=3) == 0
    assert counts(queue, qname + "-other")["dead"] == len(other)
    claimed = queue.claim(qname, "w", limit=10)
    assert sorted(j.id for j in claimed) == ids and {j.attempt for j in claimed} == {2}
    with pytest.raises(portq.ConfigurationError, match="dead, cancelled"):
        queue.retry_many(qname, states=["ready"])


def test_cancel_many_ready_and_running_fences_the_owner(queue: portq.Queue,
                                                        qname: str) -> None:
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(4)])
    (running,) = queue.claim(qname, "w", limit=1)
    assert queue.cancel_many(qname, states=["ready"], limit=2) == 2
    assert counts(queue, qname)["cancelled"] == 2 and counts(queue, qname)["running"] == 1
    assert queue.cancel_many(qname, states=["ready"], limit=10) == 1
    assert queue.cancel_many(qname, states=["running"], limit=10) == 1
    assert not queue.complete(running), "the cancelled job's owner still completed it"
    assert {r.id for r in queue.jobs("cancelled", queue=qname)} == set(ids)
    with pytest.raises(portq.ConfigurationError, match="ready, running"):
        queue.cancel_many(qname, states=["dead"])


def test_concurrent_bulk_retries_retry_each_job_once(queue: portq.Queue, qname: str) -> None:
    ids = _dead_jobs(queue, qname, 40)
    results: list[int] = []
    lock = threading.Lock()

    def drain() -> None:
        while True:
            n = queue.retry_many(qname, states=["dead"], limit=3, extra_attempts=1)
            with lock:
                results.append(n)
            if n == 0 and counts(queue, qname)["dead"] == 0:
                return

    threads = [threading.Thread(target=drain) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(results) == len(ids), "a dead job was retried twice or not at all"
    assert {r.max_attempts for r in queue.jobs("ready", queue=qname, limit=100)} == {2}
