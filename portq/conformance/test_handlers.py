"""Handlers of every kind run exactly once per claim, on either worker: a plain ``def`` or
an ``async def`` (or a callable object, or a plain function returning a coroutine) in the
sync :class:`portq.Worker` and in :class:`portq.aio.AsyncWorker`; a handler that cannot
run is refused when the worker is made, before any job is claimed.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import portq
from portq import aio
from portq.conformance.helpers import counts, quiet_worker, running, wait_until
from portq.job import Job
from portq.retry import Backoff


class Calls:
    """What the handlers did: one entry per call (job id, attempt, thread, event loop)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, str, int | None]] = []
        self.active = self.most = 0
        self._lock = threading.Lock()

    def enter(self, job: Job) -> None:
        try:
            loop: int | None = id(asyncio.get_running_loop())
        except RuntimeError:
            loop = None
        with self._lock:
            self.calls.append((job.id, job.attempt, threading.current_thread().name, loop))
            self.active += 1
            self.most = max(self.most, self.active)

    def leave(self, job: Job) -> None:
        with self._lock:
            self.active -= 1
        if job.payload == "flaky" and job.attempt == 1:
            raise RuntimeError("flaky handler: first attempt fails")

    def per_job(self) -> Counter[int]:
        return Counter(job_id for job_id, *_ in self.calls)


def async_handlers(calls: Calls, seconds: float) -> dict[str, Callable[[Job], Any]]:
    """The ways to write an async handler: each awaits, so it only has its effect when
    something runs it on an event loop."""

    async def handle(job: Job) -> None:
        calls.enter(job)
        await asyncio.sleep(seconds)
        calls.leave(job)

    class AsyncCallable:
        async def __call__(self, job: Job) -> None:
            await handle(job)

    def returns_a_coroutine(job: Job) -> Any:  # e.g. a decorator that forgot to be async
        return handle(job)

    return {"async-def": handle, "async-callable": AsyncCallable(),
            "def-returning-coroutine": returns_a_coroutine}


def enqueue_jobs(queue: portq.Queue, qname: str, n: int) -> tuple[list[int], int]:
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(n)])
    return ids, queue.enqueue(qname, "flaky")


def assert_each_ran_once_and_flaky_twice(queue: portq.Queue, qname: str, calls: Calls,
                                         ids: list[int], flaky: int) -> None:
    assert calls.per_job() == Counter({**dict.fromkeys(ids, 1), flaky: 2})
    c = counts(queue, qname)
    assert (c["succeeded"], c["ready"], c["running"], c["dead"]) == (len(ids) + 1, 0, 0, 0)
    done = {r.id: r.attempts for r in queue.jobs("succeeded", queue=qname, limit=100)}
    assert done == {**dict.fromkeys(ids, 1), flaky: 2}
    ((attempt, _worker, error),) = queue.job_errors(flaky)
    assert attempt == 1 and "flaky handler: first attempt fails" in error


@pytest.mark.parametrize("kind", ["async-def", "async-callable", "def-returning-coroutine"])
def test_sync_worker_runs_async_handlers_once_on_its_threads_loops(
        queue: portq.Queue, qname: str, kind: str) -> None:
    """The coroutine runs on an event loop owned by the handler thread (one loop per
    thread, kept for its next jobs); a raising coroutine retries like a raising def."""
    ids, flaky = enqueue_jobs(queue, qname, 12)
    calls = Calls()
    handler = async_handlers(calls, 0.02)[kind]
    worker = quiet_worker(queue, qname, handler, concurrency=3,
                          backoff=Backoff("fixed", 0.0), idle_min=0.01, idle_max=0.05)
    with running(worker):
        assert wait_until(lambda: counts(queue, qname)["succeeded"] == 13, timeout=30), \
            counts(queue, qname)
    assert_each_ran_once_and_flaky_twice(queue, qname, calls, ids, flaky)
    assert (worker.counters.succeeded, worker.counters.retried, worker.counters.lost) == \
        (13, 1, 0)
    loops_of: dict[str, set[int | None]] = {}
    for _id, _attempt, thread, loop in calls.calls:
        loops_of.setdefault(thread, set()).add(loop)
    assert all(thread.startswith("portq-handler-") for thread in loops_of), loops_of
    assert all(len(loops) == 1 and None not in loops for loops in loops_of.values()), loops_of
    assert len({loop for loops in loops_of.values() for loop in loops}) == len(loops_of)
    assert 1 < calls.most <= 3


def test_async_worker_runs_plain_handlers_once_in_threads(engine_url: str,
                                                          queue: portq.Queue,
                                                          qname: str) -> None:
    """A ``def`` handler runs in a thread of its own, never on the event loop, so it
    neither blocks the loop nor starves portq's own calls: more blocking handlers than
    asyncio's default thread pool holds, each outliving the lease, keep their leases."""
    default_pool = min(32, (os.cpu_count() or 1) + 4)  # asyncio.to_thread's executor
    concurrency = default_pool + 1
    ids, flaky = enqueue_jobs(queue, qname, 2 * concurrency)
    calls = Calls()

    def handler(job: Job) -> None:
        calls.enter(job)
        time.sleep(1.3)  # blocking, longer than the 0.9 s lease: only renewals keep it
        calls.leave(job)

    async def main() -> portq.worker.WorkerCounters:
        async with await aio.connect(engine_url, prefix=queue.backend.prefix,
                                     pool_size=8) as q:
            worker = aio.AsyncWorker(q, qname, handler, concurrency=concurrency, lease=0.9,
                                     burst=True, backoff=Backoff("fixed", 0.0),
                                     idle_min=0.01, idle_max=0.1)
            return await asyncio.wait_for(worker.run(), 120)

    counters = asyncio.run(main())
    assert_each_ran_once_and_flaky_twice(queue, qname, calls, ids, flaky)
    assert (counters.succeeded, counters.retried, counters.lost) == (len(ids) + 1, 1, 0)
    assert all(loop is None for *_, loop in calls.calls), "a def handler ran on the loop"
    assert calls.most == concurrency


class NotAHandler:
    pass


def generator_handler(job: Job) -> Iterator[None]:
    yield  # calling it only makes a generator: its body would never run


async def async_generator_handler(job: Job) -> Any:
    yield None


@pytest.mark.parametrize(("handler", "message"), [
    (42, "handler 42 is not callable"),
    (NotAHandler(), "is not callable"),
    (generator_handler, "generator_handler is a generator function"),
    (async_generator_handler, "async_generator_handler is an async generator function"),
])
def test_handlers_that_cannot_run_are_refused_before_any_claim(
        engine_url: str, queue: portq.Queue, qname: str, handler: Any, message: str) -> None:
    queue.enqueue(qname, "must stay ready")
    with pytest.raises(portq.ConfigurationError, match=message):
        quiet_worker(queue, qname, handler)

    async def make_async_worker() -> None:
        async with await aio.connect(engine_url, prefix=queue.backend.prefix) as q:
            aio.AsyncWorker(q, qname, handler)
    with pytest.raises(portq.ConfigurationError, match=message):
        asyncio.run(make_async_worker())
    c = counts(queue, qname)
    assert (c["ready"], c["running"]) == (1, 0)

