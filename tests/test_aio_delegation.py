"""portq.aio is delegation (issue 28 item 2): each AsyncQueue method runs the sync Queue's
operation, on every engine, and a caller's psycopg AsyncConnection takes the same sync
operation through the greenlet bridge (jobs with dependencies included)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import portq
from portq import aio
from portq.aio_bridge import await_, run_sync
from portq.conformance.plugin import TEST_PREFIX


def run(url: str, body: Callable[[aio.AsyncQueue], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with await aio.connect(url, prefix=TEST_PREFIX, pool_size=4) as q:
            return await body(q)
    return asyncio.run(main())


def test_async_queue_methods_are_the_sync_queues() -> None:
    """Every public coroutine of AsyncQueue has the sync Queue's name and parameters."""
    for name, method in inspect.getmembers(aio.AsyncQueue, inspect.iscoroutinefunction):
        if name.startswith("_") or name in ("open", "close", "cancelled"):
            continue
        sync = inspect.signature(getattr(portq.Queue, name)).parameters
        mine = [p for p in inspect.signature(method).parameters.values()
                if p.kind is not p.VAR_KEYWORD]
        assert all(p.name in sync for p in mine), name


def test_every_operation_on_every_engine(engine_url: str, queue: portq.Queue,
                                         qname: str) -> None:
    async def body(q: aio.AsyncQueue) -> None:
        first = await q.enqueue(qname, {"n": 1})
        second = (await q.enqueue_many([{"queue": qname, "payload": 2,
                                         "depends_on": [first]}]))[0]
        (job,) = await q.claim(qname, "w", limit=5, lease=30)
        assert job.id == first
        assert await q.set_progress(job, 0.5, "half")
        assert await q.renew(job, 30) and await q.renew_many([job], 30) == [True]
        assert await q.snooze(job, 0)
        (job,) = await q.claim(qname, "w", limit=5)
        assert await q.fail(job, "boom", retry_in=0)
        (job,) = await q.claim(qname, "w", limit=5)
        assert await q.store_result(job, {"ok": 1})
        assert await q.complete_many([job]) == [True]
        assert not await q.complete(job)  # fenced: already completed
        assert await q.result(first) == {"ok": 1}
        (dependent,) = await q.claim(qname, "w", limit=5)
        assert dependent.id == second and await q.release(dependent)
        assert (await q.job(second)).state == "ready"  # type: ignore[union-attr]
        assert [r.id for r in await q.jobs("ready", queue=qname)] == [second]
        assert await q.cancel(second) and await q.cancelled([dependent]) == [True]
        assert await q.retry_dead(second)
        await q.pause(qname)
        assert qname in await q.paused_queues()
        await q.resume(qname)
        await q.set_concurrency_limit(qname, 3)
        await q.set_rate_limit(qname, 10, 1.0)
        await q.set_fairness(qname, True)
        stats = {s.queue: s for s in await q.stats(qname)}
        assert stats[qname].concurrency_limit == 3 and stats[qname].fair
        third = await q.enqueue(qname, {"n": 3})
        claimed = await q.claim(qname, "w", limit=5, lease=0.05)
        assert third in [j.id for j in claimed]
        await asyncio.sleep(0.2)
        # reap covers every queue (other tests' expired leases too): look at this one's job
        assert await q.reap(limit=10_000, delay=0) >= 1
        assert (await q.job(third)).state == "ready"  # type: ignore[union-attr]
        assert await q.prune(3600, queue=qname) == 0
        assert isinstance(await q.job_stats("1h", qname), list)
        assert await q.migrate() >= 1
    run(engine_url, body)


def test_psycopg_async_connection_takes_dependent_jobs(engine_url: str, queue: portq.Queue,
                                                       qname: str) -> None:
    """Through the bridge, depends_on joins the caller's async transaction (it was
    refused when portq.aio had its own PostgreSQL operations)."""
    async def body(q: aio.AsyncQueue) -> tuple[int, int]:
        if not q.native:
            pytest.skip("a psycopg AsyncConnection is PostgreSQL's")
        import psycopg
        base = await q.enqueue(qname, "base")
        kw = q.backend.connect_kwargs()  # type: ignore[attr-defined]
        async with await psycopg.AsyncConnection.connect(**kw) as conn:
            await q.enqueue(qname, "gone", depends_on=[base], conn=conn)
            await conn.rollback()
            dependent = await q.enqueue(qname, "after", depends_on=[base], conn=conn)
            assert (await q.job(dependent)) is None  # not committed yet
            await conn.commit()
        return base, dependent

    base, dependent = run(engine_url, body)
    assert queue.backend.job_graph(dependent)[0] == [(base, "ready")]
    assert [r.payload for r in queue.jobs(queue=qname)] == ["base", "after"]


def test_bridge_awaits_each_call_and_keeps_the_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    def sync(n: int) -> tuple[int, str]:
        total = sum(await_(asyncio.sleep(0, result=i)) for i in range(n))
        return total, var.get()

    def failing() -> None:
        await_(asyncio.sleep(0))
        raise KeyError("inside")

    async def main() -> tuple[int, str]:
        var.set("caller's")
        with pytest.raises(KeyError, match="inside"):
            await run_sync(failing)
        return await run_sync(sync, 5)
    assert asyncio.run(main()) == (10, "caller's")
    with pytest.raises(RuntimeError, match="outside"):
        await_(_Done())


class _Done:
    """An awaitable that is done at once."""

    def __await__(self) -> Iterator[None]:
        return iter(())
