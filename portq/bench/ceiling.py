"""The machine's own ceiling for an I/O-bound workload: what the same slots reach doing
nothing but the job's wait, with no queue at all (threads each calling ``time.sleep``, or
asyncio tasks each awaiting ``asyncio.sleep``). A front's share of the ideal (slots / wait)
counts the interpreter's and the clock's cost too; its share of this ceiling is what the
queue costs. asyncio's timers wait in whole milliseconds (its epoll selector rounds a
timeout up), so its ceiling is the lower one."""

from __future__ import annotations

import asyncio
import threading
import time

#: the fronts whose bare waits :func:`sleep_ceiling` measures
CEILING_FRONTS = ("threads", "asyncio")


def sleep_ceiling(front: str, slots: int, job_ms: float, jobs: int) -> float:
    """Jobs/s of ``slots`` threads (``front`` "threads") or asyncio tasks ("asyncio")
    that each wait ``job_ms`` per job, ``jobs`` jobs in all, taking them from one shared
    counter as a worker's slots take jobs from its line."""
    if front not in CEILING_FRONTS:
        raise ValueError(f"unknown front {front!r}; use {', '.join(CEILING_FRONTS)}")
    if slots < 1 or jobs < 1 or job_ms <= 0:
        raise ValueError("need slots >= 1, jobs >= 1 and job_ms > 0")
    wait = job_ms / 1000
    left = [jobs]
    if front == "threads":
        lock = threading.Lock()

        def serve() -> None:
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                time.sleep(wait)

        threads = [threading.Thread(target=serve, name=f"portq-ceiling-{i}")
                   for i in range(slots)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return jobs / (time.perf_counter() - started)

    async def serve_task() -> None:
        while left[0] > 0:
            left[0] -= 1
            await asyncio.sleep(wait)

    async def run_all() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(serve_task() for _ in range(slots)))
        return jobs / (time.perf_counter() - started)

    return asyncio.run(run_all())
