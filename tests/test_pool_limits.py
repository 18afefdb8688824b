"""How many connections a worker process opens: a ``pool_size`` given to ``portq.connect``
bounds them (the worker's claim loops fit within it), and a server at its connection limit
makes a pool that holds connections wait for one of its own instead of failing. Against
SQLite and the real PostgreSQL at PORTQ_TEST_PG_URL (a role of its own with CONNECTION
LIMIT 2, so the shared server's limit is never approached)."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import portq
from portq.bench import drop_tables
from portq.url import parse_url

PG_URL = os.environ.get("PORTQ_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
ROLE = "portq_pool_limit"


def _noop(job: portq.Job) -> None:
    pass


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_a_given_pool_size_bounds_the_workers_connections(engine: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}" if engine == "sqlite" else PG_URL
    prefix = f"pb{uuid.uuid4().hex[:6]}_"
    try:
        bounded, free = portq.connect(url, prefix=prefix, pool_size=2), \
            portq.connect(url, prefix=prefix)
    except portq.DatabaseError as exc:
        pytest.skip(f"no server at {parse_url(url).redacted()}: {exc}")
    try:
        bounded.migrate()
        bounded.enqueue_many([{"queue": "q", "payload": {"n": i}} for i in range(300)])
        worker = portq.Worker(bounded, "q", _noop, concurrency=4, burst=True)
        portq.Worker(free, "q", _noop, concurrency=4)
        assert free.backend.pool.max_size > 2  # raised to what the worker's threads use
        assert bounded.backend.pool.max_size == 2  # given: not raised by the worker
        peak = [0]
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], bounded.backend.pool.size)
                time.sleep(0.001)
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            worker.run()  # its four claim loops, writers and heartbeat share two connections
        finally:
            done.set()
            watcher.join()
        assert worker.counters.succeeded == 300
        assert 1 <= peak[0] <= 2
    finally:
        drop_tables(bounded.backend)
        bounded.close()
        free.close()


MYSQL_URL = os.environ.get("PORTQ_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")


@pytest.fixture(params=["postgres", "mysql"])
def limited_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The engine's test URL as a user that may hold 2 connections at once (PostgreSQL:
    a role with CONNECTION LIMIT 2; MariaDB: MAX_USER_CONNECTIONS 2)."""
    url = parse_url(PG_URL if request.param == "postgres" else MYSQL_URL)
    port = url.port or (5432 if request.param == "postgres" else 3306)
    host = f"{url.host or '127.0.0.1'}:{port}"
    try:
        with portq.connect(PG_URL if request.param == "postgres" else MYSQL_URL) as admin:
            statements = [
                f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') "
                f"THEN CREATE ROLE {ROLE} LOGIN CONNECTION LIMIT 2; END IF; END $$",
                f"GRANT ALL ON SCHEMA public TO {ROLE}",
                f"GRANT CONNECT, CREATE ON DATABASE {url.database} TO {ROLE}",
            ] if request.param == "postgres" else [
                f"CREATE USER IF NOT EXISTS '{ROLE}'@'{h}' WITH MAX_USER_CONNECTIONS 2"
                for h in ("127.0.0.1", "localhost")] + [
                f"GRANT ALL ON {url.database}.* TO '{ROLE}'@'{h}'"
                for h in ("127.0.0.1", "localhost")]
            for sql in statements:
                admin.backend.run("setup", lambda c, sql=sql: c.execute(sql))
    except portq.DatabaseError as exc:
        pytest.skip(f"no server at {url.redacted()}: {exc}")
    yield f"{request.param}://{ROLE}@{host}/{url.database}"


def test_a_full_server_makes_the_pool_wait_for_one_of_its_own(
        limited_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="portq.pool")
    prefix = f"pl{uuid.uuid4().hex[:6]}_"
    queue = portq.connect(limited_url, prefix=prefix)
    pool = queue.backend.pool
    try:
        held = [pool.acquire(), pool.acquire()]  # the role's limit
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(pool.acquire()))
        waiter.start()
        time.sleep(0.5)
        assert not got  # refused by the server: waiting, not failed
        pool.release(held.pop())
        waiter.join(10)
        assert len(got) == 1
        assert caplog.text.count("pool.server_full") == 1
        pool.release(got[0])
        pool.release(held.pop())
        queue.migrate()  # the pool works on at its size
        queue.enqueue("q", {"n": 1})
        assert len(queue.claim("q", "w", limit=5, lease=30)) == 1
    finally:
        drop_tables(queue.backend)
        queue.close()


def test_a_refusal_with_no_connection_held_still_fails(limited_url: str) -> None:
    holder = portq.connect(limited_url)
    others = [holder.backend.pool.acquire() for _ in range(2)]
    queue = portq.connect(limited_url)
    try:
        with pytest.raises(Exception, match=r"max_user_connections|too many connections"):
            queue.backend.pool.acquire()
    finally:
        queue.close()
        for conn in others:
            holder.backend.pool.release(conn)
        holder.close()


def test_the_cli_worker_takes_a_pool_size_and_says_it(tmp_path: Path) -> None:
    from portq.conformance.helpers import run_portq
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    run_portq("migrate", url)
    run_portq("enqueue", url, "--queue", "q", "--payload", "1")
    sized = run_portq("worker", url, "--queue", "q", "--handler", "json:dumps", "--burst",
                      "--pool-size", "3")
    assert "claim_loops=1 pool=3 " in sized.stderr  # SQLite: one claim loop, one writer
    assert "claimed=1 " in sized.stderr  # and ran on those three connections
    default = run_portq("worker", url, "--queue", "q", "--handler", "json:dumps", "--burst")
    # raised to concurrency 4 + 3 + 2 x 1 claim loop, or the queue's default pool of 10
    assert "claim_loops=1 pool=10 " in default.stderr


def test_a_given_pool_size_bounds_an_async_workers_connections(tmp_path: Path) -> None:
    import asyncio

    from portq import aio

    async def main() -> tuple[int, int, int]:
        async with await aio.connect(f"sqlite:///{tmp_path / 'a.db'}", pool_size=2) as q:
            await q.migrate()
            await q.enqueue_many([{"queue": "q", "payload": i} for i in range(100)])
            worker = aio.AsyncWorker(q, "q", _noop, burst=True)
            counters = await asyncio.wait_for(worker.run(), 120)
            pool = q.queue.backend.pool
            return counters.succeeded, pool.max_size, pool.size
    succeeded, max_size, size = asyncio.run(main())
    assert succeeded == 100 and max_size == 2 and size <= 2
