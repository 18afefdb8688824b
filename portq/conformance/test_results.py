"""Stored results (migration 5): a job's return value is kept with the succeeded job, read by
id, refused past the size limit without harm to the job, fenced like every other write of a
claim, and deleted with the job by prune."""

from __future__ import annotations

import time
from typing import Any

import pytest

import portq
from portq.conformance.helpers import counts, quiet_worker, running, wait_until
from portq.errors import ResultError
from portq.job import Job

VALUE = {"total": 12.5, "lines": [1, "é", None, True], "nested": {"k": "v" * 300}}


def _result_rows(queue: portq.Queue, job_id: int) -> int:
    backend = queue.backend
    sql = f"SELECT COUNT(*) FROM {backend.prefix}result WHERE job_id = :job_id"
    return int(backend.run("count_results", lambda cur: backend.execute(
        cur, sql, {"job_id": job_id}).fetchone()[0], write=False))


def _claim_one(queue: portq.Queue, qname: str, worker: str = "w", lease: float = 30) -> Job:
    (job,) = queue.claim(qname, worker, limit=1, lease=lease)
    return job


@pytest.mark.parametrize("value", [VALUE, 42, "text", [], 0, False],
                         ids=["object", "int", "str", "empty-list", "zero", "false"])
def test_result_round_trips_once_the_job_succeeded(queue: portq.Queue, qname: str,
                                                   value: Any) -> None:
    job_id = queue.enqueue(qname, "x")
    job = _claim_one(queue, qname)
    assert queue.store_result(job, value) is True
    assert queue.result(job_id) is None, "a result showed before the job succeeded"
    assert queue.complete(job) is True
    assert queue.result(job_id) == value
    assert _result_rows(queue, job_id) == 1


def test_no_result_reads_as_none(queue: portq.Queue, qname: str) -> None:
    job_id = queue.enqueue(qname, "x")
    assert queue.result(job_id) is None  # ready
    assert queue.complete(_claim_one(queue, qname)) is True
    assert queue.result(job_id) is None  # succeeded without a result
    assert queue.result(2**31 - 2) is None  # no such job


def test_too_large_result_is_refused_and_the_job_is_unharmed(queue: portq.Queue,
                                                            qname: str) -> None:
    small = portq.Queue(queue.backend, max_result_bytes=100)
    job_id = small.enqueue(qname, "x")
    job = _claim_one(small, qname)
    with pytest.raises(ResultError, match=r"result is \d+ bytes of JSON, over the limit of "
                                          r"100 \(max_result_bytes\)"):
        small.store_result(job, {"blob": "x" * 200})
    with pytest.raises(ResultError, match="not JSON-serialisable"):
        small.store_result(job, {"when": object()})
    assert _result_rows(small, job_id) == 0
    assert small.renew(job) is True, "the refused result disturbed the claim"
    assert small.store_result(job, {"ok": 1}) is True
    assert small.complete(job) is True
    assert small.result(job_id) == {"ok": 1}


def test_stale_generation_cannot_store_a_result(queue: portq.Queue, qname: str) -> None:
    job_id = queue.enqueue(qname, "x", max_attempts=5)
    a = _claim_one(queue, qname, "worker-a", lease=0.3)
    assert queue.store_result(a, "from a, generation 1") is True
    time.sleep(0.55)
    assert queue.store_result(a, "expired") is False, "stored under an expired lease"
    assert queue.reap(limit=10_000, delay=0) >= 1
    b = _claim_one(queue, qname, "worker-b")
    assert b.id == job_id and b.attempt == a.attempt + 1
    assert queue.store_result(b, "from b") is True
    assert queue.store_result(a, "late a") is False
    assert queue.complete(a) is False
    assert queue.complete(b) is True
    assert queue.result(job_id) == "from b"
    assert _result_rows(queue, job_id) == 1


def test_results_of_a_batch_are_stored_in_one_transaction_each_fenced(
        queue: portq.Queue, qname: str) -> None:
    """``Backend.store_results`` (the worker's writer, one transaction a batch): each
    claim's result is stored only while it owns its job, and a stale claim in the batch
    does not stop the others."""
    ids = [queue.enqueue(qname, i, max_attempts=5) for i in range(4)]
    jobs = queue.claim(qname, "w", limit=4, lease=30)
    assert sorted(j.id for j in jobs) == sorted(ids)
    stale = jobs[1]
    assert queue.release(stale) is True  # its claim no longer owns the job
    batch = []
    for job in reversed(jobs):
        assert job.claim is not None
        batch.append((job.claim, queue.dump_result({"n": job.payload})))
    assert queue.backend.store_results(batch) == [j is not stale for j in reversed(jobs)]
    assert queue.backend.store_results([]) == []
    for job in jobs:
        assert queue.complete(job) is (job is not stale)
    for job in jobs:
        assert queue.result(job.id) == (None if job is stale else {"n": job.payload})
        assert _result_rows(queue, job.id) == (0 if job is stale else 1)


def test_prune_deletes_the_result_with_the_job(queue: portq.Queue, qname: str) -> None:
    job_id = queue.enqueue(qname, "x")
    job = _claim_one(queue, qname)
    assert queue.store_result(job, VALUE) and queue.complete(job)
    assert _result_rows(queue, job_id) == 1
    time.sleep(0.05)
    assert queue.prune(0, queue=qname) == 1
    assert _result_rows(queue, job_id) == 0
    assert queue.result(job_id) is None


def test_worker_stores_a_handlers_return_value(queue: portq.Queue, qname: str) -> None:
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(4)])

    def handler(job: Job) -> Any:
        return None if job.payload == 0 else {"square": job.payload ** 2}
    worker = quiet_worker(queue, qname, handler, concurrency=2, idle_max=0.1)
    with running(worker):
        assert wait_until(lambda: counts(queue, qname)["succeeded"] == 4, timeout=30)
    assert [queue.result(i) for i in ids] == [None, {"square": 1}, {"square": 4},
                                              {"square": 9}]
    assert _result_rows(queue, ids[0]) == 0, "a None return value stored a row"


def test_worker_sends_a_job_with_an_unstorable_result_to_dead(queue: portq.Queue,
                                                              qname: str) -> None:
    small = portq.Queue(queue.backend, max_result_bytes=50)
    job_id = small.enqueue(qname, "x", max_attempts=3)
    worker = quiet_worker(small, qname, lambda job: "y" * 100, idle_max=0.1)
    with running(worker):
        assert wait_until(lambda: counts(small, qname)["dead"] == 1, timeout=30)
    (dead,) = small.jobs("dead", queue=qname)
    assert dead.id == job_id and dead.attempts == 1, "an unstorable result was retried"
    assert "max_result_bytes" in (dead.last_error or "")
    assert _result_rows(small, job_id) == 0


#: every test here runs on both worker fronts (Worker, AsyncWorker): see plugin.FRONTS
WORKER_FRONTS = True
