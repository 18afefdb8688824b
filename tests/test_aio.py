"""The asyncio API on every engine: the conformance invariants of transactional enqueue
(a psycopg AsyncConnection on PostgreSQL, the sync driver's connection elsewhere), no
duplicate claims and fencing, and AsyncWorker."""

from __future__ import annotations

import asyncio
import collections
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

import portq
from portq import aio
from portq.conformance.helpers import RenewalRace, counts
from portq.conformance.plugin import TEST_PREFIX, raw_connection
from portq.worker import RetryAfter


@pytest.fixture
def async_url(engine_url: str) -> str:
    """Every engine under test: portq.aio runs on each (natively on PostgreSQL)."""
    return engine_url


def run(async_url: str, body: Callable[[aio.AsyncQueue], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with await aio.connect(async_url, prefix=TEST_PREFIX, pool_size=12) as q:
            return await body(q)
    return asyncio.run(main())


async def user_connection(q: aio.AsyncQueue) -> Any:
    """The application's own connection: psycopg AsyncConnection, or sqlite3 on SQLite."""
    if q.native:
        import psycopg
        return await psycopg.AsyncConnection.connect(
            autocommit=False, **q.backend.connect_kwargs())  # type: ignore[attr-defined]
    return raw_connection(q.queue)


async def finish(conn: Any, commit: bool) -> None:
    result = conn.commit() if commit else conn.rollback()
    if asyncio.iscoroutine(result):
        await result
    closed = conn.close()
    if asyncio.iscoroutine(closed):
        await closed


def test_transactional_enqueue_commit_and_rollback(async_url: str, queue: portq.Queue,
                                                   qname: str) -> None:
    async def body(q: aio.AsyncQueue) -> tuple[int, int, int]:
        conn = await user_connection(q)
        await q.enqueue(qname, "rolled back", conn=conn)
        assert counts(queue, qname)["ready"] == 0, "uncommitted job visible"
        await finish(conn, commit=False)
        conn = await user_connection(q)
        existing = await q.enqueue(qname, "old", key=f"{qname}-k")  # portq's own txn
        kept = await q.enqueue(qname, {"kept": True}, conn=conn)
        again = await q.enqueue(qname, "dup", key=f"{qname}-k", conn=conn)
        assert again == existing
        many = await q.enqueue_many([{"queue": qname, "payload": i} for i in range(3)],
                                    conn=conn)
        assert counts(queue, qname)["ready"] == 1
        await finish(conn, commit=True)  # the key conflict did not abort the transaction
        return kept, existing, len(many)

    kept, existing, n = run(async_url, body)
    ids = {j.id: j.payload for j in queue.claim(qname, "w", limit=20)}
    assert len(ids) == 2 + n and ids[kept] == {"kept": True} and ids[existing] == "old"
    assert "rolled back" not in ids.values()


#: Queue methods with no async twin: they validate or insert for the async ones
SYNC_HELPERS = {"dump_payload", "dump_result", "insert_on", "new_job", "new_jobs"}


def test_every_queue_operation_has_its_async_twin() -> None:
    """Every public method of portq.Queue but its validation and insert helpers has an
    AsyncQueue method of the same name, a coroutine (``add_*`` configure, and are plain
    on both), taking every parameter with the same default but a caller's sync
    connection (``conn`` of the reads, which the async API leaves out); a parameter of its
    own has a default (``close(queue=True)``). It caught ``prune`` without ``states``."""
    import inspect
    for name, fn in inspect.getmembers(portq.Queue, inspect.isfunction):
        if name.startswith("_") or name in SYNC_HELPERS:
            continue
        twin = getattr(aio.AsyncQueue, name, None)
        assert twin is not None, name
        assert inspect.iscoroutinefunction(twin) != name.startswith("add_"), name
        ours = {k: v.default for k, v in inspect.signature(twin).parameters.items()}
        theirs = {k: v.default for k, v in inspect.signature(fn).parameters.items()}
        if "conn" not in ours:
            theirs.pop("conn", None)
        assert {k: ours.get(k) for k in theirs} == theirs, (name, ours, theirs)
        assert all(ours[k] is not inspect.Parameter.empty for k in set(ours) - set(theirs)), \
            (name, ours)


def test_async_operator_reads_and_bulk_actions(async_url: str, queue: portq.Queue,
                                               qname: str) -> None:
    """The async twins of the operator methods act and read as the sync ones do."""
    from portq.job import State
    first = queue.enqueue(qname, {"n": 1}, max_attempts=1)
    keyed = queue.enqueue(f"{qname}-k", 2, concurrency_key="acct", concurrency_limit=2)

    async def body(q: aio.AsyncQueue) -> None:
        created = await q.enqueue_result(qname, {"n": 2}, key=f"{qname}-key")
        again = await q.enqueue_result(qname, {"n": 3}, key=f"{qname}-key")
        assert created.created and not again.created and again.id == created.id
        (job,) = await q.claim(qname, "w1", limit=1)
        assert job.id == first and await q.fail(job, "boom", retry_in=None)
        assert [e[2] for e in await q.job_errors(first)] == ["boom"]
        assert [e.error for e in await q.error_history(first)] == ["boom"]
        assert await q.retry_many(qname, states=[State.DEAD]) == 1
        assert await q.cancel_many(qname, states=[State.READY]) == 2
        assert await q.delete_finished(created.id) is True
        assert await q.delete_finished(created.id) is False
        assert await q.dependency_results(first) == {}
        assert await q.concurrency_of(keyed) == ("acct", 2)
        (claimed,) = await q.claim(f"{qname}-k", "w2", limit=1)
        assert await q.key_limits(f"{qname}-k") == [("acct", 2, 1)]
        assert await q.complete(claimed)
        assert sum((await q.finished_per_minute(5)).get(f"{qname}-k", {}).get(
            "succeeded", [])) == 1
        assert isinstance(await q.workers(), list)
        assert isinstance(await q.worker_activity(), dict)
        assert [r.id for r in await q.jobs(queue=qname, key=f"{qname}-key")] == []
        dead = await q.enqueue(f"{qname}-d", 0, max_attempts=1)
        (job,) = await q.claim(f"{qname}-d", "w3", limit=1)
        assert await q.fail(job, "gone", retry_in=None)
        await asyncio.sleep(0.01)  # finished before the database's now, even in ms
        assert await q.prune(0, states=[State.DEAD], queue=f"{qname}-d") == 1
        assert await q.job(dead) is None
    run(async_url, body)
    assert counts(queue, qname)["cancelled"] == 1


def test_concurrent_async_claimers_never_share_a_job(async_url: str, queue: portq.Queue,
                                                     qname: str) -> None:
    total = 300
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(total)])

    async def claimer(q: aio.AsyncQueue, n: int, seen: list[tuple[int, int, str]]) -> None:
        wid = f"aw-{n}"
        while True:
            jobs = await q.claim(qname, wid, limit=7, lease=60)
            if not jobs:
                return
            for job in jobs:
                seen.append((job.id, job.attempt, wid))
            done = await asyncio.gather(*(q.complete(j) for j in jobs))
            assert all(done)

    async def body(q: aio.AsyncQueue) -> list[tuple[int, int, str]]:
        seen: list[tuple[int, int, str]] = []
        await asyncio.gather(*(claimer(q, n, seen) for n in range(8)))
        return seen

    seen = run(async_url, body)
    per_job = collections.Counter(job_id for job_id, _, _ in seen)
    assert len(per_job) == total and max(per_job.values()) == 1
    assert len({w for _, _, w in seen}) > 1, "only one claimer ever got jobs"
    assert counts(queue, qname)["succeeded"] == total


