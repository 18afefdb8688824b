"""Middleware around handlers and progress reports from them, on both worker fronts."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import portq
from portq.conformance.helpers import counts, quiet_worker
from portq.job import Job
from portq.tasks import TaskRouter

#: every test here runs on both worker fronts (Worker, AsyncWorker): see plugin.FRONTS
WORKER_FRONTS = True


@pytest.fixture
def queue(own_queue: portq.Queue) -> portq.Queue:
    """This module's tests add hooks and middleware: each gets a Queue of its own."""
    return own_queue


def test_middleware_wraps_the_handler_in_order_and_sees_its_outcome(queue: portq.Queue,
                                                                    qname: str) -> None:
    calls: list[tuple[Any, ...]] = []

    def outer(job: Job, call_next: Callable[[], Any]) -> Any:  # plain
        calls.append(("outer-in", job.id, job.queue, job.attempt, job.payload))
        try:
            result = call_next()
        except Exception as exc:
            calls.append(("outer-error", job.id, type(exc).__name__))
            raise
        calls.append(("outer-out", job.id, result))
        return result

    async def inner(job: Job, call_next: Callable[[], Awaitable[Any]]) -> Any:  # async
        calls.append(("inner-in", job.id))
        result = await call_next()
        calls.append(("inner-out", job.id, result))
        return result

    def handler(job: Job) -> Any:
        calls.append(("handler", job.id))
        if job.payload == "boom":
            raise ValueError("boom")
        return {"doubled": job.payload * 2}

    ok = queue.enqueue(qname, 21)
    bad = queue.enqueue(qname, "boom", max_attempts=1)
    quiet_worker(queue, qname, handler, middleware=[outer, inner], burst=True).run()
    assert [c for c in calls if c[1] == ok] == [
        ("outer-in", ok, qname, 1, 21), ("inner-in", ok), ("handler", ok),
        ("inner-out", ok, {"doubled": 42}), ("outer-out", ok, {"doubled": 42})]
    assert [c for c in calls if c[1] == bad] == [
        ("outer-in", bad, qname, 1, "boom"), ("inner-in", bad), ("handler", bad),
        ("outer-error", bad, "ValueError")]
    assert queue.result(ok) == {"doubled": 42}
    record = queue.job(bad)
    assert record is not None and record.state == "dead"
    assert "ValueError: boom" in (record.last_error or "")


def test_middleware_can_short_circuit_and_fail_a_job(queue: portq.Queue, qname: str) -> None:
    ran: list[int] = []

    async def cache(job: Job, call_next: Callable[[], Awaitable[Any]]) -> Any:
        if job.payload == "cached":
            return "from cache"  # the handler does not run
        if job.payload == "refused":
            raise portq.Permanent("refused by middleware")
        return await call_next()

    def handler(job: Job) -> str:
        ran.append(job.id)
        return "ran"

    cached = queue.enqueue(qname, "cached")
    refused = queue.enqueue(qname, "refused")
    plain = queue.enqueue(qname, "plain")
    quiet_worker(queue, qname, handler, middleware=[cache], burst=True).run()
    assert ran == [plain]
    assert queue.result(cached) == "from cache" and queue.result(plain) == "ran"
    record = queue.job(refused)
    assert record is not None and record.state == "dead"
    assert "refused by middleware" in (record.last_error or "")


def test_queue_worker_and_task_middleware_nest_in_that_order(queue: portq.Queue,
                                                             qname: str) -> None:
    order: list[str] = []

    def tagged(tag: str) -> Callable[[Job, Callable[[], Any]], Any]:
        def mw(job: Job, call_next: Callable[[], Any]) -> Any:
            order.append(f"{tag}:{job.task}")
            return call_next()
        return mw

    name = f"conformance.{uuid.uuid4().hex[:8]}"

    def add(a: int, b: int) -> int:
        order.append("task")
        return a + b

    task = portq.task(queue=qname, name=name, middleware=[tagged("task")])(add)
    queue.add_middleware(tagged("queue"))
    job_id = task.enqueue(2, 3, using=queue)
    quiet_worker(queue, qname, TaskRouter({name: task}), middleware=[tagged("worker")],
                 burst=True).run()
    assert order == [f"queue:{name}", f"worker:{name}", f"task:{name}", "task"]
    assert queue.result(job_id) == 5


def test_progress_is_written_at_most_once_a_second_latest_kept(queue: portq.Queue,
                                                              qname: str) -> None:
    """Reports never wait for the database; the first is written at once, later ones at
    most once a second per job (the latest then), each while the job runs."""
    seen: dict[str, Any] = {}

    def handler(job: Job) -> None:
        slowest = 0.0
        for i in range(1, 31):
            started = time.perf_counter()
            job.progress(i / 30, f"step {i} of 30")
            slowest = max(slowest, time.perf_counter() - started)
            time.sleep(0.05)
            if i == 10:  # about 0.5 s in: only the first report is written
                seen["mid"] = queue.job(job.id)
        seen["slowest"] = slowest

    job_id = queue.enqueue(qname, None)
    worker = quiet_worker(queue, qname, handler, burst=True)
    started = time.monotonic()
    worker.run()
    elapsed = time.monotonic() - started
    mid = seen["mid"]
    assert mid.state == "running"
    assert (mid.progress, mid.progress_note) == (1 / 30, "step 1 of 30")
    assert mid.progress_at is not None
    assert seen["slowest"] < 0.05, "job.progress waited"
    writer = worker.runtime.handler.progress
    assert writer is not None and writer.refused == 0
    assert 2 <= writer.written == writer.batches <= elapsed + 1
    done = queue.job(job_id)
    assert done is not None and done.state == "succeeded"
    step = int((done.progress_note or "step 0").split()[1])
    assert step > 10 and done.progress == step / 30  # a later report replaced the first


def test_progress_of_many_jobs_is_one_write_a_second(queue: portq.Queue, qname: str) -> None:
    """Whatever the number of jobs reporting, a worker sends at most one progress
    transaction a second, holding each job's latest report."""
    def handler(job: Job) -> None:
        for i in range(1, 41):
            job.progress(i / 40, f"job {job.id} step {i}")
            time.sleep(0.04)

    ids = queue.enqueue_many([{"queue": qname, "payload": n} for n in range(4)])
    worker = quiet_worker(queue, qname, handler, burst=True, concurrency=4)
    started = time.monotonic()
    worker.run()
    elapsed = time.monotonic() - started
    writer = worker.runtime.handler.progress
    assert writer is not None and writer.refused == 0
    assert 1 <= writer.batches <= elapsed + 1
    assert writer.written >= len(ids)  # every job's report got written at least once
    for job_id in ids:
        record = queue.job(job_id)
        assert record is not None and record.state == "succeeded"
        assert (record.progress_note or "").startswith(f"job {job_id} step ")


def test_progress_of_an_async_handler_does_not_block_the_loop(queue: portq.Queue,
                                                            qname: str) -> None:
    seen: dict[str, float] = {}

    async def handler(job: Job) -> None:
        import asyncio
        slowest = 0.0
        for i in range(20):
            started = time.perf_counter()
            job.progress(None, f"waiting {i}")
            slowest = max(slowest, time.perf_counter() - started)
            await asyncio.sleep(0.01)
        seen["slowest"] = slowest

    job_id = queue.enqueue(qname, None)
    quiet_worker(queue, qname, handler, burst=True).run()
    assert seen["slowest"] < 0.05
    record = queue.job(job_id)
    assert record is not None and record.progress is None
    assert (record.progress_note or "").startswith("waiting ")
    assert counts(queue, qname)["succeeded"] == 1
