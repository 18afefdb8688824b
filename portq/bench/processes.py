"""Worker processes and a large table, for the peer report in benchmarks/: the CPU of the
workers, of the server's processes and of the machine (/proc), the server's counters, and
what bounded each run."""

from __future__ import annotations

import logging
import math
import os
import queue as queue_module
import statistics
import time
import uuid
from collections.abc import Sequence
from typing import Any

import portq
from portq.backends.base import SqlBackend
from portq.bench.claims import claim_latency
from portq.bench.cpu import cpu_seconds, machine_busy, pids_named
from portq.bench.flow import DEFAULT_JOBS, bulk_enqueue, clear_queue, noop, throughput_run
from portq.bench.raw import raw_throughput_run
from portq.bench.table import (
    BENCH_PREFIX,
    QUEUE_COUNT,
    connections,
    db_clock,
    drop_tables,
    server_stats,
    settle,
    statement,
)
from portq.bench.table import waits as waits_of
from portq.engines import engine as engine_record
from portq.job import Job
from portq.worker import Worker

# ---- growth: a 10M-row table ------------------------------------------------------------------

#: growth's table: total rows and ready jobs over the 3 queues (333,334 per queue)
GROWTH_ROWS, GROWTH_READY = 10_000_000, 1_000_000


def growth(url: str, rows: int = GROWTH_ROWS, ready: int = GROWTH_READY, *,
           jobs: int = DEFAULT_JOBS, workers: int = 4, batch: int = 20) -> dict[str, Any]:
    """Throughput of one Worker and of the raw ``complete_many`` loop on an empty table,
    then the table filled to ``rows`` (``ready`` ready jobs over :data:`QUEUE_COUNT`
    queues, the rest finished), the claim latency at that size and the same two runs on
    the full table (their own queue: the padding is other queues' rows); ``fill_s`` is the
    fill's time (with ANALYZE)."""
    per_queue = max(1, math.ceil(ready / QUEUE_COUNT))
    with portq.connect(url, prefix=BENCH_PREFIX, pool_size=16) as queue:
        backend = queue.backend
        drop_tables(backend)
        queue.migrate()
        try:
            empty = throughput_run(queue, jobs, workers, batch)
            empty_raw = raw_throughput_run(queue, jobs, workers, batch)
            claim = claim_latency(queue, [(per_queue, max(rows, QUEUE_COUNT * per_queue))])[0]
            padded = throughput_run(queue, jobs, workers, batch)
            padded_raw = raw_throughput_run(queue, jobs, workers, batch)
        finally:
            drop_tables(backend)
    return {"engine": backend.engine, "rows": claim["total"], "ready": per_queue * QUEUE_COUNT,
            "fill_s": claim["fill_s"],
            "fill_rows_per_s": round(claim["total"] / claim["fill_s"]) if claim["fill_s"] else None,
            "claim": claim, "empty": empty, "padded": padded, "empty_raw": empty_raw,
            "padded_raw": padded_raw}


# ---- worker processes -------------------------------------------------------------------------


#: the database server's process names, whose CPU :func:`processes_run` samples
SAMPLE_S = 0.25


