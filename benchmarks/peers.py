"""Peer queues on the same PostgreSQL: procrastinate and pgqueuer, no-op jobs.

Runs in benchmarks/.venv-peers (never a portq dependency), in its own database
(``portq_peers``, recreated, vacuumed before each run), and prints one JSON list of
``{"peer", "version", "workers", "jobs", "seconds", "jobs_per_s", "enqueue_jobs_per_s"}``.

"workers" maps to each library's own notion: procrastinate ``concurrency`` (one worker,
N concurrent job slots), pgqueuer N QueueManagers (one connection each) in one event loop,
each with its default batch size of 10.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import sys
import time
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

import psycopg

PEERS_DB = "portq_peers"


def recreate_database(url: str) -> str:
    """Drop and create PEERS_DB on the server of ``url``; return its URL."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PEERS_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PEERS_DB}")
    base, _, _ = url.rpartition("/")
    return f"{base}/{PEERS_DB}"


def settle(url: str) -> None:
    """VACUUM the peers' database before a run, as portq's bench does to its own table (the
    last run's dead rows would otherwise slow this one wherever autovacuum is off). No
    ANALYZE: statistics taken between runs, when no job is waiting, once made procrastinate's
    fetch take seconds per job on the next run's 10,000."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM")


async def procrastinate_run(url: str, jobs: int, workers: int) -> dict[str, Any]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    queue = f"bench{workers}"

    @app.task(name="noop", queue=queue)
    async def noop(n: int) -> None:
        return None

    async with app.open_async():
        # the schema may already be there from an earlier worker count in this database
        with contextlib.suppress(Exception):
            await app.schema_manager.apply_schema_async()
        started = time.perf_counter()
        for start in range(0, jobs, 1000):
            await noop.batch_defer_async(*({"n": i} for i in range(start, min(jobs, start + 1000))))
        enqueue_s = time.perf_counter() - started
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
    return _result("procrastinate", workers, jobs, done, elapsed, enqueue_s)


async def pgqueuer_run(url: str, jobs: int, workers: int) -> dict[str, Any]:
    import asyncpg
    from pgqueuer import Queries, QueueManager
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.types import QueueExecutionMode

    setup = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(setup))
    with contextlib.suppress(Exception):  # already installed by an earlier worker count
        await queries.install()
    name = f"noop{workers}"
    started = time.perf_counter()
    for start in range(0, jobs, 1000):
        n = min(jobs, start + 1000) - start
        await queries.enqueue([name] * n, [b"x"] * n, [0] * n)
    enqueue_s = time.perf_counter() - started

    managers = []
    conns = []
    for _ in range(workers):
        conn = await asyncpg.connect(url)
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


def _result(peer: str, workers: int, jobs: int, done: int, elapsed: float,
            enqueue_s: float) -> dict[str, Any]:
    return {"peer": peer, "version": importlib.metadata.version(peer), "workers": workers,
            "jobs": jobs, "succeeded": done, "seconds": round(elapsed, 4),
            "jobs_per_s": round(done / elapsed, 1),
            "enqueue_jobs_per_s": round(jobs / enqueue_s, 1)}


PEERS: dict[str, Callable[[str, int, int], Coroutine[Any, Any, dict[str, Any]]]] = {
    "procrastinate": procrastinate_run, "pgqueuer": pgqueuer_run}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url", help="postgresql:// URL of the server (its database is not used)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--peer", action="append", choices=sorted(PEERS))
    args = parser.parse_args()
    url = recreate_database(args.url)
    results = []
    for peer in args.peer or sorted(PEERS):
        for workers in (int(w) for w in args.workers.split(",")):
            try:
                settle(url)
                results.append(asyncio.run(PEERS[peer](url, args.jobs, workers)))
            except Exception as exc:  # noqa: BLE001 - report the peer as not run, go on
                results.append({"peer": peer, "workers": workers,
                                "error": f"{type(exc).__name__}: {exc}"})
            print(f"{peer} {workers} workers: {results[-1]}", file=sys.stderr)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
