"""Invariant 3: only the generation, worker and unexpired lease that claimed a job may
renew, complete, fail or release it."""

from __future__ import annotations

import time

import pytest

import portq
from portq.conformance.helpers import counts, raw_update
from portq.job import Claim


def _expire(lease_s: float) -> None:
    time.sleep(lease_s + 0.25)


def test_stale_generation_cannot_finish_a_reclaimed_job(queue: portq.Queue,
                                                        qname: str) -> None:
    queue.enqueue(qname, "x", max_attempts=5)
    (a,) = queue.claim(qname, "worker-a", limit=1, lease=0.3)
    _expire(0.3)
    assert queue.renew(a, lease=30) is False, "renewed an expired lease"
    assert queue.reap(limit=10_000, delay=0) >= 1
    (b,) = queue.claim(qname, "worker-b", limit=1, lease=30)
    assert b.id == a.id and b.attempt == a.attempt + 1
    assert queue.complete(a) is False
    assert queue.renew(a, lease=30) is False
    assert queue.fail(a, "late failure", retry_in=0) is False
    assert queue.release(a) is False
    assert queue.complete(b) is True
    c = counts(queue, qname)
    assert (c["succeeded"], c["ready"], c["running"], c["dead"]) == (1, 0, 0, 0)


def test_expired_lease_cannot_complete_even_before_reclaim(queue: portq.Queue,
                                                           qname: str) -> None:
    queue.enqueue(qname, "x")
    (a,) = queue.claim(qname, "worker-a", limit=1, lease=0.3)
    _expire(0.3)
    assert queue.complete(a) is False
    assert counts(queue, qname)["running"] == 1  # left for the reaper


def test_wrong_worker_or_generation_is_rejected(queue: portq.Queue, qname: str) -> None:
    queue.enqueue(qname, "x")
    (a,) = queue.claim(qname, "worker-a", limit=1, lease=30)
    assert a.claim is not None
    forged_worker = Claim(a.id, a.claim.generation, "worker-z", a.claim.lease_until)
    forged_gen = Claim(a.id, a.claim.generation + 1, "worker-a", a.claim.lease_until)
    for forged in (forged_worker, forged_gen):
        assert queue.complete(forged) is False
        assert queue.renew(forged) is False
        assert queue.fail(forged, "no") is False
    assert queue.renew(a, lease=60) is True
    assert queue.complete(a) is True
    assert queue.complete(a) is False, "completed twice"


def test_release_returns_the_job_without_spending_an_attempt(queue: portq.Queue,
                                                             qname: str) -> None:
    queue.enqueue(qname, "x", max_attempts=1)
    (a,) = queue.claim(qname, "worker-a", limit=1, lease=30)
    assert queue.release(a) is True
    assert queue.release(a) is False, "released twice"
    # the only attempt was given back: the job can still run, as a new generation
    (b,) = queue.claim(qname, "worker-b", limit=1, lease=30)
    assert b.id == a.id and b.attempt == a.attempt + 1 and b.max_attempts == 2
    assert queue.complete(a) is False
    assert queue.complete(b) is True


def test_release_many_gives_back_each_owned_claim_in_one_transaction(
        queue: portq.Queue, qname: str) -> None:
    """One transaction gives back the owned jobs, their attempts too, and refuses, per
    job, a cancelled one and a forged worker's claim; results follow the claims' order."""
    queue.enqueue_many([{"queue": qname, "payload": i, "max_attempts": 1} for i in range(4)])
    a, b, c, d = sorted(queue.claim(qname, "worker-a", limit=4, lease=30),
                        key=lambda j: j.id)
    assert d.claim is not None
    assert queue.cancel(b.id)
    forged = Claim(d.id, d.claim.generation, "worker-z", d.claim.lease_until)
    assert queue.release_many([c, forged, b, a]) == [True, False, False, True]
    assert queue.release_many([a, c]) == [False, False], "released twice"
    assert queue.release_many([]) == []
    got = counts(queue, qname)
    assert (got["ready"], got["running"], got["cancelled"]) == (2, 1, 1)
    again = sorted(queue.claim(qname, "worker-b", limit=4, lease=30), key=lambda j: j.id)
    assert [(j.id, j.attempt, j.max_attempts) for j in again] == \
        [(a.id, 2, 2), (c.id, 2, 2)]
    assert queue.complete(d) is True  # the forged give-back left d with its owner


def test_complete_many_fences_each_claim(queue: portq.Queue, qname: str) -> None:
    """One transaction completes the owned jobs and refuses the stale one, per job."""
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    a, b, c = sorted(queue.claim(qname, "worker-a", limit=3, lease=30), key=lambda j: j.id)
    assert [a.id, b.id, c.id] == ids
    assert queue.cancel(b.id)  # b's owner loses it
    assert queue.complete_many([a, b, c]) == [True, False, True]
    assert queue.complete_many([a, c]) == [False, False], "completed twice"
    assert queue.complete_many([]) == []
    got = counts(queue, qname)
    assert (got["succeeded"], got["cancelled"], got["running"]) == (2, 1, 0)