def test_fencing_stale_claim_cannot_finish(async_url: str, queue: portq.Queue,
                                           qname: str) -> None:
    async def body(q: aio.AsyncQueue) -> None:
        job_id = await q.enqueue(qname, "x")
        (stale,) = await q.claim(qname, "old-owner", lease=0.2)
        await asyncio.sleep(0.5)
        assert not await q.renew(stale), "expired lease renewed"
        # reap is global: a concurrent test's worker may reap this job first (with a delay)
        await q.reap(delay=0)
        fresh = None
        for _ in range(100):
            jobs = await q.claim(qname, "new-owner", lease=30)
            if jobs:
                (fresh,) = jobs
                break
            await asyncio.sleep(0.1)
        assert fresh is not None, "the expired job was never reclaimed"
        assert (fresh.id, fresh.attempt) == (job_id, 2)
        assert not await q.complete(stale)
        assert not await q.fail(stale, "late", retry_in=0)
        assert not await q.release(stale)
        assert not await q.renew(stale)
        assert await q.renew(fresh)
        assert await q.complete(fresh)
    run(async_url, body)
    c = counts(queue, qname)
    assert (c["succeeded"], c["ready"], c["running"]) == (1, 0, 0)


def test_release_many_gives_back_owned_claims_in_one_call(async_url: str,
                                                          queue: portq.Queue,
                                                          qname: str) -> None:
    """``AsyncQueue.release_many``: the owned claims go back to ready, their attempts
    given back; a claim given back already is refused, per job."""
    async def body(q: aio.AsyncQueue) -> None:
        await q.enqueue_many([{"queue": qname, "payload": i, "max_attempts": 1}
                              for i in range(3)])
        a, b, c = sorted(await q.claim(qname, "owner", limit=3, lease=30),
                         key=lambda j: j.id)
        assert await q.release(b)
        assert await q.release_many([c, b, a]) == [True, False, True]
        again = sorted(await q.claim(qname, "next", limit=3, lease=30), key=lambda j: j.id)
        assert [(j.id, j.attempt, j.max_attempts) for j in again] == \
            [(a.id, 2, 2), (b.id, 2, 2), (c.id, 2, 2)]
        assert await q.complete_many(again) == [True, True, True]
    run(async_url, body)
    assert counts(queue, qname)["succeeded"] == 3


