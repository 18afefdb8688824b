"""Cooperative cancellation of running jobs: ``portq cancel`` on a running job fences its
completion and tells its handler. ``job.cancelled()`` becomes true within one heartbeat
(a third of the lease) on every engine, at once where the engine announces cancels
(PostgreSQL NOTIFY); an async handler's task is cancelled; the job ends ``cancelled``
whatever the handler returns or raises afterwards, and the worker logs ``job.cancelled``
and counts it (``cancelled=``), never as lost.

The handlers' own clocks (``time.time()`` in worker_handlers) time when they learned it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import portq
from portq import aio
from portq.conformance.helpers import (
    RenewalRace,
    exit_code,
    not_applicable,
    quiet_worker,
    run_portq,
    running,
    stopped_counters,
    wait_until,
)
from portq.conformance.test_worker import (
    processes,
    wait_for_records,
    worker_process,
)
from portq.job import Job

#: the lease of the worker processes: a heartbeat every second
LEASE_S = 3.0
#: what a loaded shared machine may add to a heartbeat (renewal, look-up, the handler's
#: 10 ms check, the record written)
SLACK_S = 1.5


def _cancel_by_cli(engine_url: str, prefix: str, *ids: int) -> float:
    """``portq cancel URL ID... --prefix PREFIX``; the time it returned (time.time())."""
    out = run_portq("cancel", engine_url, *map(str, ids), "--prefix", prefix)
    assert "cancelled" in out.stdout, out.stdout
    return time.time()


def _stop(proc: Any, log: Path) -> dict[str, int]:
    """SIGTERM the worker process; the counters of its worker.stopped line."""
    proc.send_signal(signal.SIGTERM)
    assert exit_code(proc, log, 60) == 0, log.read_text()[-3000:]
    return stopped_counters(log.read_text())


def _assert_cancelled(queue: portq.Queue, job_id: int) -> None:
    record = queue.job(job_id)
    assert record is not None and record.state == "cancelled", record
    assert record.worker_id is None and record.finished_at is not None
    assert queue.result(job_id) is None  # whatever the handler returned
    assert queue.job_errors(job_id) == []  # nor what it raised


def _cancelled_lines(log: Path, job_id: int) -> list[str]:
    return [line for line in log.read_text().splitlines()
            if "job.cancelled" in line and f"job_id={job_id} " in line]


def _cancel_while_running(queue: portq.Queue, engine_url: str, qname: str, job_id: int,
                          tmp_path: Path, handler: str, *, hold: float = 0.0,
                          settle: float = 0.0, sleep: float = 0.0,
                          ) -> tuple[float, dict[str, Any], dict[str, int], Path]:
    """Run ``job_id`` in a worker process with ``handler``, ``portq cancel`` it once it runs
    (after ``hold`` seconds, still running), wait for the handler's second record and
    ``settle`` seconds more, stop the worker. Returns when the cancel returned, that
    record, the worker's stopped counters and its log."""
    record, log = tmp_path / "claims.jsonl", tmp_path / "worker.log"
    with processes() as procs:
        proc = worker_process(engine_url, queue.backend.prefix, qname, handler, record, log,
                              "--lease", f"{LEASE_S:g}s", sleep=sleep)
        procs.append(proc)
        wait_for_records(record, 1, proc, log)
        if hold:
            time.sleep(hold)
            assert queue.job(job_id).state == "running"  # type: ignore[union-attr]
        returned = _cancel_by_cli(engine_url, queue.backend.prefix, job_id)
        (_, second) = wait_for_records(record, 2, proc, log, timeout=30)
        time.sleep(settle)
        counters = _stop(proc, log)
    return returned, second, counters, log


def test_handler_checking_cancelled_ends_within_a_heartbeat(
        queue: portq.Queue, engine_url: str, qname: str, tmp_path: Path) -> None:
    job_id = queue.enqueue(qname, "loop")
    # held a whole lease first, renewed meanwhile: only a cancel ends it
    returned, seen, counters, log = _cancel_while_running(
        queue, engine_url, qname, job_id, tmp_path, "until_cancelled", hold=LEASE_S)
    assert seen["seen"] is True
    took = seen["cancelled_at"] - returned
    print(f"\n[{queue.backend.engine}] job.cancelled() true {took:.3f}s after `portq cancel` "
          f"returned (heartbeat every {LEASE_S / 3:g}s)")
    assert took <= LEASE_S / 3 + SLACK_S, took
    _assert_cancelled(queue, job_id)
    assert len(_cancelled_lines(log, job_id)) == 1, log.read_text()[-3000:]
    assert counters["cancelled"] == 1 and counters["lost"] == 0
    assert counters["succeeded"] == 0 and counters["retried"] == 0


