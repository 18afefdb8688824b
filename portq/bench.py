"""``portq bench``: what a claim costs as the table grows, and how fast jobs flow.

Scenarios (each measures and reports; none passes or fails):

* ``claim-latency`` — fills a dedicated ``portqb_`` table set with 3 queues of ready jobs
  (plus finished jobs up to the total), then runs the backend's own claim statement of
  :data:`CLAIM_LIMIT` jobs from one queue inside a transaction that is rolled back, so
  nothing is consumed. Reports the client-side time of the claim, the engine's own
  execution time where its plan output has one (PostgreSQL ``EXPLAIN (ANALYZE,
  BUFFERS)``, MariaDB ``ANALYZE FORMAT=JSON``), the plan's node types, and whether the
  plan walks the ready index in order (no Sort node, no temp B-tree, no filesort).
* ``throughput`` — a no-op handler run by :class:`portq.worker.Worker` threads over N
  jobs; jobs/s of claim + complete, for each worker count and claim batch size, with the
  Worker as a user gets it (no tuning options: it sizes its look-ahead, completion batches
  and claim loops itself). Each run starts from a settled table (:func:`settle`); with
  ``repeat`` every configuration runs that many times and the median run is reported.
* ``enqueue`` — jobs/s of :meth:`Queue.enqueue` one at a time and of
  :meth:`Queue.enqueue_many` in chunks.
* ``pickup`` (only when asked for) — an idle Worker with its default idle settings;
  :data:`PICKUP_JOBS` single jobs enqueued :data:`PICKUP_GAP_S` apart, then a few more each
  after a :data:`PICKUP_QUIET_S` quiet spell (when a polling worker has backed off
  furthest): the time from ``enqueue()`` returning (committed) to the handler starting,
  p50/p99/max, and what the idle worker costs the database (claims/s while idle).

The ``portqb_`` tables are dropped afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import platform
import queue as queue_module
import sqlite3
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import portq
from portq.backends.base import GENERATION_COLUMN, ErrorKind, SqlBackend
from portq.errors import ConfigurationError
from portq.job import Job
from portq.pool import close_quietly
from portq.queue import Queue
from portq.sql import split_statements
from portq.url import parse_url
from portq.worker import Worker

T = TypeVar("T")
BENCH_PREFIX = "portqb_"
CLAIM_LIMIT = 20
QUEUE_COUNT = 3
#: (ready jobs in each of the 3 queues, total rows; None = just the ready ones)
DEFAULT_SIZES: tuple[tuple[int, int | None], ...] = (
    (1_000, None), (10_000, None), (100_000, None), (100_000, 1_000_000))
DEFAULT_WORKERS = (1, 2, 4, 8)
DEFAULT_BATCHES = (1, 20)
#: throughput modes: ``worker``, the sync Worker (it has one mode); ``async``, the
#: :class:`portq.aio.AsyncWorker` with ``concurrency`` = the worker count
MODES = ("worker", "async")
#: what runs when no mode is named
DEFAULT_MODES = ("worker",)
DEFAULT_JOBS = 20_000
BULK_CHUNK = 1_000
#: the concurrency limit the limited claim timing sets: high enough that it claims a full
#: batch, so the two timings differ only by the limit's extra statements
LIMITED_MAX_RUNNING = 1_000_000
#: jobs with a per-key limit put at the head of the second queue for keyed_claim_ms, and
#: their number of keys (each claim of 20 takes jobs of every key: 10 recounts)
KEYED_JOBS, KEYS = 100, 10
SCENARIOS = ("claim-latency", "throughput", "enqueue", "pickup")
#: what runs when no scenario is named (pickup takes ~15 s of wall time: asked for only)
DEFAULT_SCENARIOS = ("claim-latency", "throughput", "enqueue")
PICKUP_JOBS = 200
PICKUP_GAP_S = 0.020
PICKUP_QUIET_S = 3.0
PICKUP_AFTER_QUIET = 3
FILL_CHUNK = 100_000
Progress = Callable[[int, int, float], None]

# Row generators for filling the table fast, one statement per chunk. Columns:
# queue, payload, state, priority, run_at, attempts, max_attempts, created_at, finished_at.
_FILL_SQL = {
    "postgres": """
INSERT INTO portq_job (queue, payload, state, priority, run_at, attempts, max_attempts,
                       created_at, finished_at)
SELECT :queue, jsonb_build_object('n', g), :state, g % 3,
       now() - (:offset + g) * interval '1 millisecond',
       CASE WHEN :state = 'ready' THEN 0 ELSE 1 END, 25, now(),
       CASE WHEN :state = 'ready' THEN NULL ELSE now() END