def test_async_worker_runs_handlers_with_bounded_concurrency(
        async_url: str, queue: portq.Queue, qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(40)])
    dead_id = queue.enqueue(qname, "dead")
    retry_id = queue.enqueue(qname, "retry")
    runs: collections.Counter[int] = collections.Counter()
    active = {"now": 0, "max": 0}

    async def handler(job: portq.Job) -> None:
        runs[job.id] += 1
        active["now"] += 1
        active["max"] = max(active["max"], active["now"])
        try:
            await asyncio.sleep(0.02)
            if job.payload == "dead":
                raise portq.Permanent("no")
            if job.payload == "retry" and job.attempt == 1:
                raise RetryAfter(0)
        finally:
            active["now"] -= 1

    async def body(q: aio.AsyncQueue) -> Any:
        worker = aio.AsyncWorker(q, qname, handler, concurrency=5, burst=True,
                                 idle_min=0.01, idle_max=0.1)
        return await asyncio.wait_for(worker.run(), 60)

    counters = run(async_url, body)
    assert (counters.succeeded, counters.dead, counters.retried) == (41, 1, 1)
    assert runs[dead_id] == 1 and runs[retry_id] == 2 and len(runs) == 42
    assert 1 < active["max"] <= 5
    assert queue.jobs("dead", queue=qname)[0].id == dead_id


