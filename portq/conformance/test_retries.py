"""Invariant 5: retry delays are honoured by the database clock; attempts run out into
dead; dead jobs are kept, never claimed, and can be replayed by an operator."""

from __future__ import annotations

import time

import portq
from portq.conformance.helpers import counts, wait_until


def test_retry_waits_for_its_delay(queue: portq.Queue, qname: str) -> None:
    queue.enqueue(qname, "x", max_attempts=3)
    (a,) = queue.claim(qname, "w", limit=1)
    failed_at = time.monotonic()
    assert queue.fail(a, "transient", retry_in=1.5)
    assert queue.claim(qname, "w", limit=1) == [], "claimed before its retry time"
    assert counts(queue, qname)["scheduled"] == 1
    assert wait_until(lambda: counts(queue, qname)["ready"] == 1, timeout=10)
    (b,) = queue.claim(qname, "w", limit=1)
    assert time.monotonic() - failed_at >= 1.4
    assert b.id == a.id and b.attempt == 2


def test_dead_after_max_attempts_with_error_history(queue: portq.Queue, qname: str) -> None:
    job_id = queue.enqueue(qname, "x", max_attempts=3)
    for attempt in (1, 2, 3):
        (job,) = queue.claim(qname, "w", limit=1)
        assert job.attempt == attempt
        assert queue.fail(job, f"error {attempt}", retry_in=0)
    assert queue.claim(qname, "w", limit=1) == []
    (dead,) = queue.jobs("dead", queue=qname)
    assert dead.id == job_id and dead.attempts == 3 and dead.last_error == "error 3"
    assert dead.finished_at is not None
    assert [(a, e) for a, _, e in queue.job_errors(job_id)] == [
        (1, "error 1"), (2, "error 2"), (3, "error 3")]


def test_permanent_failure_is_dead_at_once(queue: portq.Queue, qname: str) -> None:
    queue.enqueue(qname, "x", max_attempts=10)
    (job,) = queue.claim(qname, "w", limit=1)
    assert queue.fail(job, "bad input", retry_in=None)
    c = counts(queue, qname)
    assert (c["dead"], c["ready"]) == (1, 0)


def test_operator_replays_dead_job(queue: portq.Queue, qname: str) -> None:
    job_id = queue.enqueue(qname, "x", max_attempts=1)
    (job,) = queue.claim(qname, "w", limit=1)
    queue.fail(job, "boom")
    assert queue.retry_dead(job_id, extra_attempts=2)
    assert not queue.retry_dead(job_id, extra_attempts=2), "replayed a job that is not dead"
    first = queue.claim(qname, "w", limit=1)[0]
    assert first.id == job_id and first.attempt == 2 and first.max_attempts == 3
    assert queue.complete(first)


def test_cancel(queue: portq.Queue, qname: str) -> None:
    ready = queue.enqueue(qname, "r")
    assert queue.cancel(ready)
    assert queue.claim(qname, "w", limit=1) == []
    running = queue.enqueue(qname, "run")
    (job,) = queue.claim(qname, "w", limit=1)
    assert queue.cancel(running)
    assert queue.complete(job) is False, "a cancelled job's owner must lose ownership"
    assert not queue.cancel(running)
    assert counts(queue, qname)["cancelled"] == 2


def test_reap_returns_expired_leases_with_delay_then_dead(queue: portq.Queue,
                                                          qname: str) -> None:
    queue.enqueue(qname, "x", max_attempts=2)
    (a,) = queue.claim(qname, "crashed-1", limit=1, lease=0.2)
    time.sleep(0.45)
    assert queue.reap(limit=1000, delay=30) >= 1
    c = counts(queue, qname)
    assert (c["scheduled"], c["running"]) == (1, 0), "reaped job must wait out its delay"
    assert queue.retry_dead(a.id) is False
    # second lease expiry spends the last attempt: dead, attempts never reset
    queue.reap(limit=1000, delay=0)
    _force_due(queue, qname)
    (b,) = queue.claim(qname, "crashed-2", limit=1, lease=0.2)
    assert b.attempt == 2
    time.sleep(0.45)
    assert queue.reap(limit=1000, delay=0) >= 1
    (dead,) = queue.jobs("dead", queue=qname)
    assert dead.attempts == 2 and "lease expired" in (dead.last_error or "")


def _force_due(queue: portq.Queue, qname: str) -> None:
    """Make the reaped job due now: cancel + replay keeps attempts and budget honest."""
    (rec,) = queue.jobs("ready", queue=qname)
    assert queue.cancel(rec.id)
    assert queue.retry_dead(rec.id, extra_attempts=rec.max_attempts - rec.attempts)
