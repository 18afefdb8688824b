"""Invariants 2 and 8: transactional enqueue, idempotent keys, payload round trip."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import portq
from portq.conformance.helpers import counts
from portq.conformance.plugin import raw_connection


def test_rolled_back_enqueue_is_never_seen(queue: portq.Queue, qname: str) -> None:
    conn = raw_connection(queue)
    try:
        job_id = queue.enqueue(qname, {"order": 1}, conn=conn)
        assert job_id > 0
        assert counts(queue, qname)["ready"] == 0, "uncommitted job visible to others"
        conn.rollback()
    finally:
        conn.close()
    assert counts(queue, qname)["ready"] == 0
    assert queue.claim(qname, "w", limit=10) == []


def test_committed_enqueue_is_seen_once(queue: portq.Queue, qname: str) -> None:
    conn = raw_connection(queue)
    try:
        job_id = queue.enqueue(qname, {"order": 2}, conn=conn)
        assert counts(queue, qname)["ready"] == 0
        conn.commit()
    finally:
        conn.close()
    jobs = queue.claim(qname, "w", limit=10)
    assert [j.id for j in jobs] == [job_id]
    assert jobs[0].payload == {"order": 2}


def test_enqueue_shares_the_callers_transaction(queue: portq.Queue, qname: str) -> None:
    """Several enqueues in one caller transaction commit or vanish together."""
    conn = raw_connection(queue)
    try:
        ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(5)], conn=conn)
        ids.append(queue.enqueue(qname, 5, conn=conn))
        conn.commit()
    finally:
        conn.close()
    assert len(set(ids)) == 6
    assert counts(queue, qname)["ready"] == 6


def test_key_returns_the_existing_job(queue: portq.Queue, qname: str) -> None:
    first = queue.enqueue(qname, {"v": 1}, key=f"{qname}-k")
    second = queue.enqueue(qname, {"v": 2}, key=f"{qname}-k")
    assert first == second
    jobs = queue.claim(qname, "w", limit=10)
    assert [(j.id, j.payload, j.key) for j in jobs] == [(first, {"v": 1}, f"{qname}-k")]


def test_key_conflict_keeps_the_callers_transaction_usable(queue: portq.Queue,
                                                            qname: str) -> None:
    existing = queue.enqueue(qname, "old", key=f"{qname}-dup")
    conn = raw_connection(queue)
    try:
        again = queue.enqueue(qname, "new", key=f"{qname}-dup", conn=conn)
        twice = queue.enqueue(qname, "new", key=f"{qname}-dup", conn=conn)
        fresh = queue.enqueue(qname, "other", key=f"{qname}-fresh", conn=conn)
        same_txn = queue.enqueue(qname, "again", key=f"{qname}-fresh", conn=conn)
        conn.commit()  # must not raise: the conflict did not abort the transaction
    finally:
        conn.close()
    assert again == twice == existing
    assert same_txn == fresh != existing
    assert counts(queue, qname)["ready"] == 2


def test_payload_round_trips_exactly(queue: portq.Queue, qname: str) -> None:
    payloads = [
        None, True, 0, -1, 2**53 + 1, 10**30, 1.5, "", "ünïcødé ✓ 🚀 \"quoted\" 'single'",
        [1, [2, [3, {"deep": [None, False]}]]], {"a": {"b": {"c": "d"}}, "n": -0.25},
        "x" * 100_000,
    ]
    ids = [queue.enqueue(qname, p) for p in payloads]
    jobs = {j.id: j.payload for j in queue.claim(qname, "w", limit=len(payloads))}
    assert [jobs[i] for i in ids] == payloads


def test_bad_input_writes_nothing(queue: portq.Queue, qname: str) -> None:
    with pytest.raises(portq.PayloadError, match="not JSON-serialisable"):
        queue.enqueue(qname, {"when": object()})
    with pytest.raises(portq.PayloadError, match="over the limit"):
        queue.enqueue(qname, "x" * (queue.max_payload_bytes + 1))
    with pytest.raises(portq.InvalidQueueName):
        queue.enqueue(qname + " bad", 1)
    with pytest.raises(portq.ConfigurationError, match="max_attempts"):
        queue.enqueue(qname, 1, max_attempts=0)
    with pytest.raises(portq.ConfigurationError, match="timezone-aware"):
        queue.enqueue(qname, 1, run_at=datetime(2030, 1, 1))
    with pytest.raises(portq.ConfigurationError, match="delay"):
        queue.enqueue(qname, 1, delay=-1)
    with pytest.raises(portq.PayloadError):
        queue.enqueue_many([{"queue": qname, "payload": 1}, {"queue": qname, "payload": {1j}}])
    assert counts(queue, qname) == counts(queue, "never-used-queue") | {"queue": qname}


def test_injection_strings_are_data(queue: portq.Queue, qname: str) -> None:
    evil = "x'); DROP TABLE portq_job; --"
    job_id = queue.enqueue(qname, {"s": evil}, key=evil + qname)
    assert queue.enqueue(qname, {}, key=evil + qname) == job_id
    (job,) = queue.claim(qname, "w", limit=1)
    assert job.payload == {"s": evil} and job.key == evil + qname
    assert queue.complete(job)


def test_run_at_is_honoured(queue: portq.Queue, qname: str) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    queue.enqueue(qname, "later", run_at=later)
    queue.enqueue(qname, "delayed", delay=3600)
    now_id = queue.enqueue(qname, "now", run_at=datetime.now(UTC) - timedelta(seconds=5))
    c = counts(queue, qname)
    assert (c["ready"], c["scheduled"]) == (1, 2)
    assert [j.id for j in queue.claim(qname, "w", limit=10)] == [now_id]


def test_enqueue_result_tells_new_from_existing(queue: portq.Queue, qname: str) -> None:
    first = queue.enqueue_result(qname, "a", key=f"{qname}-r")
    again = queue.enqueue_result(qname, "b", key=f"{qname}-r")
    plain = queue.enqueue_result(qname, "c")
    assert first.created and plain.created and not again.created
    assert again.id == first.id != plain.id
    conn = raw_connection(queue)
    try:
        in_txn = queue.enqueue_result(qname, "d", key=f"{qname}-r", conn=conn)
        fresh = queue.enqueue_result(qname, "e", key=f"{qname}-t", conn=conn)
        fresh_again = queue.enqueue_result(qname, "f", key=f"{qname}-t", conn=conn)
        conn.commit()
    finally:
        conn.close()
    assert (in_txn.id, in_txn.created) == (first.id, False)
    assert fresh.created and (fresh_again.id, fresh_again.created) == (fresh.id, False)
    batch = queue.backend.enqueue_results(queue.new_jobs([
        {"queue": qname, "payload": 1, "key": f"{qname}-r"},
        {"queue": qname, "payload": 2, "key": f"{qname}-u"},
        {"queue": qname, "payload": 3, "key": f"{qname}-u"},
        {"queue": qname, "payload": 4}]))
    assert [r.created for r in batch] == [False, True, False, True]
    assert batch[0].id == first.id and batch[1].id == batch[2].id
    assert counts(queue, qname)["ready"] == 5
