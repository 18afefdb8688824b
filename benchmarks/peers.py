"""Peer queues on the same PostgreSQL: procrastinate, pgqueuer, oban and chancy; no-op
jobs, or jobs that each await a wait (``--io-slots``, the I/O-bound workload).

Runs in benchmarks/.venv-peers (never a portq dependency). Each peer gets a schema of its
own (``peer_<name>``, dropped and created again for every run) in the database of the URL
given, through its connections' search_path, so that nothing outside that schema is
touched; it prints one JSON list of ``{"peer", "version", "workers", "jobs", "seconds",
"jobs_per_s", "enqueue_jobs_per_s"}``.

Every peer gets portq's own preparation: its jobs are bulk-enqueued (1,000 a call) into a
fresh schema, then the schema's tables are VACUUM ANALYZEd, then the workers start (this
server runs with autovacuum off: without ANALYZE, procrastinate's fetch planned as a
BitmapAnd plus Sort over never-analyzed tables and ran at ~127 jobs/s instead of ~700).

Configurations, as each library documents its worker for throughput:
- procrastinate: one worker with ``concurrency`` = N job slots (its documented knob for
  parallelism), ``wait=False`` (exit once the queue is empty), ``listen_notify=False`` and
  ``fetch_job_polling_interval=0.05`` (the queue is full for the whole run, so
  notifications would only add work).
- pgqueuer: N QueueManagers (one connection each) in one event loop, each with its default
  batch size (10) and buffered acknowledgements, ``QueueExecutionMode.drain``.
- oban (oban-py, needs Python 3.12+: benchmarks/.venv-peers312): one server-mode Oban
  with one queue of concurrency N, the rest at its defaults; timed until every job is
  completed (it keeps finished rows).
- chancy (benchmarks/.venv-peers312 too): see ``chancy_run``.

``--io-slots N --job-ms MS``: the I/O-bound workload, each job awaiting ``asyncio.sleep``
of MS, N slots in one process: pgqueuer as one QueueManager with ``max_concurrent_tasks``
N (``pgqueuer_io_run``); procrastinate, oban and chancy configured as above with N as
their concurrency. One JSON list with a row per peer (``slots`` and ``job_ms`` added).

``--pickup``: enqueue-commit to handler-start latency of an idle worker, measured as
``portq.bench.pickup`` measures portq's (one worker with 4 slots at the peer's defaults,
LISTEN/NOTIFY included; a quiet spell; ``--pickup-jobs`` single jobs ``--pickup-gap-ms``
apart, each enqueued in its own transaction; then a few more, each after a quiet spell),
for procrastinate and pgqueuer; one JSON list of ``{"peer", "version", "p50_ms",
"p99_ms", "max_ms", "after_quiet_ms", ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

import psycopg

PEERS_DB = "portq_peers"


def peer_schema(peer: str) -> str:
    return f"peer_{peer}"


def recreate_schema(url: str, peer: str) -> None:
    """Drop and create the peer's schema in the database of ``url``."""
    schema = peer_schema(peer)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")


def libpq_url(url: str, peer: str) -> str:
    """``url`` with the peer's schema as search_path, for libpq (psycopg) connections."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options=-c%20search_path%3D{peer_schema(peer)}"


def settle(url: str, peer: str) -> None:
    """VACUUM ANALYZE the peer's tables after its bulk enqueue, as portq's bench treats
    its own table (``portq.bench.settle``)."""
    schema = peer_schema(peer)
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()]
        for table in tables:
            conn.execute(f'VACUUM ANALYZE {schema}."{table}"')


async def wait_ms(job_ms: float) -> None:
    """A job's own work: nothing (``job_ms`` 0), or an ``asyncio.sleep`` of ``job_ms``."""
    if job_ms:
        await asyncio.sleep(job_ms / 1000)


