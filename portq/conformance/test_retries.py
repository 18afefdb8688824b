"""Invariant 5: retry delays are honoured by the database clock; attempts run out into
dead; dead jobs are kept, never claimed, and can be replayed by an operator."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import portq
from portq.conformance.helpers import counts, raw_update, wait_until
from portq.queue import INT32


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


def test_replay_keeps_the_attempts_a_job_had_left(queue: portq.Queue, qname: str) -> None:
    """``retry_dead(extra_attempts=n)`` gives a job the attempts it had left plus ``n``:
    a job cancelled before it ever ran keeps its whole budget; one sent dead early
    (``Permanent``) keeps what it had not spent; one whose attempts ran out gets ``n``."""
    def replayed(job_id: int, extra: int) -> tuple[int, int]:
        assert queue.retry_dead(job_id, extra_attempts=extra)
        (rec,) = [r for r in queue.jobs("ready", queue=qname, limit=100) if r.id == job_id]
        return rec.attempts, rec.max_attempts

    never_ran = queue.enqueue(qname, "cancelled before it ran", max_attempts=5)
    assert queue.cancel(never_ran)
    assert replayed(never_ran, 2) == (0, 7)
    cancelled_running = queue.enqueue(qname, "cancelled while running", max_attempts=5)
    queue.claim(qname, "w", limit=10)  # both: the replayed one is ready again
    assert queue.cancel(cancelled_running)
    assert replayed(cancelled_running, 1) == (1, 6)
    dead_early = queue.enqueue(qname, "dead at its first attempt", max_attempts=5)
    spent = queue.enqueue(qname, "attempts ran out", max_attempts=1)
    for job in queue.claim(qname, "w", limit=10):
        if job.id == dead_early:
            assert queue.fail(job, "permanent", retry_in=None)
        elif job.id == spent:
            assert queue.fail(job, "transient", retry_in=0)
        else:
            assert queue.complete(job)
    assert {r.id for r in queue.jobs("dead", queue=qname)} == {dead_early, spent}
    assert replayed(dead_early, 1) == (1, 6)
    assert replayed(spent, 3) == (1, 4)
    # the budget saturates at the largest INT rather than failing with an overflow
    huge = queue.enqueue(qname, "huge budget", max_attempts=INT32 - 1)
    assert queue.cancel(huge)
    assert replayed(huge, 5) == (0, INT32)
    job = {j.id: j for j in queue.claim(qname, "w", limit=10)}[huge]
    assert (job.attempt, job.max_attempts) == (1, INT32)


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
    """Make the reaped job due now, its attempts and budget untouched."""
    (rec,) = queue.jobs("ready", queue=qname)
    past = queue.backend.to_db_time(datetime(2000, 1, 1, tzinfo=UTC))
    assert raw_update(queue, "UPDATE portq_job SET run_at = :run_at WHERE job_id = :job_id",
                      {"run_at": past, "job_id": rec.id}) is None