FROM generate_series(1, :count) AS g""",
    "sqlite": """
INSERT INTO portq_job (queue, payload, state, priority, run_at, attempts, max_attempts,
                       created_at, finished_at)
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :count)
SELECT :queue, json_object('n', n), :state, n % 3,
       CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) - (:offset + n) * 1000,
       CASE WHEN :state = 'ready' THEN 0 ELSE 1 END, 25,
       CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER),
       CASE WHEN :state = 'ready' THEN NULL
            ELSE CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) END
FROM g""",
    "mysql": """
INSERT INTO portq_job (queue, payload, state, priority, run_at, attempts, max_attempts,
                       created_at, finished_at)
SELECT :queue, JSON_OBJECT('n', g.n), :state, g.n % 3,
       UTC_TIMESTAMP(6) - INTERVAL (:offset + g.n) * 1000 MICROSECOND,
       CASE WHEN :state = 'ready' THEN 0 ELSE 1 END, 25, UTC_TIMESTAMP(6),
       CASE WHEN :state = 'ready' THEN NULL ELSE UTC_TIMESTAMP(6) END
FROM ({digits}) AS g
WHERE g.n <= :count""",
}
#: engines whose table can be filled and whose claim plan can be read
PLANNED_ENGINES = ("postgres", "sqlite", "mysql")
_ANALYZE_SQL = {"postgres": "ANALYZE portq_job", "sqlite": "ANALYZE portq_job",
                "mysql": "ANALYZE TABLE portq_job"}


def _mysql_numbers(count: int) -> str:
    """A derived table of 1..10**k (k digits of ``count``) from cross-joined digits."""
    digits = "SELECT 0 AS d UNION ALL " + " UNION ALL ".join(f"SELECT {i}" for i in range(1, 10))
    places = len(str(max(1, count)))
    expr = " + ".join(f"d{i}.d * {10 ** i}" for i in range(places))
    joins = " CROSS JOIN ".join(f"({digits}) AS d{i}" for i in range(places))
    return f"SELECT {expr} + 1 AS n FROM {joins}"


# ---- table set-up ---------------------------------------------------------------------------

def fill_jobs(backend: SqlBackend, queue: str, count: int, *, state: str = "ready",
              offset: int = 0) -> None:
    """Insert ``count`` due jobs of ``queue`` in ``state`` ('ready' or 'succeeded') with
    the engine's row generator, in chunks of :data:`FILL_CHUNK` (each committed)."""
    if backend.engine not in _FILL_SQL:
        raise ConfigurationError(f"portq bench cannot fill a {backend.engine} table yet")
    if state not in ("ready", "succeeded"):
        raise ConfigurationError(f"fill state must be ready or succeeded, got {state!r}")
    done = 0
    while done < count:
        n = min(FILL_CHUNK, count - done)
        sql = _FILL_SQL[backend.engine].replace("portq_", backend.prefix)
        sql = sql.replace("{digits}", _mysql_numbers(n))
        params = {"queue": queue, "state": state, "count": n, "offset": offset + done}

        def insert(cur: Any, sql: str = sql, params: dict[str, Any] = params) -> None:
            backend.execute(cur, sql, params)
        backend.run("bench.fill", insert)
        done += n


def analyze_table(backend: SqlBackend) -> None:
    """Refresh the planner's statistics of the job table (as autovacuum would)."""
    sql = _ANALYZE_SQL[backend.engine].replace("portq_", backend.prefix)

    def go(cur: Any) -> None:
        backend.execute(cur, sql)
        if backend.engine == "mysql":
            cur.fetchall()
    backend.run("bench.analyze", go)


def drop_tables(backend: SqlBackend) -> None:
    """Drop every table of ``backend``'s (throw-away) prefix, dependents first."""
    if backend.prefix == "portq_":
        raise ConfigurationError("refusing to drop the application's portq_ tables")
    backend.drop_schema()


# ---- the claim's plan -----------------------------------------------------------------------

@dataclass
class ClaimPlan:
    """The engine's plan of one claim: node types, ordered index walk, engine time."""

    engine: str
    nodes: list[str]
    ordered_walk: bool
    server_ms: float | None = None
    buffers: int | None = None
    text: str = field(default="", repr=False)


def claim_params(queue: str, limit: int = CLAIM_LIMIT) -> dict[str, Any]:
    return {"queue": queue, "worker_id": "portq-bench", "limit": limit, "lease_ms": 60_000}