def test_async_worker_stop_releases_unfinished_jobs(async_url: str, queue: portq.Queue,
                                                    qname: str) -> None:
    job_id = queue.enqueue(qname, "long", max_attempts=3)

    async def body(q: aio.AsyncQueue) -> Any:
        began = asyncio.Event()

        async def handler(job: portq.Job) -> None:
            began.set()
            await asyncio.sleep(30)

        worker = aio.AsyncWorker(q, qname, handler, concurrency=2, grace=0.2)
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(began.wait(), 30)
        worker.stop()
        return await asyncio.wait_for(task, 30)

    counters = run(async_url, body)
    assert counters.released == 1 and counters.succeeded == 0
    (again,) = queue.claim(qname, "w")
    # a new generation (fencing), but the released attempt was given back
    assert (again.id, again.attempt, again.max_attempts) == (job_id, 2, 4)


def test_async_connection_refused_where_it_cannot_work(async_url: str, qname: str) -> None:
    async def body(q: aio.AsyncQueue) -> None:
        if q.native:
            with pytest.raises(portq.ConfigurationError, match="needs a psycopg"):
                await q.enqueue(qname, 1, conn=object())
        else:
            import psycopg
            pg_url = os.environ.get("PORTQ_TEST_PG_URL",
                                    "postgresql://postgres@127.0.0.1:5432/test")
            try:
                conn = await psycopg.AsyncConnection.connect(pg_url, connect_timeout=5)
            except psycopg.OperationalError as exc:
                pytest.skip(f"needs a PostgreSQL connection object: {exc}")
            try:
                with pytest.raises(portq.ConfigurationError, match="AsyncConnection"):
                    await q.enqueue(qname, 1, conn=conn)
            finally:
                await conn.close()
    run(async_url, body)


@pytest.mark.parametrize("taken_away", [False, True], ids=["completed", "cancelled"])
def test_async_worker_counts_a_loss_only_when_ownership_was_lost(
        async_url: str, queue: portq.Queue, qname: str, taken_away: bool) -> None:
    """After each completion, once the worker let go of its lock on writes to its own
    rows, a renewal made after it is refused before the worker goes on (the race between
    the heartbeat and the job's own completion, made certain: RenewalRace). A job
    completed by this worker is not lost; one cancelled just before its completion is
    lost once."""
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(4)])

    def cancel(jobs: Sequence[portq.Job]) -> None:
        if taken_away:
            for job in jobs:
                assert queue.cancel(job.id)

    async def body(q: aio.AsyncQueue) -> tuple[Any, set[int]]:
        async def handler(job: portq.Job) -> None:
            await asyncio.sleep(0)

        worker = aio.AsyncWorker(q, qname, handler, concurrency=2, lease=1.2, burst=True,
                                 idle_min=0.01, idle_max=0.1)
        # the runtime writes through the sync Queue on threads of its own (never on the
        # event loop), so the race is arranged there
        with RenewalRace(worker, before_write=cancel) as race:
            counters = await asyncio.wait_for(worker.run(), 60)
        assert race.timeouts == 0
        return counters, {job_id for job_id, _ in race.refused}

    counters, refused = run(async_url, body)
    assert refused == set(ids), "the race did not happen"
    # an operator's cancel is counted as cancelled, not as a loss (see test_cancel.py)
    expected = (0, 0, 4) if taken_away else (4, 0, 0)
    assert (counters.succeeded, counters.lost, counters.cancelled) == expected
    assert counts(queue, qname)["cancelled" if taken_away else "succeeded"] == 4


def test_async_worker_registers_heartbeats_and_deregisters(async_url: str, queue: portq.Queue,
                                                           qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(2)])
    seen: list[portq.job.WorkerInfo] = []

    async def body(q: aio.AsyncQueue) -> list[portq.job.WorkerInfo]:
        began = asyncio.Event()

        async def handler(job: portq.Job) -> None:
            began.set()
            await asyncio.sleep(1.0)

        worker = aio.AsyncWorker(q, qname, handler, concurrency=3, registry_interval=0.2)
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(began.wait(), 30)
        for _ in range(50):  # the registry beats every 0.2 s
            rows = [w for w in await asyncio.to_thread(queue.workers)
                    if w.worker_id == worker.worker_id]
            if rows and rows[0].jobs_in_hand > 0:
                seen.extend(rows)
                break
            await asyncio.sleep(0.1)
        worker.stop()
        await asyncio.wait_for(task, 30)
        return [w for w in await asyncio.to_thread(queue.workers)
                if w.worker_id == worker.worker_id]

    after = run(async_url, body)
    assert seen and seen[0].queues == (qname,) and seen[0].concurrency == 3
    assert seen[0].jobs_in_hand > 0
    assert after == [], "a stopped AsyncWorker must deregister"


