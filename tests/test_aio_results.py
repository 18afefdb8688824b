"""AsyncWorker stores an async handler's return value as the job's result; a job lost
while its handler ran is counted lost once, and its value is not stored."""

from __future__ import annotations

import asyncio
from typing import Any

import portq
from portq import aio
from portq.conformance.helpers import OTHER_OWNER, take_away
from portq.conformance.plugin import TEST_PREFIX
from portq.worker import WorkerCounters


def _run(url: str, body: Any) -> Any:
    async def main() -> Any:
        async with await aio.connect(url, prefix=TEST_PREFIX) as q:
            return await body(q)
    return asyncio.run(main())


def test_async_worker_stores_results_and_counts_a_lost_job_once(
        engine_url: str, queue: portq.Queue, qname: str) -> None:
    kept = queue.enqueue(qname, "keep")
    lost = queue.enqueue(qname, "lose")

    async def body(q: aio.AsyncQueue) -> WorkerCounters:
        release = asyncio.Event()

        async def handler(job: portq.Job) -> Any:
            if job.payload == "lose":
                await release.wait()
            return {"done": job.payload}
        worker = aio.AsyncWorker(q, qname, handler, concurrency=2, lease=0.9,
                                 idle_max=0.05, registry_interval=None)
        task = asyncio.create_task(worker.run())
        for _ in range(300):
            if await q.result(kept) is not None and worker.inflight == 1:
                break
            await asyncio.sleep(0.05)
        await asyncio.to_thread(take_away, queue, lost)  # another owner takes it
        for _ in range(100):
            if worker.counters.lost:
                break
            await asyncio.sleep(0.05)
        release.set()
        await asyncio.sleep(0.3)
        worker.stop()
        return await task
    counters = _run(engine_url, body)
    assert queue.result(kept) == {"done": "keep"}
    assert queue.result(lost) is None
    assert queue.job(lost).worker_id == OTHER_OWNER  # type: ignore[union-attr]
    assert (counters.succeeded, counters.lost) == (1, 1), counters
