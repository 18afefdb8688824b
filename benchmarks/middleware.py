"""What middleware costs a worker, for ``benchmarks/run.py --middleware`` (its section
"Middleware cost" in docs/benchmarks.md).

No-op jobs drained by a burst worker (concurrency 4, claim batch 20, the throughput runs'
options) on each engine and each front, once per variant per round:

* ``none``: no middleware at all (the hot path the other variants are measured against);
* ``empty``: ``middleware=[]`` (an empty chain);
* ``pass``: one pass-through ``mw(job, call_next)`` (``async def`` on the asyncio front);
* ``otel``: ``portq.contrib.otel.instrument`` with an SDK ``TracerProvider`` and no
  exporter (the jobs enqueued through the instrumented queue, so each carries a trace
  context to continue);
* ``metrics``: ``portq.metrics.WorkerMetrics`` on the worker (its wait and run time
  histograms, a middleware; nothing scrapes it meanwhile).

Rounds are interleaved, each starting at the next variant (no variant always runs first);
the medians of the rounds are reported with their spread and the machine's load average
before and after each engine's rounds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import portq
from portq import bench
from portq.errors import CannotConnect
from portq.job import Job

VARIANTS = ("none", "empty", "pass", "otel", "metrics")
#: how each variant is described in the doc
DESCRIBED = {
    "none": "no middleware",
    "empty": "`middleware=[]` (an empty chain)",
    "pass": "one pass-through `mw(job, call_next)` (`async def` on asyncio)",
    "otel": "`portq.contrib.otel.instrument` (SDK `TracerProvider`, no exporter)",
    "metrics": "`portq.metrics.WorkerMetrics` (wait and run time histograms)",
}
FRONTS = ("threads", "asyncio")


def parse_variants(text: str) -> list[str]:
    """``none,empty,otel,metrics`` -> the variants, checked ('' -> none)."""
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"--middleware: unknown variant {', '.join(unknown)}; use any of "
                         f"{', '.join(VARIANTS)}")
    return names


def _noop(job: Job) -> None:
    """The thread front's handler: nothing."""


async def _anoop(job: Job) -> None:
    """The asyncio front's handler: nothing."""


def _pass(job: Job, call_next: Callable[[], Any]) -> Any:
    return call_next()


async def _apass(job: Job, call_next: Callable[[], Any]) -> Any:
    return await call_next()


def _worker(queue: portq.Queue, aq: Any, name: str, variant: str, front: str) -> Any:
    options: dict[str, Any] = {**bench.RUN_OPTIONS, "concurrency": 4, "batch": 20,
                               "registry_interval": None}
    if variant == "empty":
        options["middleware"] = []
    elif variant == "pass":
        options["middleware"] = [_apass if front == "asyncio" else _pass]
    if front == "asyncio":
        from portq.aio import AsyncWorker
        worker: Any = AsyncWorker(aq, name, _anoop, **options)
    else:
        worker = portq.Worker(queue, name, _noop, **options)
    if variant == "metrics":
        from portq.metrics import WorkerMetrics
        WorkerMetrics(queue, worker)
    return worker


def one_run(url: str, variant: str, front: str, jobs: int) -> tuple[float, float]:
    """Jobs per second of one burst worker draining ``jobs`` no-op jobs (a queue of its
    own, from a settled table, on a connection made for this run), and the CPU time this
    process spent per job meanwhile, in µs (every thread's: the worker's own cost, which
    the machine's other load stretches far less than the wall time)."""
    queue = portq.connect(url, prefix=bench.BENCH_PREFIX, pool_size=8)
    try:
        if variant == "otel":
            from opentelemetry.sdk.trace import TracerProvider

            from portq.contrib import otel
            otel.instrument(queue, tracer_provider=TracerProvider())
        bench.settle(queue.backend)
        name = f"bench-mw-{os.urandom(4).hex()}"
        bench.bulk_enqueue(queue, name, jobs)
        if front == "asyncio":
            counters, elapsed, cpu = asyncio.run(_async_drain(queue, name, variant))
        else:
            worker = _worker(queue, None, name, variant, front)
            started, cpu = time.perf_counter(), time.process_time()
            counters = worker.run()
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        if counters.succeeded != jobs:
            raise RuntimeError(f"{variant}/{front}: {counters.succeeded} of {jobs} succeeded")
        bench.clear_queue(queue, name, jobs + 1)
        return jobs / elapsed, cpu / jobs * 1e6
    finally:
        queue.close()


async def _async_drain(queue: portq.Queue, name: str, variant: str
                       ) -> tuple[Any, float, float]:
    """Drain ``name`` with an AsyncWorker on ``queue`` (psycopg's async driver on
    PostgreSQL, as the benchmark's other asyncio runs): its counters, the seconds it took
    and the CPU seconds of this process meanwhile. The AsyncQueue is closed here;
    ``queue`` stays open for the caller."""
    from portq.aio import AsyncQueue
    aq = AsyncQueue(queue)
    await aq.open()
    try:
        worker = _worker(queue, aq, name, variant, "asyncio")
        started, cpu = time.perf_counter(), time.process_time()
        counters = await worker.run()
        return counters, time.perf_counter() - started, time.process_time() - cpu
    finally:
        await aq.close(queue=False)  # queue stays open for the caller


