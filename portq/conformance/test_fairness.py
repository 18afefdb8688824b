"""Fair sharing across concurrency keys (``Queue.set_fairness``): a fair queue's claims take
one job of each key with ready jobs in turn, then one unkeyed job, so one key's burst
delays another key's jobs by one round at most; switched off, claims follow plain order."""

from __future__ import annotations

import asyncio
import threading

import pytest

import portq
from portq.aio import AsyncQueue
from portq.conformance.helpers import (
    on_own_connections,
    quiet_worker,
    run_portq,
    running,
    wait_until,
)
from portq.job import Job

SMALL_KEYS = [f"tenant-{i:02d}" for i in range(10)]


def burst_and_small_keys(queue: portq.Queue, qname: str, burst: int, each: int
                         ) -> tuple[list[int], list[int]]:
    """``burst`` jobs of key ``big`` enqueued first (and more urgent), then ``each`` jobs
    of every small key; the ids of both."""
    big = queue.enqueue_many([{"queue": qname, "payload": i, "priority": 5,
                               "concurrency_key": "big", "concurrency_limit": 10**6}
                              for i in range(burst)])
    small = queue.enqueue_many([{"queue": qname, "payload": i, "concurrency_key": key,
                                 "concurrency_limit": 10**6}
                                for i in range(each) for key in SMALL_KEYS])
    return big, small


def test_a_burst_delays_other_keys_by_one_round_at_most(queue: portq.Queue,
                                                        qname: str) -> None:
    """One key holding 2,000 ready jobs (older and more urgent) and ten keys holding ten
    each: every job of the small keys is claimed within the first 110 claims."""
    queue.set_fairness(qname, True)
    big, small = burst_and_small_keys(queue, qname, 2000, 10)
    claimed: list[int] = []
    while len(claimed) < 110:
        got = queue.claim(qname, "w", limit=1 + len(claimed) % 4)
        assert got, "a fair claim found nothing while jobs were ready"
        claimed += [j.id for j in got]
    assert set(small) <= set(claimed[:110])
    assert len([i for i in claimed[:110] if i in set(big)]) == 10


def test_each_round_takes_one_job_per_key_then_one_unkeyed(queue: portq.Queue,
                                                           qname: str) -> None:
    """Keys in turn (in key order, each key's jobs in claim order), the unkeyed jobs' turn
    last in a round; the turn survives between claims and across claimers."""
    queue.set_fairness(qname, True)
    queue.enqueue_many([{"queue": qname, "payload": f"{key}{i}", "concurrency_key": key,
                         "concurrency_limit": 5, "priority": i}
                        for key in ("b", "a") for i in range(3)])
    queue.enqueue_many([{"queue": qname, "payload": f"u{i}"} for i in range(2)])
    order = [j.payload for j in queue.claim(qname, "w1", limit=2)]
    order += [j.payload for j in queue.claim(qname, "w2", limit=4)]
    order += [j.payload for j in queue.claim(qname, "w1", limit=10)]
    assert order == ["a2", "b2", "u0", "a1", "b1", "u1", "a0", "b0"]


def test_fair_claims_honour_key_limits_pause_and_schedule(queue: portq.Queue,
                                                          qname: str) -> None:
    """A key at its running limit, a future job and a paused queue give nothing in their
    turn; the walk moves on and the claim stays short of its limit rather than waiting."""
    queue.set_fairness(qname, True)
    queue.enqueue_many([{"queue": qname, "payload": i, "concurrency_key": "one",
                         "concurrency_limit": 1} for i in range(3)])
    queue.enqueue(qname, "later", concurrency_key="later", concurrency_limit=1, delay=3600)
    queue.enqueue(qname, "free")
    assert sorted(str(j.payload) for j in queue.claim(qname, "w", limit=10)) == ["0", "free"]
    assert queue.claim(qname, "w", limit=10) == []
    queue.pause(qname)
    queue.enqueue(qname, "while paused", concurrency_key="other", concurrency_limit=1)
    assert queue.claim(qname, "w", limit=10) == []
    queue.resume(qname)
    assert [j.payload for j in queue.claim(qname, "w", limit=10)] == ["while paused"]