def explain_claim(backend: SqlBackend, queue: str, *, limit: int = CLAIM_LIMIT,
                  analyze: bool = True) -> ClaimPlan:
    """Plan the backend's own claim statement (its locking SELECT on MySQL/MariaDB) for
    one queue; with ``analyze`` the statement runs, in a transaction rolled back."""
    # the first statement of a multi-statement claim is the one that picks the rows
    claim_sql = split_statements(backend.queries["claim"])[0]
    params = claim_params(queue, limit)
    index = f"{backend.prefix}job_ready_idx"
    with backend.transaction(commit=False) as cur:
        if backend.engine == "postgres":
            options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"
            row = backend.execute(cur, f"EXPLAIN ({options}) {claim_sql}", params).fetchone()
            return _postgres_plan(row[0], index)
        if backend.engine == "sqlite":
            rows = backend.execute(cur, f"EXPLAIN QUERY PLAN {claim_sql}", params).fetchall()
            details = [str(r[3]) for r in rows]
            walk = (any(index in d for d in details)
                    and not any("TEMP B-TREE" in d for d in details))
            return ClaimPlan("sqlite", details, walk, text="\n".join(details))
        if backend.engine == "mysql":
            mariadb = "mariadb" in server_version(backend, cur).lower()
            verb = "ANALYZE FORMAT=JSON" if analyze and mariadb else "EXPLAIN FORMAT=JSON"
            row = backend.execute(cur, f"{verb} {claim_sql}", params).fetchone()
            return _mysql_plan(str(row[0]), index)
    raise ConfigurationError(f"portq bench has no plan reader for {backend.engine}")


def _postgres_plan(doc: Any, index: str) -> ClaimPlan:
    top = (json.loads(doc) if isinstance(doc, str) else doc)[0]
    nodes: list[str] = []
    walk = False

    def visit(node: dict[str, Any]) -> None:
        nonlocal walk
        kind = str(node["Node Type"])
        if node.get("Index Name"):
            nodes.append(f"{kind} ({node['Index Name']})")
            walk = walk or (kind in ("Index Scan", "Index Only Scan")
                            and node["Index Name"] == index)
        else:
            nodes.append(kind)
        for child in node.get("Plans", []):
            visit(child)
    visit(top["Plan"])
    sort = any(n.split(" (")[0] in ("Sort", "Incremental Sort") for n in nodes)
    plan = top["Plan"]
    buffers = None
    if "Shared Hit Blocks" in plan:
        buffers = int(plan["Shared Hit Blocks"]) + int(plan.get("Shared Read Blocks", 0))
    return ClaimPlan("postgres", nodes, walk and not sort, top.get("Execution Time"),
                     buffers, json.dumps(top, indent=1))


def _mysql_plan(doc: str, index: str) -> ClaimPlan:
    nodes: list[str] = []
    keys: list[str] = []
    sorts = False

    def visit(value: Any) -> None:
        nonlocal sorts
        if isinstance(value, dict):
            for k, v in value.items():
                if k in ("filesort", "temporary_table") or (k == "using_filesort" and v):
                    sorts = True
                    nodes.append(k)
                if k == "table" and isinstance(v, dict) and "table_name" in v:
                    keys.append(str(v.get("key")))
                    nodes.append(f"{v.get('access_type')} {v['table_name']} ({v.get('key')})")
                visit(v)
        elif isinstance(value, list):
            for v in value:
                visit(v)
    parsed = json.loads(doc)
    visit(parsed)
    block = parsed.get("query_block", {})
    server_ms = block.get("r_total_time_ms")
    return ClaimPlan("mysql", nodes, index in keys and not sorts,
                     None if server_ms is None else float(server_ms), None,
                     json.dumps(parsed, indent=1))


def time_claim(backend: SqlBackend, queue: str, *, limit: int = CLAIM_LIMIT,
               runs: int = 5, limited: bool = False, keyed: bool = False
               ) -> tuple[float, int]:
    """Median wall time (ms) of the real claim in rolled-back transactions, and the
    number of jobs it claimed; ``limited``: the claim of a queue with a concurrency or rate
    limit (its portq_queue row locked, running jobs counted or its rate log read, then the
    claim); ``keyed``: the claim followed by the per-key settle (queue row made and locked,
    each claimed key's running jobs recounted)."""
    params = claim_params(queue, limit)

    def settled(cur: Any, p: dict[str, Any]) -> list[Any]:
        return backend.settle_keys(cur, p, backend.claim_rows(cur, p), locked=False)
    claim = backend.claim_within_limit if limited else settled if keyed else \
        backend.claim_rows
    times: list[float] = []
    claimed = 0
    for _ in range(runs + 1):  # the first run warms the cache and is not counted
        with backend.transaction(commit=False) as cur:
            started = time.perf_counter()
            claimed = len(claim(cur, params))
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times[1:]), claimed