@pytest.mark.slow
def test_handler_ignoring_cancel_still_ends_cancelled(
        queue: portq.Queue, engine_url: str, qname: str, tmp_path: Path) -> None:
    job_id = queue.enqueue(qname, "ignore")
    # settle: its (refused) outcome, were any written, would be by then
    _, returned, counters, log = _cancel_while_running(
        queue, engine_url, qname, job_id, tmp_path, "ignore_cancel", settle=0.5,
        sleep=LEASE_S + 2)
    assert returned["seen"] is True  # told, though it took no notice
    _assert_cancelled(queue, job_id)
    assert len(_cancelled_lines(log, job_id)) == 1, log.read_text()[-3000:]
    assert "job.lost" not in log.read_text()
    assert counters["cancelled"] == 1 and counters["lost"] == 0
    assert counters["succeeded"] == 0


def test_async_handler_task_is_cancelled(queue: portq.Queue, engine_url: str, qname: str,
                                         tmp_path: Path) -> None:
    """``portq worker`` runs an ``async def`` handler on its thread's event loop: the
    handler's task gets CancelledError; nothing is retried or recorded."""
    job_id = queue.enqueue(qname, "await")
    returned, cancelled, counters, _ = _cancel_while_running(
        queue, engine_url, qname, job_id, tmp_path, "async_until_cancelled")
    assert cancelled["seen"] is True
    took = cancelled["task_cancelled_at"] - returned
    print(f"\n[{queue.backend.engine}] async handler's task cancelled {took:.3f}s after "
          f"`portq cancel` returned")
    assert took <= LEASE_S / 3 + SLACK_S, took
    _assert_cancelled(queue, job_id)
    assert counters["cancelled"] == 1 and counters["retried"] == 0 and counters["lost"] == 0


def test_async_worker_cancels_the_handler_task(queue: portq.Queue, engine_url: str,
                                               qname: str) -> None:
    job_id = queue.enqueue(qname, "await")
    events: dict[str, float] = {}

    async def handler(job: Job) -> str:
        events["started"] = time.time()
        try:
            await asyncio.sleep(120)
        except asyncio.CancelledError:
            events["cancelled"] = time.time()
            raise
        return "slept"

    async def main() -> Any:
        async with await aio.connect(engine_url, prefix=queue.backend.prefix) as q:
            worker = aio.AsyncWorker(q, qname, handler, lease=1.5, idle_max=0.05,
                                     registry_interval=None)
            task = asyncio.create_task(worker.run())
            for _ in range(400):
                if "started" in events:
                    break
                await asyncio.sleep(0.05)
            events["cancel"] = time.time()
            assert await q.cancel(job_id)
            for _ in range(200):
                if "cancelled" in events and worker.counters.cancelled:
                    break
                await asyncio.sleep(0.05)
            worker.stop()
            return await task
    counters = asyncio.run(main())
    assert "cancelled" in events, events
    assert events["cancelled"] - events["cancel"] <= 0.5 + SLACK_S
    _assert_cancelled(queue, job_id)
    assert (counters.cancelled, counters.lost, counters.retried, counters.succeeded) == \
        (1, 0, 0, 0), counters


