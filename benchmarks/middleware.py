"""What middleware costs a worker: no-op jobs drained by a burst ``portq.Worker`` on SQLite,
with no middleware, an empty list, one pass-through middleware, and OpenTelemetry
(``portq.contrib.otel.instrument``: enqueue hooks writing the trace context, and a
CONSUMER span per job, recorded by an SDK TracerProvider with no exporter). Rounds are
interleaved (each round runs every variant once, in turn) and the median of the rounds is
reported, with the machine's load average before and after.

    python benchmarks/middleware.py [--jobs 2000] [--rounds 3] [--asyncio] [--json]

``--asyncio`` drains with a ``portq.aio.AsyncWorker`` instead (the same middleware: the
pass-through one is then ``async def``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import portq
from portq.job import Job

VARIANTS = ("none", "empty list", "one pass-through", "otel")


def noop(job: Job) -> None:
    """The handler: nothing."""


def passthrough(job: Job, call_next: Callable[[], Any]) -> Any:
    return call_next()


async def apassthrough(job: Job, call_next: Callable[[], Any]) -> Any:
    return await call_next()


async def anoop(job: Job) -> None:
    """The handler of the asyncio front: nothing."""


def drain(queue: portq.Queue, options: dict[str, Any], front: str) -> Any:
    if front == "asyncio":
        from portq.aio import AsyncQueue, AsyncWorker
        return asyncio.run(AsyncWorker(AsyncQueue(queue), "bench", anoop, **options).run())
    return portq.Worker(queue, "bench", noop, **options).run()


def one_run(variant: str, jobs: int, directory: str, n: int, front: str) -> float:
    """Jobs per second of one burst worker draining ``jobs`` no-op jobs."""
    url = f"sqlite:///{directory}/mw-{n}.db"
    queue = portq.connect(url)
    try:
        queue.migrate()
        options: dict[str, Any] = {"burst": True, "concurrency": 4, "reap_interval": None,
                                   "prune_interval": None, "registry_interval": None}
        if variant == "empty list":
            options["middleware"] = []
        elif variant == "one pass-through":
            options["middleware"] = [apassthrough if front == "asyncio" else passthrough]
        elif variant == "otel":
            from opentelemetry.sdk.trace import TracerProvider

            from portq.contrib import otel
            otel.instrument(queue, tracer_provider=TracerProvider())
        for start in range(0, jobs, 500):
            queue.enqueue_many([{"queue": "bench", "payload": i}
                                for i in range(start, min(jobs, start + 500))])
        started = time.perf_counter()
        counters = drain(queue, options, front)
        elapsed = time.perf_counter() - started
        assert counters.succeeded == jobs, (variant, counters)
        return jobs / elapsed
    finally:
        queue.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--asyncio", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    front = "asyncio" if args.asyncio else "threads"
    load_before = os.getloadavg()
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as directory:
        n = 0
        for _ in range(args.rounds):
            for variant in VARIANTS:
                n += 1
                rates[variant].append(one_run(variant, args.jobs, directory, n, front))
    load_after = os.getloadavg()
    base = statistics.median(rates["none"])
    report = {
        "engine": "sqlite", "front": front, "jobs": args.jobs, "rounds": args.rounds,
        "cores": os.cpu_count(), "load_before": load_before, "load_after": load_after,
        "variants": {v: {"median_jobs_per_s": round(statistics.median(r), 1),
                         "runs": [round(x, 1) for x in r],
                         "us_per_job_vs_none": round((1 / statistics.median(r) - 1 / base)
                                                     * 1e6, 1)}
                     for v, r in rates.items()}}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"SQLite, {front} front, {args.jobs} no-op jobs, {args.rounds} interleaved rounds, "
          f"{report['cores']} cores; load average before {load_before[0]:.2f} "
          f"{load_before[1]:.2f} {load_before[2]:.2f}, after {load_after[0]:.2f} "
          f"{load_after[1]:.2f} {load_after[2]:.2f}")
    for v, r in report["variants"].items():
        print(f"  {v:<18} median {r['median_jobs_per_s']:>8.1f} jobs/s "
              f"({r['us_per_job_vs_none']:+.1f} us/job vs none)  runs {r['runs']}")


if __name__ == "__main__":
    main()
