"""The worker runtime against handlers and databases that misbehave, on both fronts: a
handler that raises ``SystemExit``/``KeyboardInterrupt`` (or its own ``CancelledError``),
a claim that comes back too late to start its jobs, handler slots that never free, a job
that runs past its timeout, and a database call that stalls."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import portq
from portq.conformance.helpers import counts, quiet_worker, raw_update, running, wait_until
from portq.conformance.plugin import raw_connection
from portq.job import Job
from portq.queue import MAX_SNOOZES
from portq.retry import Backoff


def test_a_handler_that_exits_fails_its_attempt_and_the_slot_keeps_serving(
        queue: portq.Queue, qname: str, worker_front: str) -> None:
    """``sys.exit()`` and ``KeyboardInterrupt`` in a handler (and, on the asyncio front, a
    handler's own ``CancelledError``) are that attempt's failure, recorded with its type;
    the one handler slot goes on to run the ordinary jobs, each once, generation 1."""
    raisers: dict[int, BaseException] = {
        queue.enqueue(qname, "exit", max_attempts=1): SystemExit(3),
        queue.enqueue(qname, "interrupt", max_attempts=1): KeyboardInterrupt(),
    }
    if worker_front == "AsyncWorker":
        raisers[queue.enqueue(qname, "cancel", max_attempts=1)] = asyncio.CancelledError()
    ordinary = [queue.enqueue(qname, i, max_attempts=1) for i in range(3)]
    ran: list[tuple[int, int]] = []

    def handler(job: Job) -> None:
        ran.append((job.id, job.attempt))
        if job.id in raisers:
            raise raisers[job.id]

    worker = quiet_worker(queue, qname, handler, concurrency=1, lease=5, idle_min=0.01,
                          idle_max=0.05, burst=True)
    with running(worker):
        assert wait_until(lambda: counts(queue, qname)["succeeded"] == 3 and
                          counts(queue, qname)["dead"] == len(raisers), timeout=30), \
            counts(queue, qname)
    assert sorted(ran) == sorted((i, 1) for i in [*raisers, *ordinary])
    for job_id, exc in raisers.items():
        record = queue.job(job_id)
        assert record is not None and record.state == "dead" and record.attempts == 1
        assert type(exc).__name__ in (record.last_error or ""), record.last_error
    assert (worker.counters.succeeded, worker.counters.dead, worker.counters.released) == \
        (3, len(raisers), 0)


def test_a_claim_that_comes_back_after_half_its_lease_starts_none_of_its_jobs(
        queue: portq.Queue, qname: str) -> None:
    """A claim whose answer arrives with less than half of its jobs' lease left (a commit
    stalled in replication, a paused process) gives its jobs back unstarted: another
    worker's reaper may already be handing them out. They then run once, generation 2."""
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    claim = queue.claim
    stalled = threading.Event()

    def slow_first_claim(*args: Any, **kwargs: Any) -> list[Job]:
        jobs = claim(*args, **kwargs)
        if jobs and not stalled.is_set():
            stalled.set()
            # of a 3 s lease: the claim "commits" late, with 1.4 s of it left (less than
            # half). Between the heartbeat's ticks (every lease/3, from the worker's start:
            # 1 s, 2 s): with 0.8 s of a 1.2 s lease the claim came back on a tick (0.8 s),
            # and a busy machine let that tick renew the jobs before their start check, so
            # they started (rightly: a renewed lease is whole again) and the test failed
            time.sleep(1.6)
        return jobs
    queue.claim = slow_first_claim  # type: ignore[method-assign]
    ran: list[tuple[int, int]] = []
    try:
        worker = quiet_worker(queue, qname, lambda job: ran.append((job.id, job.attempt)),
                              concurrency=3, lease=3.0, idle_min=0.01, idle_max=0.05)
        with running(worker):
            assert wait_until(lambda: counts(queue, qname)["succeeded"] == 3, timeout=30)
    finally:
        del queue.claim
    assert sorted(ran) == [(i, 2) for i in ids], ran
    assert worker.counters.released == 3


def test_a_job_past_its_timeout_fails_with_job_timeout_and_is_retried(
        queue: portq.Queue, qname: str) -> None:
    """``job_timeout``: the attempt fails with JobTimeout (retried by the policy, dead when
    spent), the handler is told (``job.cancelled()``; an async handler's task is
    cancelled), and the slot serves the next job."""
    slow = queue.enqueue(qname, "slow", max_attempts=2)
    quick = queue.enqueue(qname, "quick")
    told: list[bool] = []

    async def handler(job: Job) -> None:
        if job.id == slow:
            try:
                await asyncio.sleep(10)
            finally:
                told.append(job.cancelled() and job.timed_out())

    worker = quiet_worker(queue, qname, handler, concurrency=1, lease=2, job_timeout=0.3,
                          idle_min=0.01, idle_max=0.05,
                          backoff=Backoff("fixed", 0.0))
    with running(worker):
        assert wait_until(lambda: counts(queue, qname)["dead"] == 1 and
                          counts(queue, qname)["succeeded"] == 1, timeout=30), \
            counts(queue, qname)
    record = queue.job(slow)
    assert record is not None and record.attempts == 2
    assert "JobTimeout" in (record.last_error or "") and "0.3s" in (record.last_error or "")
    assert told == [True, True]
    assert worker.counters.timed_out == 2 and worker.counters.succeeded == 1
    assert queue.job(quick) is not None