async def procrastinate_run(url: str, jobs: int, workers: int,
                            job_ms: float = 0.0) -> dict[str, Any]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=libpq_url(url, "procrastinate")))
    queue = f"bench{workers}"

    @app.task(name="noop", queue=queue)
    async def noop(n: int) -> None:
        await wait_ms(job_ms)

    async with app.open_async():
        await app.schema_manager.apply_schema_async()  # into the fresh peer schema
        started = time.perf_counter()
        for start in range(0, jobs, 1000):
            await noop.batch_defer_async(*({"n": i} for i in range(start, min(jobs, start + 1000))))
        enqueue_s = time.perf_counter() - started
        settle(url, "procrastinate")
        started = time.perf_counter()
        await app.run_worker_async(queues=[queue], concurrency=workers, wait=False,
                                   install_signal_handlers=False, listen_notify=False,
                                   fetch_job_polling_interval=0.05)
        elapsed = time.perf_counter() - started
        async with app.connector.pool.connection() as conn, conn.cursor() as cur:  # type: ignore[attr-defined]
            await cur.execute("SELECT count(*) FROM procrastinate_jobs "
                              "WHERE queue_name = %s AND status = 'succeeded'", (queue,))
            row = await cur.fetchone()
    done = int(row[0]) if row else 0
    return _result("procrastinate", workers, jobs, done, elapsed, enqueue_s, job_ms)


async def _pgqueuer_filled(url: str, name: str, jobs: int) -> tuple[dict[str, str], Any, float]:
    """pgqueuer installed into its fresh peer schema and ``jobs`` jobs of entrypoint
    ``name`` enqueued 1,000 a call, then settled: (its server settings, the set-up
    connection, the enqueue's seconds)."""
    import asyncpg
    from pgqueuer import Queries
    from pgqueuer.db import AsyncpgDriver

    settings = {"search_path": peer_schema("pgqueuer")}
    setup = await asyncpg.connect(url, server_settings=settings)
    queries = Queries(AsyncpgDriver(setup))
    await queries.install()  # into the fresh peer schema
    started = time.perf_counter()
    for start in range(0, jobs, 1000):
        n = min(jobs, start + 1000) - start
        await queries.enqueue([name] * n, [b"x"] * n, [0] * n)
    enqueue_s = time.perf_counter() - started
    settle(url, "pgqueuer")
    return settings, setup, enqueue_s


async def pgqueuer_run(url: str, jobs: int, workers: int) -> dict[str, Any]:
    import asyncpg
    from pgqueuer import Queries, QueueManager
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.types import QueueExecutionMode

    name = f"noop{workers}"
    settings, setup, enqueue_s = await _pgqueuer_filled(url, name, jobs)

    managers = []
    conns = []
    for _ in range(workers):
        conn = await asyncpg.connect(url, server_settings=settings)
        conns.append(conn)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint(name)
        async def noop(job: Any) -> None:
            return None
        managers.append(qm)
    started = time.perf_counter()
    await asyncio.gather(*(qm.run(mode=QueueExecutionMode.drain,
                                  dequeue_timeout=timedelta(seconds=0.05))
                           for qm in managers))
    elapsed = time.perf_counter() - started
    # finished jobs leave pgqueuer_jobs and are logged in pgqueuer_log
    left = await setup.fetchval("SELECT count(*) FROM pgqueuer WHERE entrypoint = $1", name)
    for conn in [*conns, setup]:
        await conn.close()
    return _result("pgqueuer", workers, jobs, jobs - int(left), elapsed, enqueue_s)


async def pgqueuer_io_run(url: str, jobs: int, slots: int, job_ms: float) -> dict[str, Any]:
    """The I/O-bound workload: one QueueManager with ``slots`` concurrent tasks
    (``max_concurrent_tasks``; its default batch size, 10), each job awaiting
    ``job_ms``."""
    import asyncpg
    from pgqueuer import Queries, QueueManager
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.types import QueueExecutionMode

    name = f"io{slots}"
    settings, setup, enqueue_s = await _pgqueuer_filled(url, name, jobs)
    conn = await asyncpg.connect(url, server_settings=settings)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint(name)
    async def wait(job: Any) -> None:
        await asyncio.sleep(job_ms / 1000)
    started = time.perf_counter()
    await qm.run(mode=QueueExecutionMode.drain, max_concurrent_tasks=slots,
                 dequeue_timeout=timedelta(seconds=0.05))
    elapsed = time.perf_counter() - started
    left = await setup.fetchval("SELECT count(*) FROM pgqueuer WHERE entrypoint = $1", name)
    for c in (conn, setup):
        await c.close()
    return {**_result("pgqueuer", 1, jobs, jobs - int(left), elapsed, enqueue_s, job_ms),
            "slots": slots}