def test_async_worker_is_woken_by_enqueue(async_url: str, queue: portq.Queue,
                                          qname: str) -> None:
    """Where the engine has a listener (PostgreSQL's LISTEN/NOTIFY, SQLite's data_version)
    the AsyncWorker's cuts its idle sleep short: with polls 5 s apart, a job enqueued while
    it sleeps still starts within a second."""
    listener = queue.backend.listener([qname])
    if listener is None:
        pytest.skip(f"{queue.backend.engine} announces no new jobs: workers poll")
    listener.close()

    async def body(q: aio.AsyncQueue) -> float:
        started = asyncio.Event()

        async def handler(job: portq.Job) -> None:
            started.set()

        worker = aio.AsyncWorker(q, qname, handler, idle_min=5.0, idle_max=5.0,
                                 registry_interval=None)
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(1.0)  # its first, empty claim is done: it sleeps 2.5-5 s
        enqueued = time.monotonic()
        await q.enqueue(qname, "wake")
        await asyncio.wait_for(started.wait(), 10)
        waited = time.monotonic() - enqueued
        worker.stop()
        await asyncio.wait_for(task, 30)
        return waited

    assert run(async_url, body) < 1.0


def test_async_worker_reaps_expired_leases(async_url: str, queue: portq.Queue,
                                           qname: str) -> None:
    """A job whose owner vanished (lease expired) is reaped by the AsyncWorker's main loop
    and run again with a new generation."""
    job_id = queue.enqueue(qname, "orphan")
    (ghost,) = queue.claim(qname, "ghost-worker", lease=0.2)
    time.sleep(0.4)

    async def body(q: aio.AsyncQueue) -> tuple[Any, list[int]]:
        attempts: list[int] = []

        async def handler(job: portq.Job) -> None:
            attempts.append(job.attempt)

        worker = aio.AsyncWorker(q, qname, handler, reap_interval=0.1, reap_delay=0,
                                 idle_min=0.01, idle_max=0.05, registry_interval=None)
        task = asyncio.create_task(worker.run())
        for _ in range(200):
            if attempts:
                break
            await asyncio.sleep(0.05)
        worker.stop()
        return await asyncio.wait_for(task, 30), attempts

    counters, attempts = run(async_url, body)
    assert attempts == [ghost.attempt + 1] and counters.reaped >= 1
    assert counters.succeeded == 1 and not queue.complete(ghost)  # the ghost is fenced off
    assert counts(queue, qname)["succeeded"] == 1 and queue.job(job_id) is not None


def test_async_worker_keeps_its_threads_for_plain_handlers(async_url: str,
                                                           queue: portq.Queue,
                                                           qname: str) -> None:
    """Plain handlers run on threads the worker keeps: 60 jobs at concurrency 3 use at most
    3 threads, and never the event loop's."""
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(60)])
    threads: set[int] = set()

    def handler(job: portq.Job) -> None:
        threads.add(threading.get_ident())
        time.sleep(0.002)

    async def body(q: aio.AsyncQueue) -> Any:
        worker = aio.AsyncWorker(q, qname, handler, concurrency=3, burst=True,
                                 idle_min=0.01, idle_max=0.05, registry_interval=None)
        return await asyncio.wait_for(worker.run(), 60), threading.get_ident()

    counters, loop_thread = run(async_url, body)
    assert counters.succeeded == 60
    assert 1 <= len(threads) <= 3 and loop_thread not in threads