def middleware_rounds(urls: dict[str, str], variants: list[str], jobs: int, rounds: int,
                      fronts: tuple[str, ...] = FRONTS,
                      log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every variant on every engine of ``urls`` and every front, once per round, the
    rounds interleaved: jobs/s (``runs``) and CPU µs per job (``cpu``) per round, and the
    load average around each engine's rounds."""
    out: dict[str, Any] = {"jobs": jobs, "rounds": rounds, "variants": variants,
                           "runs": {}, "cpu": {}, "loadavg": {}, "refused": {}}
    for engine, url in urls.items():
        with portq.connect(url, prefix=bench.BENCH_PREFIX) as queue:
            queue.migrate()
        load = [os.getloadavg()]
        refused = _Refusals()
        logging.getLogger("portq").addHandler(refused)
        runs: dict[str, dict[str, list[float]]] = {f: {v: [] for v in variants}
                                                   for f in fronts}
        cpu: dict[str, dict[str, list[float]]] = {f: {v: [] for v in variants}
                                                  for f in fronts}
        for n in range(rounds):
            log(f"middleware cost on {engine}, round {n + 1} of {rounds}")
            order = variants[n % len(variants):] + variants[:n % len(variants)]
            for front in fronts:
                for variant in order:
                    rate, us = _retried(url, variant, front, jobs, log)
                    runs[front][variant].append(round(rate, 1))
                    cpu[front][variant].append(round(us, 1))
        load.append(os.getloadavg())
        logging.getLogger("portq").removeHandler(refused)
        out["runs"][engine], out["cpu"][engine] = runs, cpu
        out["refused"][engine] = refused.count
        out["loadavg"][engine] = [[round(x, 2) for x in la] for la in load]
    return out


class _Refusals(logging.Handler):
    """Counts portq's log records of a connection the server refused (a run that waited
    for it took longer: its jobs/s is an outlier, its CPU time hardly)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "CannotConnect" in record.getMessage():
            self.count += 1


def _retried(url: str, variant: str, front: str, jobs: int,
             log: Callable[[str], None]) -> tuple[float, float]:
    """:func:`one_run`, once more (up to twice, 5 s apart) where the server refused the
    connection (a shared server out of connection slots for a moment)."""
    for attempt in range(3):
        try:
            return one_run(url, variant, front, jobs)
        except CannotConnect as exc:
            if attempt == 2:
                raise
            log(f"{variant}/{front} not run ({exc}); again in 5 s")
            logging.getLogger("portq").warning("bench.refused: %s", exc)
            time.sleep(5)
    raise AssertionError("unreachable")


def middleware_section(res: dict[str, Any]) -> list[str]:
    """docs/benchmarks.md's "Middleware cost": per engine and front, each variant's median
    jobs/s and CPU µs per job with their spread, and the CPU cost per job against
    ``none`` (the median of the differences within each round, and their spread)."""
    mw = res.get("middleware")
    if not mw:
        return []
    lines = ["", "## Middleware cost", "",
             f"`benchmarks/run.py --middleware {','.join(mw['variants'])}` "
             f"(`--middleware-only` runs just this section): a burst worker (concurrency 4, "
             f"claim batch 20) drains {mw['jobs']:,} no-op jobs, once per variant and front "
             f"in each of {mw['rounds']} interleaved rounds (each round starting at the next "
             "variant). Per variant: the median of the rounds and their spread (min-max) "
             "of jobs/s and of the CPU time the benchmark's process spent per job (every "
             "thread's; the database server's not counted, except SQLite's, which runs in "
             "the process), and the CPU cost against no middleware: the median of the "
             "differences taken within each round, and their spread. The machine's other "
             "load stretches wall time (jobs/s) far more than CPU time: read the CPU "
             f"columns for the cost. Measured {mw.get('date', res.get('date', ''))}.", ""]
    for engine, fronts in mw["runs"].items():
        before, after = mw["loadavg"][engine]
        refused = mw.get("refused", {}).get(engine)
        lines += [f"### {engine}", "",
                  f"Load average before {', '.join(f'{x:.2f}' for x in before)}, after "
                  f"{', '.join(f'{x:.2f}' for x in after)} ({res['machine']['nproc']} "
                  "cores)." + (f" The server refused a connection {refused} times during "
                               "these rounds (a shared server out of connection slots, or "
                               "restarted); the runs that waited for it are the low jobs/s "
                               "outliers, their CPU time hardly changed." if refused else ""),
                  "",
                  "| front | variant | jobs/s | spread | CPU µs/job | spread | "
                  "CPU µs/job vs none | spread |", "|---|---|---|---|---|---|---|---|"]
        for front, variants in fronts.items():
            cpu = mw["cpu"][engine][front]
            for variant, values in variants.items():
                lines.append(f"| {front} | {DESCRIBED[variant]} | "
                             f"{_spread(values, '{:,.0f}')} | "
                             f"{_spread(cpu[variant], '{:,.0f}')} | "
                             f"{_versus(cpu[variant], cpu.get('none'), variant)} |")
        lines.append("")
    lines += ["An empty chain costs nothing measurable: the handler runner calls the handler "
              "directly when a job's chain is empty, and a worker without metrics or "
              "tracing has an empty chain (the `none` rows are that hot path). The "
              "OpenTelemetry cost is the SDK's: extracting the trace context from the job's "
              "`meta`, starting and ending a recording span with eight attributes, per job "
              "(an exporter adds its own cost; with the API alone, no SDK configured, spans "
              "are non-recording). The metrics' middleware observes two histograms per job.",
              ""]
    return lines


def _spread(values: list[float], fmt: str) -> str:
    """``median | min-max`` of ``values``."""
    return (f"{fmt.format(statistics.median(values))} | {fmt.format(min(values))}-"
            f"{fmt.format(max(values))}")


def _versus(values: list[float], base: list[float] | None, variant: str) -> str:
    """The per-round differences to ``base``: ``median | min to max`` ('-' for none)."""
    if not base or variant == "none":
        return "- | -"
    diffs = [v - b for v, b in zip(values, base, strict=True)]
    return (f"{statistics.median(diffs):+.1f} | {min(diffs):+.1f} to "
            f"{max(diffs):+.1f}")