def test_renew_many_fences_each_claim(queue: portq.Queue, qname: str) -> None:
    """One heartbeat tick renews the owned jobs' leases and refuses, per job, a cancelled
    one, a reclaimed one's stale generation and a forged worker."""
    queue.enqueue_many([{"queue": qname, "payload": i, "max_attempts": 5} for i in range(4)])
    a, b, c, d = sorted(queue.claim(qname, "worker-a", limit=4, lease=0.6),
                        key=lambda j: j.id)
    assert queue.cancel(b.id)
    assert a.claim is not None
    forged = Claim(a.id, a.claim.generation, "worker-z", a.claim.lease_until)
    assert queue.renew_many([forged, c], lease=30) == [False, True]
    assert queue.renew_many([a, b, c], lease=30) == [True, False, True]
    _expire(0.6)  # d was not renewed: its lease ran out, the reaper hands it on
    assert queue.reap(limit=10_000, delay=0) >= 1
    (d2,) = queue.claim(qname, "worker-b", limit=1, lease=30)
    assert d2.id == d.id and d2.attempt == d.attempt + 1
    assert queue.renew_many([d, a, d2], lease=30) == [False, True, True]
    assert queue.renew_many([]) == []
    # a and c kept their jobs through the renewal: the complete is theirs
    assert queue.complete_many([a, c, d, d2]) == [True, True, False, True]
    got = counts(queue, qname)
    assert (got["succeeded"], got["cancelled"], got["running"]) == (3, 1, 0)


def test_complete_many_mixed_owned_and_lost(queue: portq.Queue, qname: str) -> None:
    """A batch mixing owned claims with an expired lease, a reclaimed job's old
    generation and a forged worker completes exactly the owned ones, in one call."""
    queue.enqueue_many([{"queue": qname, "payload": i, "max_attempts": 5} for i in range(3)])
    short = queue.claim(qname, "worker-a", limit=1, lease=0.3)
    owned = sorted(queue.claim(qname, "worker-a", limit=2, lease=30), key=lambda j: j.id)
    _expire(0.3)
    (x,) = short
    expired_before_reclaim = queue.complete_many([x, *owned[:1]])
    assert expired_before_reclaim == [False, True]
    assert queue.reap(limit=10_000, delay=0) >= 1
    (x2,) = queue.claim(qname, "worker-b", limit=1, lease=30)
    assert x2.id == x.id and x2.claim is not None
    forged = Claim(x2.id, x2.claim.generation, "worker-a", x2.claim.lease_until)
    assert queue.complete_many([x, forged, owned[1]]) == [False, False, True]
    assert queue.complete_many([x, x2]) == [False, True]
    got = counts(queue, qname)
    assert (got["succeeded"], got["running"], got["ready"]) == (3, 0, 0)


# ---- identifiers compare exactly ---------------------------------------------------------
# PAD SPACE collations (MySQL/MariaDB utf8mb4_bin, SQL Server's defaults) compare 'a' and
# 'a ' as equal, and case-insensitive ones 'a' and 'A': neither may hold for a worker id
# (the fencing token) or a queue name.

@pytest.mark.parametrize("impostor", ["owner ", "owner  ", "Owner", "OWNER", "owner\t"])
def test_a_worker_id_differing_in_trailing_space_or_case_is_another_worker(
        queue: portq.Queue, qname: str, impostor: str) -> None:
    queue.enqueue(qname, "x")
    (a,) = queue.claim(qname, "owner", limit=1, lease=30)
    assert a.claim is not None
    forged = Claim(a.id, a.claim.generation, impostor, a.claim.lease_until)
    assert queue.renew(forged, lease=60) is False
    assert queue.complete(forged) is False
    assert queue.complete_many([forged]) == [False]
    assert queue.fail(forged, "impostor", retry_in=0) is False
    assert queue.fail(forged, "impostor", retry_in=None) is False
    assert queue.release(forged) is False
    (rec,) = queue.jobs("running", queue=qname)
    assert (rec.worker_id, rec.attempts, rec.last_error) == ("owner", 1, None)
    assert queue.job_errors(a.id) == []
    assert queue.complete(a) is True


def test_a_worker_id_with_trailing_space_is_kept_exactly(queue: portq.Queue,
                                                         qname: str) -> None:
    queue.enqueue(qname, "x")
    (a,) = queue.claim(qname, "owner ", limit=1, lease=30)
    assert a.claim is not None
    assert queue.complete(Claim(a.id, a.attempt, "owner", a.claim.lease_until)) is False
    (rec,) = queue.jobs("running", queue=qname)
    assert rec.worker_id == "owner "
    assert queue.fail(a, "kept", retry_in=0) is True
    assert queue.job_errors(a.id) == [(1, "owner ", "kept")]


@pytest.mark.parametrize("suffix", [" ", "  "])
def test_a_queue_differing_in_trailing_space_is_another_queue(
        queue: portq.Queue, qname: str, suffix: str) -> None:
    """Queue names are validated (no spaces), but a row written by other code, with the
    name plus a trailing space, must not be claimed, counted or pruned as that queue."""
    mine = queue.enqueue(qname, "mine")
    other = queue.enqueue(qname, "other")
    assert raw_update(queue, "UPDATE portq_job SET queue = :queue WHERE job_id = :job_id",
                      {"queue": qname + suffix, "job_id": other}) is None
    stats = {s.queue: s for s in queue.stats() if s.queue.rstrip() == qname}
    assert set(stats) == {qname, qname + suffix}
    assert (stats[qname].ready, stats[qname + suffix].ready) == (1, 1)
    (only,) = queue.stats(qname)
    assert (only.queue, only.ready) == (qname, 1)
    assert [r.id for r in queue.jobs("ready", queue=qname)] == [mine]
    claimed = queue.claim(qname, "w", limit=10, lease=30)
    assert [j.id for j in claimed] == [mine] and claimed[0].queue == qname
    assert queue.claim(qname, "w", limit=10, lease=30) == []
    assert queue.complete(claimed[0]) is True
    time.sleep(0.05)  # finished strictly before now
    assert queue.prune(0, limit=10, queue=qname) == 1
    (left,) = [s for s in queue.stats() if s.queue.rstrip() == qname]
    assert (left.queue, left.ready, left.succeeded) == (qname + suffix, 1, 0)
    assert raw_update(queue, "DELETE FROM portq_job WHERE job_id = :job_id",
                      {"job_id": other}) is None