def test_heartbeat_tells_a_worker_that_hears_no_announcements(
        queue: portq.Queue, qname: str, caplog: pytest.LogCaptureFixture) -> None:
    """Without a listener (``listen=False``; every engine but PostgreSQL has none) the
    heartbeat's refused renewal tells the worker; ``raise_if_cancelled`` stops the
    handler, and its JobCancelled is not a failure."""
    caplog.set_level(logging.INFO, logger="portq.worker")
    job_id = queue.enqueue(qname, "wait")
    started, seen = threading.Event(), {}

    def handler(job: Job) -> None:
        started.set()
        job.wait_cancelled(60)
        seen["at"] = time.monotonic()
        job.raise_if_cancelled()

    worker = quiet_worker(queue, qname, handler, lease=1.5, idle_min=0.01, idle_max=0.1,
                          listen=False)
    with running(worker):
        assert started.wait(30)
        cancel_at = time.monotonic()
        assert queue.cancel(job_id)
        assert wait_until(lambda: worker.busy == 0, timeout=10)
    assert seen["at"] - cancel_at <= 0.5 + SLACK_S, seen["at"] - cancel_at
    _assert_cancelled(queue, job_id)
    assert (worker.counters.cancelled, worker.counters.lost, worker.counters.retried) == \
        (1, 0, 0)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("job.")]
    assert len(lines) == 1 and lines[0].startswith(f"job.cancelled job_id={job_id} "), lines
    assert "lease renewal refused" in lines[0]


def test_announced_cancel_reaches_the_worker_faster_than_a_heartbeat(
        queue: portq.Queue, engine_url: str, qname: str, tmp_path: Path) -> None:
    """Where the engine announces cancels (PostgreSQL: NOTIFY at the cancel's commit), a
    worker with a 30 s lease (a heartbeat every 10 s) tells the handler at once, for a
    cancel by id and for a bulk cancel alike."""
    if not getattr(queue.backend, "announces_cancel", False):
        not_applicable(f"{queue.backend.engine} announces no cancels: workers learn them "
                       "within a heartbeat (test_heartbeat_tells_a_worker...)")
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(2)])
    record, log = tmp_path / "claims.jsonl", tmp_path / "worker.log"
    with processes() as procs:
        proc = worker_process(engine_url, queue.backend.prefix, qname, "until_cancelled",
                              record, log, "--lease", "30s", "--concurrency", "2")
        procs.append(proc)
        wait_for_records(record, 2, proc, log)
        time.sleep(1.0)  # its listener is listening
        by_id = time.time()
        assert queue.cancel(ids[0])
        wait_for_records(record, 3, proc, log, timeout=30)
        in_bulk = time.time()
        assert queue.cancel_many(qname, states=["running"]) == 1
        records = wait_for_records(record, 4, proc, log, timeout=30)
        counters = _stop(proc, log)
    seen = {r["job_id"]: r["cancelled_at"] for r in records if "cancelled_at" in r}
    took = (seen[ids[0]] - by_id, seen[ids[1]] - in_bulk)
    print(f"\n[{queue.backend.engine}] announced cancel seen after {took[0]:.3f}s (by id), "
          f"{took[1]:.3f}s (bulk); heartbeat every 10s")
    assert max(took) < 2.0, took
    for job_id in ids:
        _assert_cancelled(queue, job_id)
    assert counters["cancelled"] == 2 and counters["lost"] == 0


def test_job_cancelled_during_its_outcome_write_counts_cancelled_once(
        queue: portq.Queue, qname: str, caplog: pytest.LogCaptureFixture) -> None:
    """Cancelled just before its completion is written: the fenced write is refused and
    so is the heartbeat's renewal meanwhile; it counts cancelled once, never lost."""
    caplog.set_level(logging.INFO, logger="portq.worker")
    job_id = queue.enqueue(qname, "x")
    worker = quiet_worker(queue, qname, lambda job: None, lease=1.2, idle_min=0.01,
                          idle_max=0.05)

    def cancel(jobs: Sequence[Job]) -> None:
        for job in jobs:
            assert queue.cancel(job.id)

    with RenewalRace(worker, before_write=cancel) as race, running(worker):
        assert wait_until(lambda: worker.counters.cancelled >= 1 and worker.held == 0,
                          timeout=30)
        time.sleep(1.0)  # more heartbeats: none may count it again
    assert race.timeouts == 0 and race.refused == {(job_id, 1)}
    assert (worker.counters.succeeded, worker.counters.cancelled, worker.counters.lost) == \
        (0, 1, 0)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("job.")]
    assert len(lines) == 1 and lines[0].startswith(f"job.cancelled job_id={job_id} "), lines
    _assert_cancelled(queue, job_id)



#: every test here runs on both worker fronts (Worker, AsyncWorker): see plugin.FRONTS
WORKER_FRONTS = True
