"""Jobs flowing: enqueue rates, claim + complete throughput with the sync Worker or the
AsyncWorker, and pickup latency of an idle worker."""

from __future__ import annotations

import functools
import math
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from portq.bench.cpu import meter
from portq.bench.table import Progress, settle
from portq.errors import ConfigurationError
from portq.job import Job
from portq.queue import Queue
from portq.worker import Worker

DEFAULT_WORKERS = (1, 2, 4, 8)
DEFAULT_BATCHES = (1, 20)
#: throughput modes: ``worker``, the sync Worker (it has one mode); ``async``, the
#: :class:`portq.aio.AsyncWorker` with ``concurrency`` = the worker count
MODES = ("worker", "async")
#: what runs when no mode is named
DEFAULT_MODES = ("worker",)
DEFAULT_JOBS = 20_000
BULK_CHUNK = 1_000
PICKUP_JOBS = 200
PICKUP_GAP_S = 0.020
PICKUP_QUIET_S = 3.0
PICKUP_AFTER_QUIET = 3


#: the options of every throughput run's worker, sync or async: drain and stop (burst), a
#: lease no run outlasts, short idle sleeps so that the drained check at the end costs
#: milliseconds, and no reaper or pruner
RUN_OPTIONS: dict[str, Any] = {"burst": True, "lease": 120, "idle_min": 0.005,
                               "idle_max": 0.05, "reap_interval": None,
                               "prune_interval": None}


def noop(job: Job) -> None:
    """The benchmark's job: nothing, so the queue's own cost is what is measured."""


def _sleep(seconds: float, job: Job) -> None:
    """An I/O-bound job: it waits ``seconds`` (a remote call), using no CPU."""
    time.sleep(seconds)


async def _async_sleep(seconds: float, job: Job) -> None:
    """An I/O-bound async job: it awaits ``seconds``."""
    import asyncio
    await asyncio.sleep(seconds)


def bulk_enqueue(queue: Queue, name: str, jobs: int, chunk: int = BULK_CHUNK) -> float:
    """Enqueue ``jobs`` no-op jobs with enqueue_many in chunks; return the seconds taken."""
    started = time.perf_counter()
    for start in range(0, jobs, chunk):
        queue.enqueue_many([{"queue": name, "payload": {"n": i}}
                            for i in range(start, min(jobs, start + chunk))])
    return time.perf_counter() - started


def mode_options(mode: str, batch: int, workers: int) -> dict[str, Any]:
    """The Worker options of a throughput mode: none (the Worker has one mode)."""
    if mode not in MODES or mode == "async":
        raise ConfigurationError(f"unknown throughput mode {mode!r}; use {', '.join(MODES)}")
    return {}


def clear_queue(queue: Queue, name: str, jobs: int) -> None:
    """Delete a run's finished jobs (up to ``jobs``). ``prune(0)`` deletes rows finished
    before the database's now; SQLite keeps milliseconds, so a job finished in this
    millisecond would stay: wait one out first."""
    time.sleep(0.002)
    queue.prune(0, limit=jobs, queue=name)


