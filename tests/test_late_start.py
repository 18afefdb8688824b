"""The asyncio front's plain handlers start on threads of its own: a rate-limited job
whose handler thread came after its claim's guard is given back unstarted, not run late
(the start check on the loop passed, but the thread took 0.3 s to run it)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import portq
from portq import aio
from portq.conformance.plugin import TEST_PREFIX
from portq.handler import HandlerThreads
from portq.job import Job
from portq.runtime.counters import WorkerCounters


def test_a_plain_handler_whose_thread_comes_after_the_guard_is_given_back(
        engine_url: str, queue: portq.Queue, qname: str, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """3 per 1 s (a guard of 50 ms); each new handler thread waits 0.3 s before its first
    call: the first claim's 3 jobs are given back, attempt and all, and run once each in
    a later claim, on threads that were idle (no wait), every start before its guard."""
    n = 3
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(n)])
    queue.set_rate_limit(qname, n, 1.0)
    slow_threads: set[int] = set()
    serve = HandlerThreads._serve

    def slow_serve(self: HandlerThreads) -> None:
        slow_threads.add(threading.get_ident())
        time.sleep(0.3)
        serve(self)
    monkeypatch.setattr(HandlerThreads, "_serve", slow_serve)
    starts: list[tuple[int, int, float, float | None]] = []

    def handler(job: Job) -> None:
        starts.append((job.id, job.attempt, time.monotonic(), job.start_by))

    async def main() -> WorkerCounters:
        async with await aio.connect(engine_url, prefix=TEST_PREFIX) as q:
            worker = aio.AsyncWorker(q, qname, handler, concurrency=n, burst=True,
                                     idle_min=0.01, idle_max=0.05, reap_interval=None,
                                     prune_interval=None, registry_interval=None)
            return await asyncio.wait_for(worker.run(), 60)
    counters = asyncio.run(main())
    assert len(slow_threads) == n
    assert [s for s in starts if s[3] is None or s[2] > s[3]] == []
    assert counters.succeeded == n and counters.released >= n, counters
    done = {j.id: j for j in queue.jobs("succeeded", queue=qname)}
    assert sorted((s[0], s[1]) for s in starts) == sorted(
        (i, j.attempts) for i, j in done.items())
    assert sum(j.attempts - 1 for j in done.values()) == counters.released
    assert all(j.max_attempts == 25 + j.attempts - 1 for j in done.values())
