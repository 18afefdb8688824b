"""portq.testing on every engine: assertions over what is enqueued, and drain() running
jobs inline with the worker's outcomes; the pytest fixtures of the pytest11 entry point."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import portq
from portq.conformance.helpers import counts
from portq.job import Job
from portq.testing import assert_enqueued, contains, drain, enqueued, refute_enqueued


def test_contains_is_a_recursive_subset() -> None:
    assert contains({"a": 1, "b": {"c": [1, 2], "d": 3}}, {"b": {"c": [1, 2]}})
    assert not contains({"a": 1}, {"a": 2})
    assert not contains({"a": 1}, {"b": None})
    assert not contains([1, 2], {"a": 1})
    assert contains(5, 5) and not contains([1, 2], [1])


def test_assert_and_refute_enqueued(queue: portq.Queue, qname: str) -> None:
    other = f"{qname}-other"
    queue.enqueue(qname, {"to": "ada@example.com", "kind": "welcome"}, key=f"{qname}:ada")
    queue.enqueue(qname, {"to": "bob@example.com", "kind": "welcome"}, delay=3600)
    queue.enqueue(other, {"to": "ada@example.com"})
    (ada,) = assert_enqueued(queue, queue_name=qname, payload_subset={"to": "ada@example.com"})
    assert ada.key == f"{qname}:ada"
    assert_enqueued(queue, queue_name=qname, payload_subset={"kind": "welcome"}, count=2)
    assert_enqueued(queue, queue_name=qname, key=f"{qname}:ada", count=1)
    refute_enqueued(queue, queue_name=qname, payload_subset={"to": "eve@example.com"})
    with pytest.raises(AssertionError, match=r"expected a job enqueued in queue .* with "
                                             r"payload containing \{'to': 'eve@") as info:
        assert_enqueued(queue, queue_name=qname, payload_subset={"to": "eve@example.com"})
    assert "ada@example.com" in str(info.value), "the message does not list what is there"
    with pytest.raises(AssertionError, match="expected 1 job"):
        assert_enqueued(queue, queue_name=qname, payload_subset={"kind": "welcome"}, count=1)
    with pytest.raises(AssertionError, match="expected no job"):
        refute_enqueued(queue, queue_name=qname, payload_subset={"to": "bob@example.com"})
    # finished jobs are not "enqueued"
    (job,) = queue.claim(other, "w", limit=1)
    refute_enqueued(queue, queue_name=other)
    assert queue.complete(job)
    refute_enqueued(queue, queue_name=other)


def test_drain_runs_jobs_inline_with_the_workers_outcomes(queue: portq.Queue,
                                                         qname: str) -> None:
    threads: set[int] = set()
    seen: list[Any] = []

    def handler(job: Job) -> Any:
        threads.add(threading.get_ident())
        seen.append(job.payload)
        if job.payload == "permanent":
            raise portq.Permanent("bad input")
        if job.payload == "flaky":  # an hour ahead: a full-jitter backoff may be due at
            raise portq.RetryAfter(3600, "try later")  # once and run again in this drain
        if job.payload == "chain":  # a job enqueued by a job is drained too
            queue.enqueue(qname, "child")
        return {"echo": job.payload} if job.payload != "none" else None

    ids = queue.enqueue_many([{"queue": qname, "payload": p, "max_attempts": 3}
                              for p in ("ok", "none", "permanent", "flaky", "chain")])
    result = drain(queue, {qname: handler})
    assert threads == {threading.get_ident()}, "drain ran a handler on another thread"
    assert sorted(map(str, seen)) == sorted(["ok", "none", "permanent", "flaky", "chain",
                                             "child"])
    assert (result.succeeded, result.dead, result.retried, result.lost) == (4, 1, 1, 0)
    assert [i for i, _ in result.errors] == [ids[2], ids[3]]
    assert "try later" in result.errors[1][1]
    assert queue.result(ids[0]) == {"echo": "ok"} and queue.result(ids[1]) is None
    c = counts(queue, qname)
    assert (c["succeeded"], c["dead"], c["scheduled"], c["ready"]) == (4, 1, 1, 0)
    assert drain(queue, handler, queues=qname).ran == 0, "the retry ran before its time"


def test_drain_raise_errors_and_bounds(queue: portq.Queue, qname: str) -> None:
    queue.enqueue(qname, "x", max_attempts=1)

    def boom(job: Job) -> None:
        raise KeyError("missing")
    with pytest.raises(KeyError, match="missing"):
        drain(queue, boom, queues=[qname], raise_errors=True)
    assert counts(queue, qname)["dead"] == 1, "the failure was not recorded before raising"

    def forever(job: Job) -> None:
        queue.enqueue(qname, job.payload + 1)
    queue.enqueue(qname, 0)
    with pytest.raises(portq.ConfigurationError, match="max_jobs=5"):
        drain(queue, forever, queues=qname, max_jobs=5)
    assert counts(queue, qname)["running"] == 0, "a claimed job was left running"
    with pytest.raises(portq.ConfigurationError, match="no handler for queue"):
        drain(queue, {"elsewhere": forever}, queues=[qname])


def test_drain_runs_async_handlers(queue: portq.Queue, qname: str) -> None:
    job_id = queue.enqueue(qname, 21)

    async def double(job: Job) -> int:
        return int(job.payload) * 2
    assert drain(queue, double, queues=qname).succeeded == 1
    assert queue.result(job_id) == 42


def test_pytest_fixture_gives_a_migrated_queue(portq_queue: portq.Queue) -> None:
    assert portq_queue.backend.schema_version() == portq_queue.backend.latest_version()
    portq_queue.enqueue("emails", {"to": "ada"})
    assert [j.payload for j in enqueued(portq_queue, queue_name="emails")] == [{"to": "ada"}]


def test_drain_runs_the_middleware_a_worker_would(own_queue: portq.Queue, qname: str) -> None:
    seen: list[str] = []

    def outer(job: Job, call_next: Any) -> Any:
        seen.append(f"outer:{job.payload}")
        return {"wrapped": call_next()}

    async def inner(job: Job, call_next: Any) -> Any:
        seen.append(f"inner:{job.payload}")
        return await call_next()

    async def handler(job: Job) -> int:
        job.progress(0.5, "half")
        return int(job.payload) * 2

    own_queue.add_middleware(outer)
    job_id = own_queue.enqueue(qname, 4)
    result = drain(own_queue, handler, queues=qname, middleware=[inner])
    assert result.succeeded == 1
    assert seen == ["outer:4", "inner:4"]
    assert own_queue.result(job_id) == {"wrapped": 8}