def test_a_thread_that_ignores_its_timeout_is_abandoned_and_replaced(
        queue: portq.Queue, qname: str, worker_front: str) -> None:
    """A plain handler that does not stop after its timeout keeps its thread; the jobs
    behind it still run, on another thread. The thread front abandons that thread after
    the grace (never reused, counted) and starts another for the slot; the asyncio front
    cancels the task awaiting it at once, so its slot frees without an abandonment."""
    stuck = queue.enqueue(qname, "stuck", max_attempts=1)
    others = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(2)])
    gate = threading.Event()
    threads: dict[int, str] = {}

    def handler(job: Job) -> None:
        threads[job.id] = threading.current_thread().name
        if job.id == stuck:
            gate.wait(20)  # ignores job.cancelled()

    worker = quiet_worker(queue, qname, handler, concurrency=1, lease=2, job_timeout=0.3,
                          grace=0.3, idle_min=0.01, idle_max=0.05)
    try:
        with running(worker):
            assert wait_until(lambda: counts(queue, qname)["succeeded"] == 2, timeout=20)
            assert worker.counters.abandoned == (1 if worker_front == "Worker" else 0)
    finally:
        gate.set()
    assert {threads[i] for i in others}.isdisjoint({threads[stuck]})
    record = queue.job(stuck)
    assert record is not None and record.state == "dead"
    assert "JobTimeout" in (record.last_error or "")


def test_a_dead_workers_jobs_come_back_about_one_lease_after_it_died(
        queue: portq.Queue, qname: str) -> None:
    """A worker died holding a job (its 1.5 s lease runs out): another worker's reaper,
    on its default 10 s interval, runs when that lease expires (it reads the earliest
    expiry), so the job runs again about one lease after the death, not a reap tick later."""
    job_id = queue.enqueue(qname, "x")
    [claimed] = queue.claim(qname, "died:1:0", limit=1, lease=1.5)
    died = time.monotonic()
    ran_at: list[float] = []
    worker = quiet_worker(queue, qname, lambda job: ran_at.append(time.monotonic()),
                          lease=2, reap_interval=10.0, reap_delay=0, idle_min=0.01,
                          idle_max=0.05)
    with running(worker):
        assert wait_until(lambda: bool(ran_at), timeout=20)
    assert claimed.id == job_id
    assert ran_at[0] - died < 1.5 + 1.5, ran_at[0] - died


def test_a_jobs_own_timeout_outranks_the_workers(queue: portq.Queue, qname: str) -> None:
    """``enqueue(timeout=)`` (and a task's ``timeout``) bounds that job's attempts whatever
    the worker's ``job_timeout``; a job without one keeps the worker's."""
    short = queue.enqueue(qname, "short", timeout="300ms", max_attempts=1)
    plain = queue.enqueue(qname, "plain", max_attempts=1)
    ran: dict[int, float] = {}

    async def handler(job: Job) -> None:
        started = time.monotonic()
        try:
            await asyncio.sleep(0.8)
        finally:
            ran[job.id] = time.monotonic() - started

    worker = quiet_worker(queue, qname, handler, concurrency=2, lease=5, job_timeout=30,
                          idle_min=0.01, idle_max=0.05)
    with running(worker):
        assert wait_until(lambda: counts(queue, qname)["dead"] == 1 and
                          counts(queue, qname)["succeeded"] == 1, timeout=30), \
            counts(queue, qname)
    record = queue.job(short)
    assert record is not None and "JobTimeout" in (record.last_error or "")
    assert ran[short] < 0.7 <= ran[plain]