class _RetryCounter(logging.Handler):
    """Counts the backend's transient-conflict retries (SQLite: busy; others: deadlocks,
    serialization failures, lock timeouts) from its debug log line."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "transient conflict" in str(record.msg):
            self.count += 1


def _process_worker(url: str, name: str, start: Any, results: Any,
                    pool_size: int | None = None) -> None:
    """One worker process: a sync Worker with its default options (``burst``), started
    when every process is ready (``start``, a barrier), its figures put on ``results``
    (with its claims that found no job); ``pool_size`` bounds its connections."""
    retries = _RetryCounter()
    backend_log = logging.getLogger("portq.backend")
    backend_log.addHandler(retries)
    backend_log.setLevel(logging.DEBUG)
    backend_log.propagate = False
    sized = {} if pool_size is None else {"pool_size": pool_size}
    with portq.connect(url, prefix=BENCH_PREFIX, **sized) as queue:
        queue.stats(name)  # connected before the clock starts
        empty = [0]
        claim = queue.claim

        def counted(*args: Any, **kwargs: Any) -> list[Job]:
            jobs = claim(*args, **kwargs)
            empty[0] += not jobs
            return jobs
        queue.claim = counted  # type: ignore[method-assign]
        worker = Worker(queue, name, noop, burst=True)
        start.wait()
        cpu, began = time.process_time(), time.time()
        worker.run()
        results.put({"pid": os.getpid(), "succeeded": worker.counters.succeeded,
                     "claims": len(worker.counters.claim_seconds), "began": began,
                     "ended": time.time(), "cpu_s": time.process_time() - cpu,
                     "retries": retries.count, "empty_claims": empty[0],
                     "pool_connections": queue.backend.pool.size})


def processes_run(url: str, jobs: int, processes: int,
                  pool_size: int | None = None) -> dict[str, Any]:
    """Claim + complete ``jobs`` no-op jobs with ``processes`` worker processes (spawned,
    each one sync Worker with its default options), timed from the moment all are ready
    (a barrier) to the last job's completion (the jobs' ``finished_at``, on the
    database's clock), interpreter start-up excluded. Meanwhile it samples
    the CPU of the worker processes and of the database server's processes (/proc), the
    machine's busy share, the server's commit and lock counters and, on PostgreSQL, what
    this database's active backends wait on. ``pool_size``: each worker's
    ``portq.connect(url, pool_size=...)`` (None: the worker sizes its pool)."""
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    with portq.connect(url, prefix=BENCH_PREFIX, pool_size=4) as queue:
        backend = queue.backend
        queue.migrate()
        settle(backend)
        name = f"bench-proc-{uuid.uuid4().hex[:8]}"
        bulk_enqueue(queue, name, jobs)
        start, results = ctx.Barrier(processes + 1), ctx.Queue()
        procs = [ctx.Process(target=_process_worker, daemon=True,
                             args=(url, name, start, results, pool_size))
                 for _ in range(processes)]
        for p in procs:
            p.start()
        try:
            row = _time_processes(backend, procs, start, results, jobs, name)
            row["pool_size"] = pool_size
            return row
        finally:
            for p in procs:
                p.join(30)
                if p.is_alive():
                    p.terminate()
            clear_queue(queue, name, jobs + 1)


def _time_processes(backend: SqlBackend, procs: list[Any], start: Any, results: Any,
                    jobs: int, name: str) -> dict[str, Any]:
    """:func:`processes_run`'s clock and samples, from the barrier to the last exit."""
    processes = len(procs)
    server_names = engine_record(backend.engine).server_processes
    start.wait(timeout=120)
    began, db_began = time.time(), db_clock(backend)
    busy0 = machine_busy()
    stats0 = server_stats(backend)
    server: dict[int, list[float]] = {}  # pid -> [cpu at start (0: started later), last]
    for pid in pids_named(server_names):
        cpu = cpu_seconds(pid)
        if cpu is not None:
            server[pid] = [cpu, cpu]
    waits: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    ours = backend.pool.size  # this process's connections, counted out of the peak
    peak = 0
    while len(rows) < processes:
        try:
            rows.append(results.get(timeout=SAMPLE_S))
        except queue_module.Empty:  # sample, and wait on
            if not any(p.is_alive() for p in procs):
                break
        for pid in pids_named(server_names):
            cpu = cpu_seconds(pid)
            if cpu is not None:
                server.setdefault(pid, [0.0, cpu])[1] = cpu
        for kind, n in waits_of(backend):
            waits[kind] = waits.get(kind, 0) + n
        peak = max(peak, connections(backend) or 0)
    ended = max((r["ended"] for r in rows), default=time.time())
    busy1, stats1 = machine_busy(), server_stats(backend)
    last = db_clock(backend, name)
    # the clock stops at the last completion (the database's finished_at), not at the
    # processes' exit, which a burst worker delays by up to one idle poll
    elapsed = last - db_began if last is not None and db_began is not None else \
        ended - began
    done = sum(r["succeeded"] for r in rows)
    cores = os.cpu_count() or 1

    def pct(seconds: float) -> float:
        return round(100 * seconds / elapsed, 1) if elapsed > 0 else 0.0
    delta = {k: stats1[k] - stats0.get(k, 0.0) for k in stats1}
    return {
        "engine": backend.engine, "processes": processes, "jobs": jobs, "succeeded": done,
        "exited": len(rows), "seconds": round(elapsed, 3),
        "exit_seconds": round(ended - began, 3),
        "jobs_per_s": round(done / elapsed, 1) if elapsed > 0 else 0.0,
        "cores": cores,
        # CPU as % of one core over the timed window
        "worker_cpu_pct": pct(sum(r["cpu_s"] for r in rows)),
        "server_cpu_pct": pct(sum(last - first for first, last in server.values()))
        if server_names else None,
        "machine_busy_pct": round(100 * (busy1[0] - busy0[0]) / (busy1[1] - busy0[1]), 1)
        if busy0 and busy1 and busy1[1] > busy0[1] else None,
        "claims": sum(r["claims"] for r in rows),
        "empty_claims": sum(r["empty_claims"] for r in rows),
        "retries": sum(r["retries"] for r in rows),
        # the most connections seen at once (every 250 ms sample) and what each worker's
        # pool held when it ended; PostgreSQL's LISTEN connection is outside the pool
        "peak_connections": max(0, peak - (ours - 1))
        if statement(backend, "connections") is not None else None,
        "pool_connections": sum(r["pool_connections"] for r in rows),
        "commits_per_1000_jobs": round(1000 * delta["commits"] / done, 1)
        if "commits" in delta and done else None,
        "commits_per_s": round(delta["commits"] / elapsed, 1)
        if "commits" in delta and elapsed > 0 else None,
        "server_counters": {k: round(v, 1) for k, v in delta.items()},
        "pg_wait_samples": waits or None}