def server_version(backend: SqlBackend, cur: Any | None = None) -> str:
    """The engine's version string."""
    if backend.engine == "sqlite":
        return f"SQLite {sqlite3.sqlite_version}"
    sql = {"postgres": "SELECT version()", "mysql": "SELECT VERSION()"}.get(backend.engine)
    if sql is None:
        return backend.engine
    if cur is not None:
        return str(backend.execute(cur, sql).fetchone()[0])
    return str(backend.run("bench.version", lambda c: backend.execute(c, sql).fetchone()[0],
                           write=False))


# ---- scenarios --------------------------------------------------------------------------------

def claim_latency(queue: Queue, sizes: Sequence[tuple[int, int | None]] = DEFAULT_SIZES
                  ) -> list[dict[str, Any]]:
    """Claim cost at each (ready per queue, total rows) size; the table grows in place."""
    backend = queue.backend
    names = [f"bench-claim-{i}" for i in range(QUEUE_COUNT)]
    ready_now = finished_now = 0
    keyed_now = False
    results = []
    for ready, total in sorted(sizes, key=lambda s: (s[0], s[1] or 0)):
        fill_started = time.perf_counter()
        if ready > ready_now:
            for name in names:
                fill_jobs(backend, name, ready - ready_now, offset=ready_now)
            ready_now = ready
        finished = max(0, (total or 0) - QUEUE_COUNT * ready_now)
        if finished > finished_now:
            fill_jobs(backend, names[-1], finished - finished_now, state="succeeded",
                      offset=finished_now)
            finished_now = finished
        analyze_table(backend)
        fill_s = time.perf_counter() - fill_started
        plan = explain_claim(backend, names[0])
        claim_ms, claimed = time_claim(backend, names[0])
        backend.set_concurrency_limit(names[0], LIMITED_MAX_RUNNING)
        try:
            limited_ms, _ = time_claim(backend, names[0], limited=True)
        finally:
            backend.set_concurrency_limit(names[0], None)
        backend.set_rate_limit(names[0], LIMITED_MAX_RUNNING, 60_000)
        try:
            rate_ms, _ = time_claim(backend, names[0], limited=True)
        finally:
            backend.set_rate_limit(names[0], None, None)
        if not keyed_now:  # keyed jobs at the head of the second queue (10 keys)
            queue.enqueue_many([{"queue": names[1], "payload": i, "priority": 1,
                                 "concurrency_key": f"bench-key-{i % KEYS}",
                                 "concurrency_limit": LIMITED_MAX_RUNNING}
                                for i in range(KEYED_JOBS)])
            keyed_now = True
        keyed_ms, _ = time_claim(backend, names[1], keyed=True)
        results.append({
            "engine": backend.engine, "ready": ready, "total": QUEUE_COUNT * ready_now +
            finished_now, "queues": QUEUE_COUNT, "limit": CLAIM_LIMIT, "claimed": claimed,
            "claim_ms": round(claim_ms, 3), "limited_claim_ms": round(limited_ms, 3),
            "rate_claim_ms": round(rate_ms, 3), "keyed_claim_ms": round(keyed_ms, 3),
            "server_ms": None if plan.server_ms is None else round(plan.server_ms, 3),
            "buffers": plan.buffers, "ordered_walk": plan.ordered_walk,
            "nodes": plan.nodes, "fill_s": round(fill_s, 2)})
    return results


#: the options of every throughput run's worker, sync or async: drain and stop (burst), a
#: lease no run outlasts, short idle sleeps so that the drained check at the end costs
#: milliseconds, and no reaper or pruner
RUN_OPTIONS: dict[str, Any] = {"burst": True, "lease": 120, "idle_min": 0.005,
                               "idle_max": 0.05, "reap_interval": None,
                               "prune_interval": None}


def _noop(job: Job) -> None:
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


def settle(backend: SqlBackend) -> None:
    """Start a run from a clean table: on PostgreSQL, VACUUM the job table (the dead rows of
    the last run would otherwise slow this one wherever autovacuum is off or behind)."""
    if backend.engine != "postgres":
        return  # InnoDB purges, and SQLite reuses free pages, on their own
    conn = backend.connect()
    try:
        conn.autocommit = True
        conn.execute(f"VACUUM {backend.prefix}job")
    finally:
        conn.close()


