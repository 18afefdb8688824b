"""Where an I/O-bound job's time goes on the asyncio front, against asyncio alone.

    .venv/bin/python benchmarks/io_lateness.py [URL] [--rounds 5] [--jobs 20000]

In each round, one after the other: 40 bare asyncio tasks each awaiting
``asyncio.sleep(0.005)`` in a loop (``portq.bench.sleep_ceiling``'s workload), then a
:class:`portq.aio.AsyncWorker` of 40 slots on PostgreSQL whose handler awaits the same
sleep. For every job it records when its sleep began and when its task resumed, and it
records every return of the event loop's selector; it reports, as medians of the rounds
with their range:

* ``late``: how long after its due time (start + 5 ms) a sleeping task resumed, split into
  ``wake`` (due time to the selector's return that preceded the resumption: asyncio's
  epoll selector rounds each timeout up to a whole millisecond, counted from whenever the
  loop last computed it) and ``queued`` (that return to the task's resumption: the loop
  serving the tasks woken before it);
* ``gap``: on the AsyncWorker, from a job's resumption to the same task's next sleep
  (finishing one job and starting the next);
* jobs/s.

A diagnostic: it wraps ``selectors.EpollSelector.select`` of this process to time it.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import functools
import itertools
import os
import selectors
import statistics
import time
from collections.abc import Callable
from typing import Any

import portq
from portq import bench
from portq.job import Job

SLOTS, SLEEP_S = 40, 0.005
#: (selector return, perf_counter) of every select in this process
_returns: list[float] = []
#: (task id, sleep start, resumed) of every job
_jobs: list[tuple[int, float, float]] = []


def _timed_select(select: Any) -> Any:
    def timed(self: selectors.EpollSelector, timeout: float | None = None) -> Any:
        ready = select(self, timeout)
        _returns.append(time.perf_counter())
        return ready
    return timed


selectors.EpollSelector.select = _timed_select(selectors.EpollSelector.select)  # type: ignore[method-assign]


async def _sleep_once() -> None:
    task = asyncio.current_task()
    began = time.perf_counter()
    await asyncio.sleep(SLEEP_S)
    _jobs.append((id(task), began, time.perf_counter()))


async def handler(job: Job) -> None:
    """The AsyncWorker's job: one recorded sleep."""
    await _sleep_once()


def bare(jobs: int) -> float:
    """``SLOTS`` asyncio tasks sleeping ``jobs`` times between them: jobs/s."""
    left = [jobs]

    async def serve() -> None:
        while left[0] > 0:
            left[0] -= 1
            await _sleep_once()

    async def run_all() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(serve() for _ in range(SLOTS)))
        return jobs / (time.perf_counter() - started)
    return asyncio.run(run_all())


def worker(queue: portq.Queue, url: str, jobs: int) -> float:
    """An AsyncWorker of ``SLOTS`` slots draining ``jobs`` recorded sleeps, as the
    benchmark runs it (``portq.bench.async_throughput_run``): jobs/s."""
    row = bench.async_throughput_run(queue, url, jobs, SLOTS, None, handler=handler)
    return float(row["jobs_per_s"])


def split() -> dict[str, float]:
    """Mean late, wake and queued ms of the recorded jobs, and the mean gap (ms) between
    one job's resumption and its task's next sleep; the records are then cleared."""
    late, wake, queued, gaps = [], [], [], []
    by_task: dict[int, list[tuple[float, float]]] = {}
    for task, began, resumed in _jobs:
        due = began + SLEEP_S
        i = bisect.bisect_right(_returns, resumed) - 1
        if i >= 0:
            late.append(resumed - due)
            wake.append(_returns[i] - due)
            queued.append(resumed - _returns[i])
        by_task.setdefault(task, []).append((began, resumed))
    for runs in by_task.values():
        runs.sort()
        gaps += [nxt[0] - cur[1] for cur, nxt in itertools.pairwise(runs)]
    _jobs.clear()
    _returns.clear()
    out = {k: 1000 * statistics.mean(v) for k, v in
           (("late", late), ("wake", wake), ("queued", queued)) if v}
    if gaps:
        out["gap"] = 1000 * statistics.mean(gaps)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default=os.environ.get(
        "PORTQ_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args()
    rows: dict[str, list[dict[str, float]]] = {"bare asyncio": [], "AsyncWorker": []}
    load = [os.getloadavg()[0]]
    with portq.connect(args.url, prefix=bench.BENCH_PREFIX, pool_size=16) as queue:
        queue.migrate()
        contenders: list[tuple[str, Callable[[], float]]] = [
            ("bare asyncio", functools.partial(bare, args.jobs)),
            ("AsyncWorker", functools.partial(worker, queue, args.url, args.jobs))]
        for n in range(args.rounds):
            for name, run in contenders:
                _jobs.clear()
                _returns.clear()
                rate = run()
                rows[name].append({"jobs/s": rate, **split()})
                print(f"round {n + 1} {name}: " + ", ".join(
                    f"{k} {v:,.3f}" for k, v in rows[name][-1].items()), flush=True)
            load.append(os.getloadavg()[0])
    print(f"medians of {args.rounds} interleaved rounds [min-max]; load average "
          f"{', '.join(f'{x:.1f}' for x in load)} (before, after each round):")
    for name, runs in rows.items():
        keys = [k for k in runs[0] if all(k in r for r in runs)]
        print(f"  {name}: " + "; ".join(
            f"{k} {statistics.median(r[k] for r in runs):,.3f} "
            f"[{min(r[k] for r in runs):,.3f}-{max(r[k] for r in runs):,.3f}]"
            for k in keys))


if __name__ == "__main__":
    main()