def processes_sweep(url: str, counts: Sequence[int], jobs: int, *, rounds: int = 1,
                    min_seconds: float = 2.0, pool_size: int | None = None
                    ) -> list[dict[str, Any]]:
    """:func:`processes_run` for each process count, ``rounds`` times, interleaved (every
    other round in reverse order, so that a change of the machine's load falls on all
    counts); a count whose first run is shorter than ``min_seconds`` is run again with
    proportionally more jobs, and that many jobs are used for its later rounds. One row per
    count: the run with the median rate, with every round's rate (``runs``), the 1-minute
    load average at the start of each (``loads``) and each run's bound (``bounds``)."""
    by_count: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    sized: dict[int, int] = {}
    with portq.connect(url, prefix=BENCH_PREFIX) as queue:
        drop_tables(queue.backend)
    try:
        for r in range(rounds):
            for n in counts if r % 2 == 0 else list(reversed(counts)):
                load = os.getloadavg()[0]
                row = processes_run(url, sized.get(n, jobs), n, pool_size)
                for _ in range(2 if n not in sized else 0):
                    if not 0 < row["seconds"] < min_seconds:
                        break
                    more = math.ceil(row["jobs"] * 1.5 * min_seconds / row["seconds"])
                    row = processes_run(url, more, n, pool_size)
                sized[n] = row["jobs"]
                row.update(load=round(load, 2), bound=process_bound(row))
                by_count[n].append(row)
    finally:
        with portq.connect(url, prefix=BENCH_PREFIX) as queue:
            drop_tables(queue.backend)
    out = []
    for n in counts:
        runs = by_count[n]
        rates = [x["jobs_per_s"] for x in runs]
        row = dict(sorted(runs, key=lambda x: x["jobs_per_s"])[(len(runs) - 1) // 2])
        row.update(runs=rates, loads=[x["load"] for x in runs],
                   bounds=[x["bound"] for x in runs], jobs_per_s=statistics.median(rates))
        out.append(row)
    return out


def process_bound(r: dict[str, Any]) -> str:
    """What bounded one :func:`processes_run`, from its samples, in a few words (the rule:
    a machine >= 85% busy is CPU-bound, by whichever of the workers and the server used
    more; else heavyweight-lock waits >= 25% of the PostgreSQL samples, else LWLock/IO
    (WAL) waits >= 50%, else InnoDB row-lock waits or SQLite busy retries, else round
    trips)."""
    w, d, m = r["worker_cpu_pct"], r["server_cpu_pct"], r["machine_busy_pct"]
    waits = r.get("pg_wait_samples") or {}
    total = sum(waits.values())
    counters = r.get("server_counters") or {}
    if m is not None and m >= 85:
        return "CPU (workers)" if d is None or w >= d else "CPU (server)"
    if total and waits.get("Lock", 0) / total >= 0.25:
        return "lock waits"
    if total and (waits.get("LWLock", 0) + waits.get("IO", 0)) / total >= 0.5:
        return "WAL/commit waits"
    if counters.get("row_lock_waits", 0) > 0.01 * max(1.0, counters.get("commits", 0)):
        return "row-lock waits"
    if engine_record(r["engine"]).file_based:   # one writer at a time
        return "write lock"
    return "round trips"
