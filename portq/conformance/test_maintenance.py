"""Invariant 8 (prune) and the operator view: prune deletes only finished jobs, in bounds;
stats count by the database clock."""

from __future__ import annotations

import logging
import time
import types

import pytest

import portq
from portq.conformance.helpers import counts
from portq.runtime import maintenance
from portq.runtime.counters import WorkerCounters


def _finish(queue: portq.Queue, qname: str, n: int) -> list[int]:
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(n)])
    for job in queue.claim(qname, "w", limit=n):
        assert queue.complete(job)
    return ids


def test_prune_deletes_only_finished_jobs_in_bounds(queue: portq.Queue, qname: str) -> None:
    _finish(queue, qname, 7)
    dead = queue.enqueue(qname, "dead", max_attempts=1)
    queue.fail(queue.claim(qname, "w", limit=1)[0], "boom")
    queue.enqueue(qname, "ready")
    queue.enqueue(qname, "running")
    queue.claim(qname, "w", limit=1)
    time.sleep(0.05)
    assert queue.prune(3600, queue=qname) == 0, "pruned jobs younger than older_than"
    assert queue.prune(0, limit=3, queue=qname) == 3
    assert queue.prune(0, limit=100, queue=qname) == 4
    assert queue.prune(0, limit=100, queue=qname) == 0
    c = counts(queue, qname)
    assert (c["succeeded"], c["dead"], c["ready"] + c["running"]) == (0, 1, 2)
    assert queue.prune(0, states=["dead"], queue=qname) == 1
    assert queue.jobs("dead", queue=qname) == [] and dead > 0


def test_stats_counts_and_age(queue: portq.Queue, qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(4)])
    queue.enqueue(qname, "later", delay=600)
    time.sleep(0.3)
    queue.claim(qname, "w", limit=1)
    c = counts(queue, qname)
    assert (c["ready"], c["scheduled"], c["running"]) == (3, 1, 1)
    assert c["oldest_ready_age_s"] is not None and 0.2 <= c["oldest_ready_age_s"] < 120
    assert (c["failed_1h"], c["succeeded_1h"], c["retry_rate"]) == (0, 0, None)


def test_pending_sees_due_and_running_jobs_of_its_queue_only(queue: portq.Queue,
                                                            qname: str) -> None:
    """``pending`` (a burst worker's exit test) answers (ready and due, running) for one
    queue: a scheduled job, a finished one or another queue's job is neither."""
    backend = queue.backend
    assert backend.pending(qname) == (False, False)
    queue.enqueue(qname, "later", delay=600)
    queue.enqueue(qname + "-other", "elsewhere")
    assert backend.pending(qname) == (False, False)
    queue.enqueue(qname, "now")
    assert backend.pending(qname) == (True, False)
    (job,) = queue.claim(qname, "w", limit=5)
    assert job.payload == "now"
    assert backend.pending(qname) == (False, True)
    assert queue.complete(job)
    assert backend.pending(qname) == (False, False)
    assert backend.pending(qname + "-other") == (True, False)


def test_retry_rate_counts_recorded_attempts_of_the_last_hour(queue: portq.Queue,
                                                             qname: str) -> None:
    """failed_1h counts failed attempts recorded in the last hour, succeeded_1h jobs that
    succeeded in it; retry_rate = failed / (failed + succeeded). Pruning finished jobs of
    other queues, or jobs older than the window, leaves it as it was."""
    _finish(queue, qname, 2)
    flaky = queue.enqueue(qname, "flaky", max_attempts=3)
    for _ in range(2):
        (job,) = queue.claim(qname, "w", limit=1)
        assert job.id == flaky and queue.fail(job, "transient", retry_in=0)
    (job,) = queue.claim(qname, "w", limit=1)
    assert queue.complete(job)
    c = counts(queue, qname)
    assert (c["failed_1h"], c["succeeded_1h"]) == (2, 3)
    assert c["retry_rate"] == 2 / 5
    assert queue.prune(3600, queue=qname) == 0      # nothing older than an hour
    assert queue.prune(0, queue=qname + "-other") == 0
    assert counts(queue, qname)["retry_rate"] == 2 / 5
    assert counts(queue, qname + "-never")["retry_rate"] is None


def test_reaped_jobs_are_waited_for_by_the_database_clock(
        queue: portq.Queue, qname: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reap returns expired leases due ``reap_delay`` later by the database's clock,
    which sets their run_at; a burst worker waits for them (``reaped_waiting``) by that
    clock too. Here this host's monotonic clock runs 30 s ahead right after the reap (as
    it seems to after a step of the system clock, or beside a database whose clock is
    behind): the jobs are still waited for until the database says they are due, and no
    longer."""
    queue.enqueue(qname, "expired")
    queue.claim(qname, "crashed", limit=1, lease=0.2)
    time.sleep(0.4)
    reaper = maintenance.Maintenance(
        queue, WorkerCounters(), "reaper", logging.getLogger("portq.worker"),
        reap_interval=0.01, reap_delay=1.5, prune_interval=None, prune_older_than=3600)
    deadline = time.monotonic() + 5
    while not reaper.due():
        assert time.monotonic() < deadline, "the first reap never came due"
        time.sleep(0.01)
    reaper.run_due()
    assert counts(queue, qname)["scheduled"] == 1  # back, due in 1.5 s
    ahead = types.SimpleNamespace(monotonic=lambda: time.monotonic() + 30.0)
    monkeypatch.setattr(maintenance, "time", ahead)
    assert reaper.reaped_waiting(), "stopped waiting by the host's clock alone"
    assert queue.backend.pending(qname) == (False, False)
    waited = time.monotonic()
    while reaper.reaped_waiting():
        assert time.monotonic() - waited < 5, "still waiting after the jobs came due"
        time.sleep(0.02)
    assert queue.backend.pending(qname) == (True, False), "no longer waited for, not due"


def test_bounds_are_validated(queue: portq.Queue, qname: str) -> None:
    for bad in (lambda: queue.claim(qname, "w", limit=0),
                lambda: queue.claim(qname, "w", limit=-1),
                lambda: queue.claim(qname, "w", lease=0),
                lambda: queue.reap(limit=0),
                lambda: queue.prune(-1),
                lambda: queue.prune(1, states=["ready"])):
        with pytest.raises(portq.ConfigurationError):
            bad()