def throughput_run(queue: Queue, jobs: int, workers: int, batch: int | None,
                   progress: Progress | None = None, mode: str = "worker",
                   repeat: int = 1, job_ms: float = 0.0) -> dict[str, Any]:
    """Claim + complete ``jobs`` no-op jobs (or, with ``job_ms``, jobs that each sleep that
    long: an I/O-bound handler) with one Worker of ``workers`` threads, ``repeat`` times
    (each from a settled table); the median run is reported, with every run's jobs/s in
    ``runs`` and its bulk enqueue's jobs/s (:func:`bulk_enqueue`) in
    ``enqueue_jobs_per_s``."""
    options = mode_options(mode, batch or 0, workers)
    handler = noop if not job_ms else functools.partial(_sleep, job_ms / 1000)
    runs: list[tuple[float, int, float, dict[str, Any], float]] = []
    for _ in range(repeat):
        settle(queue.backend)
        name = f"bench-tp-{uuid.uuid4().hex[:8]}"
        enqueued_s = bulk_enqueue(queue, name, jobs)
        worker = Worker(queue, name, handler, concurrency=workers, batch=batch,
                        **RUN_OPTIONS, **options)
        with meter(queue.backend.engine) as cpu:
            thread = threading.Thread(target=cpu.tracked(worker.run),
                                      name="portq-bench-worker", daemon=True)
            started = time.perf_counter()
            thread.start()
            while thread.is_alive():
                thread.join(0.2)
                if progress:
                    progress(worker.counters.succeeded, jobs, time.perf_counter() - started)
            elapsed = time.perf_counter() - started
        done = worker.counters.succeeded
        clear_queue(queue, name, jobs + 1)
        runs.append((done / elapsed if elapsed > 0 else 0.0, done, elapsed, cpu.figures(done),
                     jobs / enqueued_s if enqueued_s > 0 else 0.0))
    rate, done, elapsed, figures, enqueued = \
        sorted(runs, key=lambda r: r[0])[(len(runs) - 1) // 2]
    return {"engine": queue.backend.engine, "mode": mode, "workers": workers, "batch": batch,
            **options, "jobs": jobs, "job_ms": job_ms, "succeeded": done,
            "seconds": round(elapsed, 4), "jobs_per_s": round(rate, 1),
            "runs": [round(r[0], 1) for r in runs], "cpu": figures,
            "enqueue_jobs_per_s": round(enqueued, 1)}


async def _async_noop(job: Job) -> None:
    """The async benchmark's job: nothing, awaited on the event loop."""


def async_throughput_run(queue: Queue, url: str, jobs: int, workers: int, batch: int | None,
                         progress: Progress | None = None, repeat: int = 1,
                         job_ms: float = 0.0,
                         handler: Callable[[Job], Awaitable[None]] | None = None,
                         ) -> dict[str, Any]:
    """:func:`throughput_run` with a :class:`portq.aio.AsyncWorker` of ``concurrency`` =
    ``workers`` and claim batch ``batch`` instead of the sync Worker: the same bulk enqueue
    through ``queue``, the same settled table, the same worker options
    (:data:`RUN_OPTIONS`), no tuning options. ``url`` (with its password: ``queue.url``
    has none) opens the AsyncQueue. ``handler``, when given, is the job instead of the
    no-op or ``job_ms`` wait (a diagnostic's own: benchmarks/io_lateness.py)."""
    import asyncio

    import portq.aio

    if handler is None:
        handler = _async_noop if not job_ms else \
            functools.partial(_async_sleep, job_ms / 1000)

    async def go() -> list[tuple[float, int, float, dict[str, Any]]]:
        aq = await portq.aio.connect(url, prefix=queue.backend.prefix,
                                     pool_size=queue.backend.pool.max_size)
        runs: list[tuple[float, int, float, dict[str, Any]]] = []
        try:
            for _ in range(repeat):
                settle(queue.backend)
                name = f"bench-tp-{uuid.uuid4().hex[:8]}"
                bulk_enqueue(queue, name, jobs)
                worker = portq.aio.AsyncWorker(aq, name, handler, concurrency=workers,
                                               batch=batch, registry_interval=None,
                                               **RUN_OPTIONS)
                with meter(queue.backend.engine) as cpu:
                    started = time.perf_counter()
                    task = asyncio.create_task(worker.run())
                    while not task.done():
                        await asyncio.wait({task}, timeout=0.2)
                        if progress:
                            progress(worker.counters.succeeded, jobs,
                                     time.perf_counter() - started)
                    task.result()
                    elapsed = time.perf_counter() - started
                done = worker.counters.succeeded
                clear_queue(queue, name, jobs + 1)
                runs.append((done / elapsed if elapsed > 0 else 0.0, done, elapsed,
                             cpu.figures(done)))
        finally:
            await aq.close()
        return runs

    runs = asyncio.run(go())
    rate, done, elapsed, figures = sorted(runs, key=lambda r: r[0])[(len(runs) - 1) // 2]
    return {"engine": queue.backend.engine, "mode": "async", "workers": workers,
            "batch": batch, "jobs": jobs, "job_ms": job_ms, "succeeded": done,
            "seconds": round(elapsed, 4), "jobs_per_s": round(rate, 1),
            "runs": [round(r[0], 1) for r in runs], "cpu": figures}


def throughput(queue: Queue, jobs: int = DEFAULT_JOBS,
               workers: Sequence[int] = DEFAULT_WORKERS,
               batches: Sequence[int] = DEFAULT_BATCHES,
               progress: Progress | None = None,
               modes: Sequence[str] = DEFAULT_MODES, repeat: int = 1,
               url: str | None = None) -> list[dict[str, Any]]:
    """:func:`throughput_run` for every mode, batch size and worker count (the ``async``
    mode needs ``url``)."""
    out = []
    for mode in modes:
        if mode == "async":
            if url is None:
                raise ConfigurationError("the async throughput mode needs the database URL")
            out += [async_throughput_run(queue, url, jobs, w, b, progress, repeat)
                    for b in batches for w in workers]
            continue
        out += [throughput_run(queue, jobs, w, b, progress, mode, repeat)
                for b in batches for w in workers]
    return out


def enqueue_rates(queue: Queue, jobs: int = DEFAULT_JOBS,
                  single_jobs: int = 2_000) -> list[dict[str, Any]]:
    """jobs/s of one-at-a-time enqueue and of bulk enqueue_many."""
    name = f"bench-enq-{uuid.uuid4().hex[:8]}"
    n_single = min(jobs, single_jobs)
    started = time.perf_counter()
    for i in range(n_single):
        queue.enqueue(name, {"n": i})
    single_s = time.perf_counter() - started
    bulk_s = bulk_enqueue(queue, name, jobs)
    engine = queue.backend.engine
    return [
        {"engine": engine, "mode": "single", "jobs": n_single, "seconds": round(single_s, 3),
         "jobs_per_s": round(n_single / single_s, 1)},
        {"engine": engine, "mode": f"bulk ({BULK_CHUNK}/call)", "jobs": jobs,
         "seconds": round(bulk_s, 3), "jobs_per_s": round(jobs / bulk_s, 1)},
    ]


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))]