async def oban_run(url: str, jobs: int, workers: int, job_ms: float = 0.0) -> dict[str, Any]:
    """oban-py (Python 3.12+, its own venv): one Oban instance in server mode with one
    queue of ``workers`` concurrency (its documented knob), its tables in the peer schema
    (``prefix``); jobs inserted with ``enqueue_many`` 1,000 at a time by a client-mode
    instance first, then VACUUM ANALYZEd; done when every job is completed."""
    from oban import Oban, worker
    from oban.schema import install
    from psycopg_pool import AsyncConnectionPool

    schema = peer_schema("oban")
    queue = f"bench{workers}"

    @worker(queue=queue)
    class Noop:
        async def process(self, job: Any) -> None:
            await wait_ms(job_ms)

    async with AsyncConnectionPool(url, min_size=2, max_size=workers + 6,
                                   open=False) as pool:
        await install(pool, prefix=schema)
        client = Oban(pool=pool, prefix=schema, name="bench-client")
        started = time.perf_counter()
        for start in range(0, jobs, 1000):
            await client.enqueue_many([Noop.new({"n": i})
                                       for i in range(start, min(jobs, start + 1000))])
        enqueue_s = time.perf_counter() - started
        settle(url, "oban")

        async def completed() -> int:
            async with pool.connection() as conn:
                cur = await conn.execute(f"SELECT count(*) FROM {schema}.oban_jobs "
                                         "WHERE state = 'completed'")
                row = await cur.fetchone()
            return int(row[0]) if row else 0

        server = Oban(pool=pool, prefix=schema, name="bench-server",
                      queues={queue: workers})
        started = time.perf_counter()
        async with server:
            deadline = started + 600
            while (done := await completed()) < jobs and time.perf_counter() < deadline:
                await asyncio.sleep(0.02)
            elapsed = time.perf_counter() - started
    return _result("oban", workers, jobs, done, elapsed, enqueue_s, job_ms)


async def chancy_noop(n: int, job_ms: float = 0.0) -> None:
    """chancy's job: imported by its worker by name, so it lives at module level."""
    await wait_ms(job_ms)


async def chancy_run(url: str, jobs: int, workers: int, job_ms: float = 0.0) -> dict[str, Any]:
    """chancy: one Worker; the queue declared with ``concurrency`` N, the asyncio executor
    (the jobs are ``async def``; the default process pool is for CPU-bound jobs), and
    ``eager_polling`` with a 1 s polling interval, which its docs recommend where jobs are
    continuously available (the default interval is 5 s). Tables in the peer schema via the
    search_path; done when every job has succeeded."""
    from chancy import Chancy, Job, Queue, Worker

    queue = f"bench{workers}"
    quiet = logging.getLogger("peers.chancy")  # chancy's own default logs every job at
    quiet.setLevel(logging.WARNING)            # INFO; the other contenders log nothing
    async with Chancy(libpq_url(url, "chancy"), max_connection_pool_size=workers + 6,
                      no_default_plugins=True, log=quiet) as chancy:
        await chancy.migrate()
        await chancy.declare(Queue(queue, concurrency=workers, executor=Chancy.Executor.Async,
                                   polling_interval=1, eager_polling=True))
        job = Job.from_func(chancy_noop).with_queue(queue)
        started = time.perf_counter()
        async for _ in chancy.push_many([job.with_kwargs(n=i, job_ms=job_ms)
                                         for i in range(jobs)],
                                        batch_size=1000):
            pass
        enqueue_s = time.perf_counter() - started
        settle(url, "chancy")

        async def succeeded() -> int:
            with psycopg.connect(libpq_url(url, "chancy")) as conn:
                row = conn.execute("SELECT count(*) FROM chancy_jobs WHERE queue = %s "
                                   "AND state = 'succeeded'", (queue,)).fetchone()
            return int(row[0]) if row else 0

        started = time.perf_counter()
        async with Worker(chancy, register_signal_handlers=False):
            deadline = started + 600
            while (done := await succeeded()) < jobs and time.perf_counter() < deadline:
                await asyncio.sleep(0.05)
            elapsed = time.perf_counter() - started
    return _result("chancy", workers, jobs, done, elapsed, enqueue_s, job_ms)