def throughput_run(queue: Queue, jobs: int, workers: int, batch: int | None,
                   progress: Progress | None = None, mode: str = "worker",
                   repeat: int = 1, job_ms: float = 0.0) -> dict[str, Any]:
    """Claim + complete ``jobs`` no-op jobs (or, with ``job_ms``, jobs that each sleep that
    long: an I/O-bound handler) with one Worker of ``workers`` threads, ``repeat`` times
    (each from a settled table); the median run is reported, with every run's jobs/s in
    ``runs``."""
    options = mode_options(mode, batch or 0, workers)
    handler = _noop if not job_ms else functools.partial(_sleep, job_ms / 1000)
    runs: list[tuple[float, int, float]] = []
    for _ in range(repeat):
        settle(queue.backend)
        name = f"bench-tp-{uuid.uuid4().hex[:8]}"
        bulk_enqueue(queue, name, jobs)
        worker = Worker(queue, name, handler, concurrency=workers, batch=batch,
                        **RUN_OPTIONS, **options)
        thread = threading.Thread(target=worker.run, name="portq-bench-worker", daemon=True)
        started = time.perf_counter()
        thread.start()
        while thread.is_alive():
            thread.join(0.2)
            if progress:
                progress(worker.counters.succeeded, jobs, time.perf_counter() - started)
        elapsed = time.perf_counter() - started
        done = worker.counters.succeeded
        clear_queue(queue, name, jobs + 1)
        runs.append((done / elapsed if elapsed > 0 else 0.0, done, elapsed))
    rate, done, elapsed = sorted(runs)[(len(runs) - 1) // 2]
    return {"engine": queue.backend.engine, "mode": mode, "workers": workers, "batch": batch,
            **options, "jobs": jobs, "job_ms": job_ms, "succeeded": done,
            "seconds": round(elapsed, 4), "jobs_per_s": round(rate, 1),
            "runs": [round(r[0], 1) for r in runs]}


#: the raw loop's ways to write completions: one statement and commit per completed job
#: (``complete``), one per claimed batch (``complete_many``, what the Worker writes), or
#: the batch's completion and the next claim in one statement (``complete_claim``, on
#: engines whose dialect has that statement: PostgreSQL)
RAW_COMPLETES = ("complete", "complete_many", "complete_claim")


def raw_completes(backend: SqlBackend) -> list[str]:
    """The raw loop's completion forms that ``backend`` has statements for."""
    return [c for c in RAW_COMPLETES if c in backend.queries]


def raw_throughput_run(queue: Queue, jobs: int, workers: int, batch: int,
                       complete: str = "complete_many") -> dict[str, Any]:
    """The ceiling of portq's SQL on any engine: ``workers`` threads, each with a DB-API
    connection of its own (no pool, no Worker, no look-ahead), loop over the backend's own
    claim statement(s) and commit, then its ``complete`` (a commit per job),
    ``complete_many`` (a commit per batch) or ``complete_claim`` (the batch's completion
    in the next claim's statement), until a claim comes back empty. Each is sent as the
    Worker sends it: one autocommit statement where the backend's ``autocommit_single``
    says so (PostgreSQL, SQLite), else BEGIN, statement(s), COMMIT. A transient conflict
    (busy, deadlock, serialization failure) rolls back and runs the transaction again;
    ``retries`` counts those."""
    backend = queue.backend
    if complete not in raw_completes(backend):
        raise ConfigurationError(f"unknown raw completion {complete!r} on "
                                 f"{backend.engine}; use "
                                 f"{', '.join(raw_completes(backend))}")
    settle(backend)
    name = f"bench-raw-{uuid.uuid4().hex[:8]}"
    bulk_enqueue(queue, name, jobs)
    done, retries = [0] * workers, [0] * workers
    errors: list[BaseException] = []

    def loop(slot: int) -> None:
        try:
            run_loop(slot)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller below
            errors.append(exc)

    def run_loop(slot: int) -> None:
        worker_id = f"raw-{slot}"
        conn = backend.connect()
        cur = conn.cursor()

        # each statement of the loop is its whole transaction: sent as the Worker sends it
        # (in autocommit where the backend runs one-statement operations so)
        auto = backend.autocommit_single
        if auto:
            backend.set_autocommit(conn, True)

        def tx(fn: Callable[[], T]) -> T:
            while True:
                if not auto:
                    backend.begin(conn, True)
                try:
                    result = fn()
                    conn.commit()
                    return result
                except Exception as exc:
                    conn.rollback()
                    if backend.classify(exc) is not ErrorKind.RETRYABLE:
                        raise
                    retries[slot] += 1

        def guards(rows: Sequence[Sequence[Any]]) -> str:
            return json.dumps([{"job_id": row[0], "generation": row[GENERATION_COLUMN],
                                "worker_id": worker_id} for row in rows])

        def complete_one(guard: dict[str, Any]) -> int:
            return int(backend.execute(cur, "complete", guard).rowcount)

        def complete_claim(claims: str) -> list[Sequence[Any]]:
            rows = backend.execute(cur, "complete_claim", {**params, "claims": claims})
            claimed = []
            for kind, *row in rows.fetchall():
                if kind == "done":
                    done[slot] += 1
                else:
                    claimed.append(row)
            return claimed

        params = {**claim_params(name, batch), "worker_id": worker_id}
        try:
            rows = tx(lambda: backend.claim_rows(cur, params))
            while rows:
                if complete == "complete_claim":
                    rows = tx(functools.partial(complete_claim, guards(rows)))
                    continue
                if complete == "complete_many":
                    done[slot] += len(tx(functools.partial(backend.fenced_rows, cur, complete,
                                                           {"claims": guards(rows)})))
                else:
                    for row in rows:
                        guard = {"job_id": row[0], "generation": row[GENERATION_COLUMN],
                                 "worker_id": worker_id}
                        done[slot] += tx(functools.partial(complete_one, guard))
                rows = tx(lambda: backend.claim_rows(cur, params))
        finally:
            close_quietly(cur)
            close_quietly(conn)

    threads = [threading.Thread(target=loop, args=(i,), name=f"portq-bench-raw-{i}")
               for i in range(workers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    clear_queue(queue, name, jobs + 1)
    if errors:
        raise errors[0]
    return {"engine": backend.engine, "complete": complete, "workers": workers,
            "batch": batch, "jobs": jobs, "succeeded": sum(done), "retries": sum(retries),
            "seconds": round(elapsed, 4), "jobs_per_s": round(sum(done) / elapsed, 1)}


async def _async_noop(job: Job) -> None:
    """The async benchmark's job: nothing, awaited on the event loop."""


def async_throughput_run(queue: Queue, url: str, jobs: int, workers: int, batch: int | None,
                         progress: Progress | None = None, repeat: int = 1,
                         job_ms: float = 0.0) -> dict[str, Any]:
    """:func:`throughput_run` with a :class:`portq.aio.AsyncWorker` of ``concurrency`` =
    ``workers`` and claim batch ``batch`` instead of the sync Worker: the same bulk enqueue
    through ``queue``, the same settled table, the same worker options
    (:data:`RUN_OPTIONS`), no tuning options. ``url`` (with its password: ``queue.url``
    has none) opens the AsyncQueue."""
    import asyncio

    import portq.aio

    handler = _async_noop if not job_ms else functools.partial(_async_sleep, job_ms / 1000)

    async def go() -> list[tuple[float, int, float]]:
        aq = await portq.aio.connect(url, prefix=queue.backend.prefix,
                                     pool_size=queue.backend.pool.max_size)
        runs: list[tuple[float, int, float]] = []
        try:
            for _ in range(repeat):
                settle(queue.backend)
                name = f"bench-tp-{uuid.uuid4().hex[:8]}"
                bulk_enqueue(queue, name, jobs)
                worker = portq.aio.AsyncWorker(aq, name, handler, concurrency=workers,
                                               batch=batch, registry_interval=None,
                                               **RUN_OPTIONS)
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
                runs.append((done / elapsed if elapsed > 0 else 0.0, done, elapsed))
        finally:
            await aq.close()
        return runs

    runs = asyncio.run(go())
    rate, done, elapsed = sorted(runs)[(len(runs) - 1) // 2]
    return {"engine": queue.backend.engine, "mode": "async", "workers": workers,
            "batch": batch, "jobs": jobs, "job_ms": job_ms, "succeeded": done,
            "seconds": round(elapsed, 4), "jobs_per_s": round(rate, 1),
            "runs": [round(r[0], 1) for r in runs]}


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
SERVER_PROCESSES = {"postgres": ("postgres",), "mysql": ("mariadbd", "mysqld")}
SAMPLE_S = 0.25


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` from /proc (None: gone, or not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pids_named(names: Sequence[str]) -> list[int]:
    """The pids whose command name is one of ``names`` (Linux /proc; [] elsewhere)."""
    pids = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm", encoding="utf-8") as f:
                    if f.read().strip() in names:
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def _machine_busy() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of every core since boot, from /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK"), sum(ticks) / os.sysconf("SC_CLK_TCK")


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
        worker = Worker(queue, name, _noop, burst=True)
        start.wait()
        cpu, began = time.process_time(), time.time()
        worker.run()
        results.put({"pid": os.getpid(), "succeeded": worker.counters.succeeded,
                     "claims": len(worker.counters.claim_seconds), "began": began,
                     "ended": time.time(), "cpu_s": time.process_time() - cpu,
                     "retries": retries.count, "empty_claims": empty[0],
                     "pool_connections": queue.backend.pool.size})


def _server_stats(backend: SqlBackend) -> dict[str, float]:
    """Cumulative commit and lock counters of the server (PostgreSQL: this database's;
    MariaDB: the server's global status)."""
    if backend.engine == "postgres":
        sql = ("SELECT xact_commit, xact_rollback, deadlocks FROM pg_stat_database "
               "WHERE datname = current_database()")
        row = backend.run("bench.stats", lambda c: backend.execute(c, sql).fetchone(),
                          write=False)
        return {"commits": float(row[0]), "rollbacks": float(row[1]),
                "deadlocks": float(row[2])}
    if backend.engine == "mysql":
        sql = ("SHOW GLOBAL STATUS WHERE Variable_name IN ('Handler_commit', "
               "'Innodb_row_lock_waits', 'Innodb_row_lock_time', 'Innodb_deadlocks')")
        rows = backend.run("bench.stats", lambda c: backend.execute(c, sql).fetchall(),
                           write=False)
        names = {"Handler_commit": "commits", "Innodb_row_lock_waits": "row_lock_waits",
                 "Innodb_row_lock_time": "row_lock_ms", "Innodb_deadlocks": "deadlocks"}
        return {names[str(k)]: float(v) for k, v in rows}
    return {}


_CLOCK_SQL = {
    "postgres": ("SELECT extract(epoch FROM clock_timestamp())",
                 "SELECT extract(epoch FROM max(finished_at)) FROM portq_job "
                 "WHERE queue = :queue"),
    "mysql": ("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) / 1e6",
              "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', max(finished_at)) / 1e6 "
              "FROM portq_job WHERE queue = :queue"),
    "sqlite": ("SELECT (julianday('now') - 2440587.5) * 86400.0",
               "SELECT max(finished_at) / 1e6 FROM portq_job WHERE queue = :queue"),
}


def db_clock(backend: SqlBackend, queue: str | None = None) -> float | None:
    """The database's clock in epoch seconds, or (``queue`` given) the latest
    ``finished_at`` of that queue's jobs, on the same clock (None: no such engine or job)."""
    if backend.engine not in _CLOCK_SQL:
        return None
    sql = _CLOCK_SQL[backend.engine][queue is not None].replace("portq_", backend.prefix)
    value = backend.run("bench.clock", lambda c: backend.execute(
        c, sql, {"queue": queue}).fetchone()[0], write=False)
    return None if value is None else float(value)


_CONNECTIONS_SQL = {
    "postgres": "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()",
    "mysql": "SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() "
             "AND ID <> CONNECTION_ID()",
}


def _connections(backend: SqlBackend) -> int | None:
    """Connections to the benchmark database but this one (None: not known, SQLite)."""
    sql = _CONNECTIONS_SQL.get(backend.engine)
    if sql is None:
        return None
    return int(backend.run("bench.connections",
                           lambda c: backend.execute(c, sql).fetchone()[0], write=False))


def _pg_waits(backend: SqlBackend) -> list[tuple[str, int]]:
    """(wait_event_type or 'CPU', backends) of this database's active backends."""
    sql = ("SELECT coalesce(wait_event_type, 'CPU'), count(*) FROM pg_stat_activity "
           "WHERE datname = current_database() AND state = 'active' "
           "AND pid <> pg_backend_pid() GROUP BY 1")
    rows = backend.run("bench.waits", lambda c: backend.execute(c, sql).fetchall(),
                       write=False)
    return [(str(k), int(n)) for k, n in rows]


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
    server_names = SERVER_PROCESSES.get(backend.engine, ())
    start.wait(timeout=120)
    began, db_began = time.time(), db_clock(backend)
    busy0 = _machine_busy()
    stats0 = _server_stats(backend)
    server: dict[int, list[float]] = {}  # pid -> [cpu at start (0: started later), last]
    for pid in _pids_named(server_names):
        cpu = _cpu_seconds(pid)
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
        for pid in _pids_named(server_names):
            cpu = _cpu_seconds(pid)
            if cpu is not None:
                server.setdefault(pid, [0.0, cpu])[1] = cpu
        if backend.engine == "postgres":
            for kind, n in _pg_waits(backend):
                waits[kind] = waits.get(kind, 0) + n
        peak = max(peak, _connections(backend) or 0)
    ended = max((r["ended"] for r in rows), default=time.time())
    busy1, stats1 = _machine_busy(), _server_stats(backend)
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
        "peak_connections": max(0, peak - (ours - 1)) if backend.engine in _CONNECTIONS_SQL
        else None,
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
    if r["engine"] == "sqlite":
        return "write lock"
    return "round trips"


def machine() -> dict[str, Any]:
    """nproc, memory, Python and OS of this machine."""
    mem = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "memory_gib": mem, "python": platform.python_version(),
            "platform": platform.platform(), "portq": portq.__version__}


def run(url: str, scenarios: Sequence[str] = DEFAULT_SCENARIOS, *, jobs: int = DEFAULT_JOBS,
        workers: Sequence[int] = DEFAULT_WORKERS, batches: Sequence[int] = DEFAULT_BATCHES,
        sizes: Sequence[tuple[int, int | None]] = DEFAULT_SIZES,
        progress: Progress | None = None, modes: Sequence[str] = DEFAULT_MODES,
        repeat: int = 1) -> dict[str, Any]:
    """Run ``scenarios`` against ``url`` in ``portqb_`` tables, dropped afterwards."""
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise ConfigurationError(f"unknown scenario(s) {unknown}; use {', '.join(SCENARIOS)}")
    parsed = parse_url(url)
    sqlite_file = parsed.path if parsed.engine == "sqlite" and parsed.path != ":memory:" \
        else None
    created = sqlite_file is not None and not os.path.exists(sqlite_file)
    try:
        with portq.connect(url, prefix=BENCH_PREFIX, pool_size=16) as queue:
            return _run(queue, scenarios, jobs, workers, batches, sizes, progress, modes,
                        repeat, url, vacuum=sqlite_file is not None and not created)
    finally:
        if created and sqlite_file is not None:   # the run made the file: remove it all
            for path in (sqlite_file, sqlite_file + "-wal", sqlite_file + "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)


def _run(queue: portq.Queue, scenarios: Sequence[str], jobs: int, workers: Sequence[int],
         batches: Sequence[int], sizes: Sequence[tuple[int, int | None]],
         progress: Progress | None, modes: Sequence[str], repeat: int, url: str, *,
         vacuum: bool) -> dict[str, Any]:
    backend = queue.backend
    drop_tables(backend)  # leftovers of an interrupted run
    queue.migrate()
    report: dict[str, Any] = {
        "url": queue.url, "engine": backend.engine, "version": server_version(backend),
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine()}
    try:
        if "enqueue" in scenarios:
            report["enqueue"] = enqueue_rates(queue, jobs)
        if "throughput" in scenarios:
            report["throughput"] = throughput(queue, jobs, workers, batches, progress,
                                              modes, repeat, url)
        if "claim-latency" in scenarios:
            report["claim_latency"] = claim_latency(queue, sizes)
        if "pickup" in scenarios:
            report["pickup"] = [pickup(queue)]
    finally:
        drop_tables(backend)
        if vacuum:   # an existing SQLite file gives the benchmark's pages back
            queue.close()
            with contextlib.closing(backend.connect()) as conn:
                conn.execute("VACUUM")
    return report


def parse_sizes(text: str) -> list[tuple[int, int | None]]:
    """``'1000,10000,100000/1000000'`` -> [(1000, None), (10000, None), (100000, 1000000)]."""
    sizes: list[tuple[int, int | None]] = []
    for part in text.split(","):
        ready, _, total = part.strip().partition("/")
        try:
            size = (int(ready), int(total) if total else None)
        except ValueError:
            raise ConfigurationError(f"invalid size {part!r}: use READY or READY/TOTAL") from None
        if size[0] <= 0 or (size[1] is not None and size[1] < QUEUE_COUNT * size[0]):
            raise ConfigurationError(f"invalid size {part!r}: READY > 0 and TOTAL >= "
                                     f"{QUEUE_COUNT} x READY ({QUEUE_COUNT} queues)")
        sizes.append(size)
    return sizes


def as_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, default=lambda o: asdict(o))