def pickup(queue: Queue, jobs: int = PICKUP_JOBS, gap: float = PICKUP_GAP_S,
           quiet: float = PICKUP_QUIET_S, after_quiet: int = PICKUP_AFTER_QUIET
           ) -> dict[str, Any]:
    """Enqueue-commit to handler-start latency of an idle Worker (see the module docstring).
    The Worker runs with its defaults (idle sleeps, listener), 4 handler threads and no
    maintenance."""
    name = f"bench-pick-{uuid.uuid4().hex[:8]}"
    started: dict[int, float] = {}
    arrived = threading.Condition()

    def handler(job: Job) -> None:
        with arrived:
            started[int(job.payload)] = time.perf_counter()
            arrived.notify_all()

    worker = Worker(queue, name, handler, concurrency=4, reap_interval=None,
                    prune_interval=None)
    thread = threading.Thread(target=worker.run, name="portq-bench-pickup", daemon=True)
    thread.start()
    committed: dict[int, float] = {}
    try:
        time.sleep(quiet)  # idle: the worker has backed off as far as it goes
        claims_before, idle_since = len(worker.counters.claim_seconds), time.perf_counter()
        time.sleep(quiet)
        idle_claims_per_s = (len(worker.counters.claim_seconds) - claims_before) / (
            time.perf_counter() - idle_since)
        for n in range(jobs):
            queue.enqueue(name, n)
            committed[n] = time.perf_counter()
            time.sleep(gap)
        for k in range(after_quiet):
            time.sleep(quiet)
            queue.enqueue(name, jobs + k)
            committed[jobs + k] = time.perf_counter()
        with arrived:
            arrived.wait_for(lambda: len(started) == len(committed), timeout=60)
    finally:
        worker.stop()
        thread.join(60)
        clear_queue(queue, name, len(committed) + 1)
    steady = [(started[i] - committed[i]) * 1000 for i in range(jobs) if i in started]
    after = [(started[i] - committed[i]) * 1000 for i in range(jobs, jobs + after_quiet)
             if i in started]
    listener = queue.backend.listener([name])
    return {"engine": queue.backend.engine, "jobs": jobs, "gap_ms": gap * 1000,
            "started": len(started), "idle_max_s": worker.settings.idle_max,
            "listener": None if listener is None else type(listener).__name__,
            "p50_ms": round(percentile(steady, 50), 2) if steady else None,
            "p99_ms": round(percentile(steady, 99), 2) if steady else None,
            "max_ms": round(max(steady), 2) if steady else None,
            "after_quiet_ms": [round(x, 1) for x in after],
            "idle_claims_per_s": round(idle_claims_per_s, 2)}