class Pickup:
    """The enqueue-commit and handler-start times of a pickup run, by job number."""

    def __init__(self, jobs: int, gap_s: float, quiet_s: float, after_quiet: int) -> None:
        self.jobs, self.gap_s, self.quiet_s, self.after_quiet = jobs, gap_s, quiet_s, after_quiet
        self.committed: dict[int, float] = {}
        self.started: dict[int, float] = {}

    def start(self, n: int) -> None:
        """The handler of job ``n`` started (call first thing in the handler)."""
        self.started[n] = time.perf_counter()

    async def drive(self, enqueue: Callable[[int], Coroutine[Any, Any, Any]]) -> None:
        """Quiet spell, the steady jobs ``gap_s`` apart, the jobs after quiet spells; then
        wait (60 s at most) until every one has started."""
        await asyncio.sleep(self.quiet_s)
        for n in range(self.jobs + self.after_quiet):
            if n >= self.jobs:
                await asyncio.sleep(self.quiet_s)
            await enqueue(n)
            self.committed[n] = time.perf_counter()
            await asyncio.sleep(self.gap_s if n < self.jobs else 0)
        deadline = time.perf_counter() + 60
        while len(self.started) < len(self.committed) and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)

    def result(self, peer: str, configuration: str) -> dict[str, Any]:
        steady = sorted((self.started[n] - self.committed[n]) * 1000
                        for n in range(self.jobs) if n in self.started)
        after = [(self.started[n] - self.committed[n]) * 1000
                 for n in range(self.jobs, self.jobs + self.after_quiet) if n in self.started]

        def pct(q: float) -> float | None:
            """Nearest rank, as ``portq.bench.percentile``."""
            if not steady:
                return None
            return round(steady[max(0, min(len(steady) - 1,
                                           math.ceil(q / 100 * len(steady)) - 1))], 2)
        return {"peer": peer, "version": importlib.metadata.version(peer), "pickup": True,
                "configuration": configuration, "jobs": self.jobs,
                "gap_ms": self.gap_s * 1000, "started": len(self.started),
                "p50_ms": pct(50), "p99_ms": pct(99),
                "max_ms": round(steady[-1], 2) if steady else None,
                "after_quiet_ms": [round(x, 1) for x in after]}


async def procrastinate_pickup(url: str, pickup: Pickup) -> dict[str, Any]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=libpq_url(url, "procrastinate")))

    @app.task(name="mark", queue="pickup")
    async def mark(n: int) -> None:
        pickup.start(n)

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        worker = asyncio.create_task(app.run_worker_async(
            queues=["pickup"], concurrency=4, install_signal_handlers=False))
        try:
            await pickup.drive(lambda n: mark.defer_async(n=n))
        finally:
            worker.cancel()
            await asyncio.wait([worker], timeout=15)
    return pickup.result("procrastinate", "one worker, concurrency 4, its defaults "
                         "(LISTEN/NOTIFY on, 5 s polling behind it)")


async def pgqueuer_pickup(url: str, pickup: Pickup) -> dict[str, Any]:
    import asyncpg
    from pgqueuer import Queries, QueueManager
    from pgqueuer.db import AsyncpgDriver

    settings = {"search_path": peer_schema("pgqueuer")}
    setup = await asyncpg.connect(url, server_settings=settings)
    queries = Queries(AsyncpgDriver(setup))
    await queries.install()
    conn = await asyncpg.connect(url, server_settings=settings)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint("mark")
    async def mark(job: Any) -> None:
        pickup.start(int(job.payload))

    worker = asyncio.create_task(qm.run())
    try:
        await pickup.drive(lambda n: queries.enqueue("mark", str(n).encode()))
    finally:
        qm.shutdown.set()
        await asyncio.wait([worker], timeout=15)
        for c in (conn, setup):
            await c.close()
    if worker.done() and worker.exception():
        raise RuntimeError(f"pgqueuer's QueueManager stopped: {worker.exception()}")
    return pickup.result("pgqueuer", "one QueueManager at its defaults (LISTEN/NOTIFY, "
                         "batch 10, dequeue_timeout 30 s, no task limit)")