def test_snooze_reschedules_without_spending_an_attempt(queue: portq.Queue,
                                                        qname: str) -> None:
    """``raise portq.Snooze(delay)``: the job runs again after the delay, its attempt
    given back (max_attempts 1 and three snoozes: it still runs to success); RetryAfter
    spends one."""
    job_id = queue.enqueue(qname, "x", max_attempts=1)
    seen: list[tuple[int, float]] = []

    def handler(job: Job) -> None:
        seen.append((job.attempt, time.monotonic()))
        if len(seen) <= 3:
            raise portq.Snooze("200ms")

    worker = quiet_worker(queue, qname, handler, concurrency=1, lease=5, idle_min=0.01,
                          idle_max=0.05)
    with running(worker):
        assert wait_until(lambda: counts(queue, qname)["succeeded"] == 1, timeout=30), \
            counts(queue, qname)
    assert [a for a, _ in seen] == [1, 2, 3, 4]
    assert all(b - a >= 0.19 for (_, a), (_, b) in itertools.pairwise(seen))
    record = queue.job(job_id)
    assert record is not None and record.max_attempts == 4  # 1 + three given back
    assert worker.counters.snoozed == 3 and worker.counters.retried == 0


def test_a_job_snoozed_past_the_most_counts_the_attempt_as_failed(
        queue: portq.Queue, qname: str) -> None:
    """Past MAX_SNOOZES a Snooze is that attempt's failure, naming the bound."""
    job_id = queue.enqueue(qname, "x", max_attempts=1)
    assert raw_update(queue, "UPDATE portq_job SET snoozes = :n WHERE job_id = :job_id",
                      {"n": MAX_SNOOZES, "job_id": job_id}) is None

    def handler(job: Job) -> None:
        raise portq.Snooze(0)

    worker = quiet_worker(queue, qname, handler, concurrency=1, lease=5, idle_min=0.01,
                          idle_max=0.05)
    with running(worker):
        assert wait_until(lambda: counts(queue, qname)["dead"] == 1, timeout=30)
    record = queue.job(job_id)
    assert record is not None and f"snoozed {MAX_SNOOZES} times" in (record.last_error or "")


def test_give_backs_keep_the_attempt_only_within_the_jobs_budget(queue: portq.Queue,
                                                                 qname: str) -> None:
    """``release`` gives the attempt back while the job's give-backs stay under its own
    budget; then it spends the attempt, and a job with none left goes dead saying why: a
    job is never claimed without end without a handler running it."""
    job_id = queue.enqueue(qname, "x", max_attempts=2)
    claims = 0
    while True:
        jobs = queue.claim(qname, "giver:1:0", limit=1, lease=30)
        if not jobs:
            break
        claims += 1
        assert queue.release(jobs[0])
        assert claims < 50, "claimed without end"
    record = queue.job(job_id)
    assert record is not None and record.state == "dead"
    assert "given back unstarted" in (record.last_error or "")
    # budget 2: two give-backs kept the attempt (max 2 -> 4), then attempts 3 and 4 spent
    assert claims == 4 and record.attempts == record.max_attempts == 4


@contextmanager
def table_locked(queue: portq.Queue) -> Iterator[None]:
    """Another session holds a lock every claim of the job table waits for."""
    conn = raw_connection(queue)
    table = f"{queue.backend.prefix}job"
    cur = conn.cursor()
    engine = queue.backend.engine
    if engine == "postgres":
        cur.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    elif engine == "mysql":
        cur.execute(f"LOCK TABLES {table} WRITE")
    elif engine == "sqlite":
        conn.rollback()
        conn.isolation_level = None
        cur.execute("BEGIN EXCLUSIVE")
    else:
        pytest.skip(f"no table lock is written for {engine} in this test")
    try:
        yield
    finally:
        if engine == "mysql":
            cur.execute("UNLOCK TABLES")
        conn.rollback()
        conn.close()


def test_a_stalled_database_call_is_logged_while_it_waits(
        queue: portq.Queue, qname: str, caplog: pytest.LogCaptureFixture) -> None:
    """A claim blocked by another session's table lock for longer than a third of the
    lease logs ``worker.db_slow`` naming the operation and the wait, once per period; the
    worker goes on once the lock is gone."""
    caplog.set_level(logging.WARNING, logger="portq.worker")
    queue.enqueue(qname, "x")
    worker = quiet_worker(queue, qname, lambda job: None, concurrency=1, lease=1.5,
                          idle_min=0.01, idle_max=0.05)
    with running(worker):
        assert wait_until(lambda: counts(queue, qname)["succeeded"] == 1, timeout=20)
        with table_locked(queue):
            time.sleep(2.2)
        queue.enqueue(qname, "y")
        assert wait_until(lambda: counts(queue, qname)["succeeded"] == 2, timeout=20)
    slow = [r.getMessage() for r in caplog.records
            if r.getMessage().startswith("worker.db_slow")]
    assert slow, "no worker.db_slow line"
    assert all("operation=" in line and "waited=" in line for line in slow), slow
    assert len(slow) <= 2.2 / 0.5 + 2, slow  # once per period (a third of the lease)


#: every test here runs on both worker fronts (Worker, AsyncWorker): see plugin.FRONTS
WORKER_FRONTS = True

