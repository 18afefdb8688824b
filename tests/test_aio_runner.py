"""AsyncQueue's runners (portq/aio_runner.py): on PostgreSQL each operation runs in a
greenlet on the loop's thread over the runner's own psycopg AsyncConnections, elsewhere on
threads; nothing blocks the loop (a loop-lag probe runs beside them), and the sync path's
retries hold (a connection terminated between statements is retried once, before COMMIT;
a transient conflict's sleep is awaited)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import portq
from portq import aio
from portq.aio_runner import BridgeRunner, ThreadRunner
from portq.conformance.plugin import TEST_PREFIX
from portq.errors import ConnectionLost

SERVER_ENGINES = ("postgres", "mysql")
#: the longest a step of the loop may be late while operations run (a blocked loop is
#: late by the whole stall: a second or more here)
LAG_LIMIT = 0.3


def run(url: str, body: Callable[[aio.AsyncQueue], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        async with await aio.connect(url, prefix=TEST_PREFIX, **options) as q:
            return await body(q)
    return asyncio.run(main())


def _need(engine: str, engines: tuple[str, ...]) -> None:
    if engine not in engines:
        pytest.skip(f"needs one of {', '.join(engines)}")


class LagProbe:
    """A task measuring how late ``asyncio.sleep(0.01)`` wakes, while it runs."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.steps = 0
        self._task: asyncio.Task[None] | None = None

    async def _probe(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(0.01)
            self.worst = max(self.worst, time.monotonic() - started - 0.01)
            self.steps += 1

    async def __aenter__(self) -> LagProbe:
        self._task = asyncio.create_task(self._probe())
        await asyncio.sleep(0.05)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


@contextmanager
def outside(q: portq.Queue) -> Iterator[Any]:
    """A connection of the test's own, outside AsyncQueue's pools (committed on exit)."""
    conn = q.backend.connect()
    try:
        yield conn
        conn.commit()
    finally:
        conn.close()


def _session_id(q: portq.Queue) -> str:
    return "SELECT pg_backend_pid()" if q.backend.engine == "postgres" \
        else "SELECT CONNECTION_ID()"


def _kill(conn: Any, engine: str, sid: int) -> None:
    """End session ``sid`` server-side and wait until it is gone."""
    with conn.cursor() as cur:
        if engine == "postgres":
            cur.execute("SELECT pg_terminate_backend(%s, 10000)", (sid,))
        else:
            cur.execute(f"KILL {int(sid)}")
    conn.commit()


def test_each_engine_has_its_runner(engine_url: str) -> None:
    async def body(q: aio.AsyncQueue) -> None:
        expected = BridgeRunner if q.backend.engine == "postgres" else ThreadRunner
        assert type(q.runner) is expected
        loop_thread = threading.get_ident()
        seen: list[int] = []
        q.add_enqueue_hook(lambda job: seen.append(threading.get_ident()))
        await q.enqueue("runner-thread", 1)
        # the bridge runs the sync operation on the loop's thread, a thread runner not
        assert (seen == [loop_thread]) is (expected is BridgeRunner)
    run(engine_url, body)


def test_operations_beside_a_lag_probe_and_a_stalled_statement(
        target: Any, engine_url: str, queue: portq.Queue, qname: str) -> None:
    """A cancel waits server-side on a row lock another connection holds for 1.5 s (then
    a timer thread commits it); the loop stays on time, and other operations run and
    finish meanwhile."""
    _need(target.engine, SERVER_ENGINES)
    locked = queue.enqueue(qname, "locked")

    async def body(q: aio.AsyncQueue) -> tuple[float, int, bool, float]:
        with outside(queue) as holder:
            with holder.cursor() as cur:
                cur.execute(f"SELECT job_id FROM {TEST_PREFIX}job WHERE job_id = {locked:d} "
                            "FOR UPDATE")
            release = threading.Timer(1.5, holder.commit)
            async with LagProbe() as probe:
                started = time.monotonic()
                release.start()
                stalled = asyncio.create_task(q.cancel(locked))
                await asyncio.sleep(0.2)
                others = await asyncio.gather(*(q.enqueue(qname, i) for i in range(20)))
                claimed = await q.claim(qname, "w-lag", limit=20)
                assert all(await asyncio.gather(*(q.complete(j) for j in claimed)))
                assert not stalled.done(), "the cancel should still wait for the row lock"
                assert len(others) == 20 and locked not in {j.id for j in claimed}
                cancelled = await stalled
                await asyncio.to_thread(release.join)
                return probe.worst, probe.steps, cancelled, time.monotonic() - started

    worst, steps, cancelled, took = run(engine_url, body, pool_size=4)
    assert cancelled and took >= 1.4
    assert steps > 50 and worst < LAG_LIMIT, f"the loop was late by {worst:.3f}s ({steps})"


def test_pg_sleep_does_not_stall_other_tasks(target: Any, engine_url: str,
                                             qname: str) -> None:
    """An operation whose statement sleeps 1 s server-side (pg_sleep) holds one pooled
    connection; the loop and the other operations go on."""
    _need(target.engine, ("postgres",))

    async def body(q: aio.AsyncQueue) -> tuple[float, float]:
        backend = q.backend
        async with LagProbe() as probe:
            slow = asyncio.create_task(q.runner.call(backend.run, "sleep", lambda cur: (
                backend.execute(cur, "SELECT pg_sleep(1)").fetchone())))
            await asyncio.sleep(0.1)
            started = time.monotonic()
            await asyncio.gather(*(q.enqueue(qname, i) for i in range(10)))
            quick = time.monotonic() - started
            assert not slow.done()
            await slow
        return probe.worst, quick

    worst, quick = run(engine_url, body, pool_size=3)
    assert quick < 0.9 and worst < LAG_LIMIT, (quick, worst)


def test_transient_conflict_retries_are_awaited(
        target: Any, engine_url: str, queue: portq.Queue, qname: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock another connection holds makes FOR UPDATE NOWAIT fail (55P03, retryable):
    the operation is retried after its conflict delay (0.5 s here), which the bridge
    awaits: the loop stays on time while it retries (a timer thread ends the lock)."""
    _need(target.engine, ("postgres",))
    monkeypatch.setattr("portq.backends.sql.tx.conflict_delay", lambda attempt: 0.5)
    locked = queue.enqueue(qname, "locked")
    sql = f"SELECT job_id FROM {TEST_PREFIX}job WHERE job_id = {locked:d} FOR UPDATE NOWAIT"

    async def body(q: aio.AsyncQueue) -> tuple[list[bool], float, int]:
        backend = q.backend
        tries: list[bool] = []

        def op(cur: Any) -> int:
            tries.append(True)
            return int(backend.execute(cur, sql).fetchone()[0])

        with outside(queue) as holder:
            with holder.cursor() as cur:
                cur.execute(sql)
            release = threading.Timer(1.2, holder.commit)
            async with LagProbe() as probe:
                release.start()
                assert await q.runner.call(backend.run, "nowait", op) == locked
            await asyncio.to_thread(release.join)
        return tries, probe.worst, probe.steps

    tries, worst, steps = run(engine_url, body)
    assert len(tries) >= 3 and steps > 50 and worst < LAG_LIMIT, (len(tries), steps, worst)


def test_connection_terminated_between_statements_is_retried_once(
        target: Any, engine_url: str, queue: portq.Queue) -> None:
    """The session running an operation's transaction is ended server-side between its
    two statements: the server rolled it back, so the operation runs again, once, on a
    new connection; ended again, the error is ConnectionLost."""
    _need(target.engine, SERVER_ENGINES)
    engine = target.engine
    pid_sql = _session_id(queue)

    async def body(q: aio.AsyncQueue) -> tuple[list[int], int, str]:
        backend = q.backend
        sessions: list[int] = []

        def killing(times: int) -> Callable[[Any], int]:
            def op(cur: Any) -> int:
                sid = int(backend.execute(cur, pid_sql).fetchone()[0])
                sessions.append(sid)
                if len(sessions) <= times:
                    with outside(queue) as killer:
                        _kill(killer, engine, sid)
                backend.execute(cur, "SELECT 1").fetchone()  # fails on a killed session
                return sid
            return op

        result = await q.runner.call(backend.run, "kill-once", killing(1))
        sessions_once = list(sessions)
        sessions.clear()
        with pytest.raises(ConnectionLost) as lost:
            await q.runner.call(backend.run, "kill-twice", killing(2))
        assert len(sessions) == 2 and len(set(sessions)) == 2
        # the pool works on after both: a fresh connection, jobs written and claimed
        job_id = await q.enqueue("runner-kill", "after")
        assert (await q.job(job_id)) is not None
        return sessions_once, result, str(lost.value)

    sessions, result, message = run(engine_url, body, pool_size=2)
    assert len(sessions) == 2 and sessions[0] != sessions[1] and result == sessions[1]
    assert message.startswith("kill-twice: lost the connection")


def test_idle_connections_terminated_are_replaced(
        target: Any, engine_url: str, queue: portq.Queue, qname: str) -> None:
    """Every idle connection of the runner is ended server-side; the next operations all
    succeed on new ones (the first statement fails before COMMIT: retried once)."""
    _need(target.engine, SERVER_ENGINES)
    pid_sql = _session_id(queue)

    async def body(q: aio.AsyncQueue) -> tuple[set[int], set[int], int]:
        backend = q.backend

        async def sessions() -> set[int]:
            gate = asyncio.Event()

            def op(cur: Any) -> int:
                sid = int(backend.execute(cur, pid_sql).fetchone()[0])
                if isinstance(q.runner, BridgeRunner):
                    from portq.aio_bridge import await_
                    await_(gate.wait())  # hold the connection until all three have one
                return sid
            tasks = [asyncio.create_task(q.runner.call(backend.run, "sid", op))
                     for _ in range(3)]
            await asyncio.sleep(0.3)
            gate.set()
            return set(await asyncio.gather(*tasks))

        before = await sessions()
        with outside(queue) as killer:
            for sid in before:
                _kill(killer, target.engine, sid)
        ids = await q.enqueue_many([{"queue": qname, "payload": i} for i in range(6)])
        claimed = await q.claim(qname, "w-kill", limit=6)
        assert all(await asyncio.gather(*(q.complete(j) for j in claimed)))
        return before, await sessions(), len(ids)

    before, after, written = run(engine_url, body, pool_size=3)
    assert written == 6 and not before & after, "a terminated session was handed out"


def test_runner_connections_have_the_sync_session_setup(
        target: Any, engine_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's AsyncConnections are opened as the sync pool's: libpq keepalives and
    application_name, statement_timeout_ms (and a later bound, at checkout), the server
    identity read on each new connection."""
    _need(target.engine, ("postgres",))
    from portq.backends.postgres import PostgresBackend
    read: list[str] = []
    original = PostgresBackend.read_identity

    def reading(self: PostgresBackend, conn: Any) -> Any:
        read.append(type(conn).__name__)
        return original(self, conn)
    monkeypatch.setattr(PostgresBackend, "read_identity", reading)
    settings = ("SELECT current_setting('statement_timeout'), "
                "current_setting('lock_timeout'), application_name "
                "FROM pg_stat_activity WHERE pid = pg_backend_pid()")

    async def body(q: aio.AsyncQueue) -> tuple[Any, Any, str]:
        backend = q.backend
        first = await q.runner.call(backend.run, "settings", lambda cur: tuple(
            backend.execute(cur, settings).fetchone()))
        with pytest.raises(portq.errors.StatementTimeout):
            await q.runner.call(backend.run, "slow", lambda cur: backend.execute(
                cur, "SELECT pg_sleep(2)").fetchone())
        backend.bound_statements(3000)
        later = await q.runner.call(backend.run, "settings", lambda cur: tuple(
            backend.execute(cur, settings).fetchone()))
        info = q.runner.pool._idle[0]._conn.info  # type: ignore[attr-defined]
        return first, later, info.get_parameters().get("keepalives_idle", "")

    first, later, keepalives_idle = run(engine_url, body, statement_timeout_ms=500)
    assert first == ("500ms", "250ms", "portq") and later[:2] == ("3s", "1500ms")
    assert keepalives_idle == "30"
    assert "BridgedConnection" in read


def test_cancelled_operation_gives_its_connection_back(target: Any, engine_url: str,
                                                       qname: str) -> None:
    """A task cancelled while its statement runs (pg_sleep) ends at once and leaves the
    pool usable: with one connection, the next operation runs at once."""
    _need(target.engine, ("postgres",))

    async def body(q: aio.AsyncQueue) -> tuple[float, int]:
        backend = q.backend
        slow = asyncio.create_task(q.runner.call(backend.run, "sleep", lambda cur: (
            backend.execute(cur, "SELECT pg_sleep(5)").fetchone())))
        await asyncio.sleep(0.3)
        cancelled_at = time.monotonic()
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        assert time.monotonic() - cancelled_at < 2.0  # not after pg_sleep's 5 s
        started = time.monotonic()
        job_id = await q.enqueue(qname, "after")
        assert (await q.job(job_id)) is not None
        return time.monotonic() - started, q.runner.pool.size  # type: ignore[attr-defined]

    took, size = run(engine_url, body, pool_size=1)
    assert took < 2.0 and size <= 1


def test_one_queue_used_by_one_loop_after_another(engine_url: str, qname: str) -> None:
    """An AsyncQueue made once and used under two asyncio.run calls, each with more
    concurrent operations than its pool (2) has connections."""
    queue = portq.connect(engine_url, prefix=TEST_PREFIX, pool_size=2)
    aq = aio.AsyncQueue(queue)

    async def many() -> int:
        return len(await asyncio.gather(*(aq.enqueue(qname, i) for i in range(8))))
    try:
        assert asyncio.run(many()) == 8 and asyncio.run(many()) == 8
        assert len(queue.jobs(queue=qname, limit=100)) == 16
    finally:
        asyncio.run(aq.close())


def test_a_cursor_coroutine_the_bridge_does_not_wrap_is_refused(target: Any,
                                                              engine_url: str) -> None:
    """An AsyncCursor method the bridge does not await (fetchmany) raises instead of
    returning an un-awaited coroutine."""
    _need(target.engine, ("postgres",))

    async def body(q: aio.AsyncQueue) -> None:
        backend = q.backend
        with pytest.raises(AttributeError, match="fetchmany"):
            await q.runner.call(backend.run, "many", lambda cur: backend.execute(
                cur, "SELECT 1").fetchmany(1))
        assert await q.runner.call(backend.run, "one", lambda cur: backend.execute(
            cur, "SELECT 1").fetchone()[0]) == 1
    run(engine_url, body)


LIMITED_ROLE = "portq_f_aio_limited"  # this file's own: another test's role keeps its limit


def _admin_sql(admin: portq.Queue, sql: str) -> None:
    admin.backend.run("admin", lambda cur: cur.execute(sql))


@pytest.fixture
def limited_pg_url(target: Any, engine_url: str) -> Iterator[str]:
    """The PostgreSQL test database as a role that may hold 2 connections at once."""
    _need(target.engine, ("postgres",))
    database = portq.url.parse_url(engine_url).database
    with portq.connect(engine_url) as admin:
        for sql in (f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
                    f"'{LIMITED_ROLE}') THEN CREATE ROLE {LIMITED_ROLE} LOGIN CONNECTION "
                    f"LIMIT 2; END IF; END $$",
                    f"GRANT ALL ON SCHEMA public TO {LIMITED_ROLE}",
                    f"GRANT CONNECT, CREATE ON DATABASE {database} TO {LIMITED_ROLE}"):
            _admin_sql(admin, sql)
        try:
            yield engine_url.replace("postgres@", f"{LIMITED_ROLE}@", 1)
        finally:
            for sql in (f"DROP OWNED BY {LIMITED_ROLE}", f"DROP ROLE {LIMITED_ROLE}"):
                _admin_sql(admin, sql)


def test_a_full_server_makes_the_async_pool_wait_for_one_of_its_own(
        limited_pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Three operations at once hold a connection each; the server lets the role have
    two: the third waits for one of the pool's (logged once), then all finish."""
    caplog.set_level("WARNING", logger="portq.pool")

    async def body(q: aio.AsyncQueue) -> tuple[list[int], int]:
        q.queue.backend.pool.close()  # the sync Queue's connection: not this test's
        backend = q.backend
        gate = asyncio.Event()

        def op(cur: Any) -> int:
            sid = int(backend.execute(cur, "SELECT pg_backend_pid()").fetchone()[0])
            from portq.aio_bridge import await_
            await_(gate.wait())
            return sid
        first = [asyncio.create_task(q.runner.call(backend.run, "hold", op))
                 for _ in range(2)]
        try:
            await asyncio.sleep(0.3)
            third = asyncio.create_task(q.runner.call(backend.run, "hold", op))
            await asyncio.sleep(0.5)
            waited = not third.done()
        finally:
            gate.set()  # the holders end either way (close waits for them)
        sids = await asyncio.gather(*first, third)
        assert waited, "the third should have waited for a connection, not failed"
        return sids, q.runner.pool.size  # type: ignore[attr-defined]

    sids, size = run(limited_pg_url, body, pool_size=4)
    assert len(set(sids)) == 2 and size == 2
    assert caplog.text.count("pool.server_full") == 1
