"""The worker registry (migration 3): workers register, heartbeat, deregister; rows of
workers whose heartbeats stopped expire by the database clock."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

import portq
from portq.conformance.helpers import (
    PeakHandler,
    claim_sizes,
    not_applicable,
    quiet_worker,
    raw_update,
    running,
    wait_until,
)
from portq.job import WorkerInfo
from portq.runtime.claiming import CLAIM_LOOP_BUDGET


def _info(worker_id: str, qname: str, in_hand: int = 0) -> WorkerInfo:
    return WorkerInfo(worker_id=worker_id, host="host-a", pid=4242, queues=(qname, "other"),
                      concurrency=7, jobs_in_hand=in_hand,
                      schedules=({"name": "nightly", "queue": qname, "cron": "0 3 * * *",
                                  "next_due": "2030-01-01T03:00:00+00:00",
                                  "last_enqueued": None},))


def _mine(queue: portq.Queue, worker_id: str) -> WorkerInfo | None:
    return next((w for w in queue.workers() if w.worker_id == worker_id), None)


def test_registry_row_round_trips_and_renews(queue: portq.Queue, qname: str) -> None:
    wid = f"reg-{uuid.uuid4().hex[:10]}"
    queue.backend.beat_worker(_info(wid, qname), 60_000)
    first = _mine(queue, wid)
    assert first is not None
    assert (first.host, first.pid, first.queues, first.concurrency, first.jobs_in_hand) == \
        ("host-a", 4242, (qname, "other"), 7, 0)
    assert first.schedules[0]["name"] == "nightly" and first.schedules[0]["cron"] == "0 3 * * *"
    assert first.started_at is not None and first.heartbeat_age_s is not None
    assert first.heartbeat_age_s < 60
    time.sleep(0.05)
    queue.backend.beat_worker(_info(wid, qname, in_hand=3), 60_000)
    again = _mine(queue, wid)
    assert again is not None and again.jobs_in_hand == 3
    assert again.started_at == first.started_at, "a heartbeat must not restart the worker"
    assert again.heartbeat_at is not None and first.heartbeat_at is not None
    assert again.heartbeat_at > first.heartbeat_at
    queue.backend.deregister_worker(wid)
    assert _mine(queue, wid) is None


def test_registry_rows_expire_when_heartbeats_stop(queue: portq.Queue, qname: str) -> None:
    gone, alive = f"reg-{uuid.uuid4().hex[:10]}", f"reg-{uuid.uuid4().hex[:10]}"
    queue.backend.beat_worker(_info(gone, qname), 300)  # a worker that then dies
    queue.backend.beat_worker(_info(alive, qname), 60_000)
    assert _mine(queue, gone) is not None
    assert wait_until(lambda: _mine(queue, gone) is None, timeout=10)
    queue.backend.beat_worker(_info(alive, qname), 60_000)  # deletes the expired row
    assert _mine(queue, alive) is not None
    queue.backend.deregister_worker(alive)


def test_a_worker_registers_while_it_runs(queue: portq.Queue, qname: str) -> None:
    handler = PeakHandler(0.4)
    worker = quiet_worker(queue, qname, handler, concurrency=3, registry_interval=0.2)
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    with running(worker):
        assert wait_until(lambda: _mine(queue, worker.worker_id) is not None, timeout=10)
        row = _mine(queue, worker.worker_id)
        assert row is not None and row.queues == (qname,) and row.concurrency == 3
        assert wait_until(lambda: (_mine(queue, worker.worker_id) or row).jobs_in_hand > 0,
                          timeout=10), "the heartbeat did not report the jobs in hand"
    assert _mine(queue, worker.worker_id) is None, "a stopped worker must deregister"


def test_workers_crowding_a_queue_share_a_budget_of_claim_loops(
        queue: portq.Queue, qname: str, caplog: pytest.LogCaptureFixture) -> None:
    """With as many live workers serving its queue as the claim-loop budget, a worker
    claims from one loop only (many processes of several loops each crowd the head of
    the ready index), as many jobs a claim as its four loops would; when they are gone
    it goes back to its own number of loops and batch."""
    if queue.backend.capabilities.single_writer:
        not_applicable("a single-writer engine (SQLite) runs one claim loop anyway")
    peers = [f"reg-{uuid.uuid4().hex[:10]}" for _ in range(CLAIM_LOOP_BUDGET - 1)]
    for wid in peers:
        queue.backend.beat_worker(_info(wid, qname), 60_000)
    total = 600
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(total)])
    worker = quiet_worker(queue, qname, lambda job: None, concurrency=4,
                          registry_interval=0.3)
    assert worker.claimers == 4 and worker.runtime.claim_batch == 20
    try:
        with caplog.at_level(logging.DEBUG, logger="portq.worker"), \
                claim_sizes(queue) as sizes, running(worker):
            assert wait_until(lambda: queue.stats(qname)[0].succeeded == total, timeout=60)
            assert worker.runtime.claim_loops == 1 and worker.runtime.claim_batch == 80
            claimed_by = {r.threadName for r in caplog.records
                          if r.getMessage().startswith("job.claimed")}
            # the first loop runs on the thread that runs the worker; the others are
            # portq-claim-1, -2, -3
            others = {f"portq-claim-{n}" for n in range(1, worker.claimers)}
            assert claimed_by and not claimed_by & others, claimed_by
            # all at once (one statement): a recount between single deregistrations
            # would see some of them still there, and said last "workers=3"
            assert raw_update(queue, "DELETE FROM portq_worker WHERE worker_id IN (:peers)",
                              {"peers": peers}) is None
            assert wait_until(lambda: worker.runtime.claim_loops == 4, timeout=10)
            assert worker.runtime.claim_batch == 20
    finally:
        for wid in peers:
            queue.backend.deregister_worker(wid)
    said = [r.getMessage() for r in caplog.records
            if r.getMessage().startswith("worker.claim_loops")]
    # one loop claims what the four would: a batch of 4 x 20 (the capacity allows it)
    assert said[0].endswith(f"workers={CLAIM_LOOP_BUDGET} claim_loops=1 batch=80"), said
    assert said[-1].endswith("workers=1 claim_loops=4 batch=20"), said
    assert max(sizes) > 20, f"no claim took more than the uncrowded batch: {sizes}"


def test_portq_workers_and_stats_show_registered_workers(queue: portq.Queue, engine_url: str,
                                                         qname: str) -> None:
    import json

    from portq.conformance.helpers import run_portq
    prefix = queue.backend.prefix
    wid = f"reg-{uuid.uuid4().hex[:10]}"
    queue.enqueue(qname, "x")
    queue.backend.beat_worker(_info(wid, qname, in_hand=2), 60_000)
    try:
        listed = json.loads(run_portq("workers", engine_url, "--prefix", prefix,
                                      "--json").stdout)
        mine = [w for w in listed if w["worker_id"] == wid]
        assert mine and mine[0]["queues"] == [qname, "other"] and mine[0]["jobs_in_hand"] == 2
        table = run_portq("workers", engine_url, "--prefix", prefix).stdout
        assert wid in table and "host-a" in table
        stats = json.loads(run_portq("stats", engine_url, "--prefix", prefix,
                                     "--queue", qname, "--json").stdout)
        assert stats[0]["workers"] == 1
    finally:
        queue.backend.deregister_worker(wid)


#: every test here runs on both worker fronts (Worker, AsyncWorker): see plugin.FRONTS
WORKER_FRONTS = True