PICKUPS: dict[str, Callable[[str, Pickup], Coroutine[Any, Any, dict[str, Any]]]] = {
    "procrastinate": procrastinate_pickup, "pgqueuer": pgqueuer_pickup}


def _result(peer: str, workers: int, jobs: int, done: int, elapsed: float,
            enqueue_s: float, job_ms: float = 0.0) -> dict[str, Any]:
    return {"peer": peer, "version": importlib.metadata.version(peer), "workers": workers,
            "jobs": jobs, "succeeded": done, "seconds": round(elapsed, 4),
            "jobs_per_s": round(done / elapsed, 1),
            "enqueue_jobs_per_s": round(jobs / enqueue_s, 1), "job_ms": job_ms}


async def io_run(peer: str, url: str, jobs: int, slots: int, job_ms: float) -> dict[str, Any]:
    """The I/O-bound workload for ``peer``: ``slots`` concurrent jobs in one process, each
    awaiting ``job_ms``."""
    if peer == "pgqueuer":
        return await pgqueuer_io_run(url, jobs, slots, job_ms)
    return {**await PEERS[peer](url, jobs, slots, job_ms), "slots": slots}


PEERS: dict[str, Callable[..., Coroutine[Any, Any, dict[str, Any]]]] = {
    "procrastinate": procrastinate_run, "pgqueuer": pgqueuer_run, "oban": oban_run,
    "chancy": chancy_run}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url", help="postgresql:// URL of the database that gets the peers' "
                                    "schemas (peer_<name>, dropped and created again)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--peer", action="append", choices=sorted(PEERS))
    parser.add_argument("--pickup", action="store_true",
                        help="measure pickup latency (procrastinate, pgqueuer) instead")
    parser.add_argument("--pickup-jobs", type=int, default=200)
    parser.add_argument("--pickup-gap-ms", type=float, default=20.0)
    parser.add_argument("--pickup-quiet-s", type=float, default=3.0)
    parser.add_argument("--pickup-after-quiet", type=int, default=3)
    parser.add_argument("--io-slots", type=int, default=0,
                        help="the I/O-bound workload instead (--peer, default pgqueuer): "
                             "this many concurrent jobs in one process, each awaiting "
                             "--job-ms")
    parser.add_argument("--job-ms", type=float, default=5.0)
    args = parser.parse_args()
    url = args.url
    results = []
    if args.io_slots:
        for peer in args.peer or ["pgqueuer"]:
            try:
                recreate_schema(url, peer)
                results.append(asyncio.run(io_run(peer, url, args.jobs, args.io_slots,
                                                  args.job_ms)))
            except Exception as exc:  # noqa: BLE001 - report the peer as not run, go on
                results.append({"peer": peer, "slots": args.io_slots,
                                "error": f"{type(exc).__name__}: {exc}"})
            print(f"{peer} I/O-bound: {results[-1]}", file=sys.stderr)
        print(json.dumps(results))
        return 0
    if args.pickup:
        for peer in args.peer or sorted(PICKUPS):
            try:
                recreate_schema(url, peer)
                run = Pickup(args.pickup_jobs, args.pickup_gap_ms / 1000, args.pickup_quiet_s,
                             args.pickup_after_quiet)
                results.append(asyncio.run(PICKUPS[peer](url, run)))
            except Exception as exc:  # noqa: BLE001 - report the peer as not run, go on
                results.append({"peer": peer, "pickup": True,
                                "error": f"{type(exc).__name__}: {exc}"})
            print(f"{peer} pickup: {results[-1]}", file=sys.stderr)
        print(json.dumps(results))
        return 0
    for peer in args.peer or ["pgqueuer", "procrastinate"]:
        for workers in (int(w) for w in args.workers.split(",")):
            try:
                recreate_schema(url, peer)
                results.append(asyncio.run(PEERS[peer](url, args.jobs, workers)))
            except Exception as exc:  # noqa: BLE001 - report the peer as not run, go on
                results.append({"peer": peer, "workers": workers,
                                "error": f"{type(exc).__name__}: {exc}"})
            print(f"{peer} {workers} workers: {results[-1]}", file=sys.stderr)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