def test_fairness_off_claims_in_plain_order(queue: portq.Queue, qname: str) -> None:
    """``set_fairness(q, False)`` restores priority, run_at, id order (a burst first)."""
    queue.set_fairness(qname, True)
    queue.set_fairness(qname, False)
    big, _ = burst_and_small_keys(queue, qname, 20, 1)
    assert [j.id for j in queue.claim(qname, "w", limit=20)] == big


def test_concurrent_fair_claimers_share_the_rounds(engine_url: str, queue: portq.Queue,
                                                   qname: str) -> None:
    """Six claimers on their own connections: every job claimed once, and the small keys'
    jobs all within the first rounds (claimers take turns on the queue's row)."""
    queue.set_fairness(qname, True)
    _, small = burst_and_small_keys(queue, qname, 300, 3)
    got: list[int] = []

    def claim(q: portq.Queue, i: int) -> None:
        for _ in range(3):
            got.extend(j.id for j in q.claim(qname, f"w{i}", limit=2))
    on_own_connections(engine_url, queue.backend.prefix, 6, claim)
    assert len(got) == len(set(got)) == 36
    assert set(small) <= set(got)


@pytest.mark.parametrize("worker_front", ["Worker", "AsyncWorker"], indirect=True)
def test_a_worker_starts_the_small_keys_jobs_in_the_first_rounds(queue: portq.Queue,
                                                                 qname: str) -> None:
    """A worker of one slot (each front; fairness set through AsyncQueue) behind a burst of
    300: the small keys' 30 jobs all start among the first 33 (three rounds of 11 keys)."""
    asyncio.run(AsyncQueue(queue).set_fairness(qname, True))
    _, small = burst_and_small_keys(queue, qname, 300, 3)
    started: list[int] = []
    lock = threading.Lock()

    def handler(job: Job) -> None:
        with lock:
            started.append(job.id)
    with running(quiet_worker(queue, qname, handler, concurrency=1)):
        assert wait_until(lambda: set(small) <= set(started), timeout=60)
    assert max(started.index(i) for i in small) < 33, started[:40]


def test_the_cli_sets_and_clears_fairness(engine_url: str, queue: portq.Queue,
                                          qname: str) -> None:
    """``portq limit URL Q --fair`` makes the next claim fair, ``--no-fair`` plain again;
    ``portq stats`` and ``Queue.stats`` show it; a bad flag value is a one-line error."""
    prefix = queue.backend.prefix
    big, small = burst_and_small_keys(queue, qname, 20, 1)
    out = run_portq("limit", engine_url, qname, "--fair", "--prefix", prefix).stdout
    assert "one job of each concurrency key in turn" in out
    assert [s.fair for s in queue.stats(qname)] == [True]
    shown = run_portq("stats", engine_url, "--prefix", prefix, "--queue", qname).stdout
    assert shown.splitlines()[0].split()[-1] == "fair" and shown.split()[-1] == "yes", shown
    assert [j.id for j in queue.claim(qname, "w", limit=3)] == [big[0], *small[:2]]
    run_portq("limit", engine_url, "--prefix", prefix, qname, "--no-fair")
    assert [j.id for j in queue.claim(qname, "w", limit=3)] == big[1:4]
    assert [s.fair for s in queue.stats(qname)] == [False]
    proc = run_portq("limit", engine_url, qname, "--fair=yes", "--prefix", prefix,
                     check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr


def test_bad_fairness_is_refused(queue: portq.Queue, qname: str) -> None:
    with pytest.raises(portq.ConfigurationError, match="fair must be True or False"):
        queue.set_fairness(qname, "yes")  # type: ignore[arg-type]
    with pytest.raises(portq.InvalidQueueName):
        queue.set_fairness("", True)
