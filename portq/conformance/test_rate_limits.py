"""Rate limits: at most N jobs of a queue started per period, in every sliding window,
across every worker process; enforced in the claim transaction. Checked from the
handlers' own start times."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

import portq
from portq import aio
from portq.backends.sql.limits import rate_guard_ms
from portq.conformance.helpers import counts, quiet_worker, run_portq
from portq.conformance.test_limits import spans_of_workers
from portq.job import Job
from portq.worker import WorkerCounters


def most_in_window(starts: Sequence[float], seconds: float) -> int:
    """The most of ``starts`` within any half-open window [t, t + seconds)."""
    ordered = sorted(starts)
    most = end = 0
    for i, t in enumerate(ordered):
        while end < len(ordered) and ordered[end] < t + seconds:
            end += 1
        most = max(most, end - i)
    return most


def test_claims_stop_at_the_rate_limit(queue: portq.Queue, qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(10)])
    queue.set_rate_limit(qname, 3, 1.0)
    assert len(queue.claim(qname, "w1", limit=10)) == 3
    assert queue.claim(qname, "w2", limit=10) == []
    time.sleep(1.2)  # the period and its guard (50 ms) have passed
    assert len(queue.claim(qname, "w2", limit=2)) == 2
    assert len(queue.claim(qname, "w2", limit=10)) == 1
    assert [s.rate_limit for s in queue.stats(qname)] == [3]
    assert [s.rate_period_s for s in queue.stats(qname)] == [1.0]
    queue.set_rate_limit(qname, None)
    assert len(queue.claim(qname, "w3", limit=10)) == 4
    assert [s.rate_limit for s in queue.stats(qname)] == [None]


def test_a_rate_limit_of_one_queue_leaves_others_alone(queue: portq.Queue, qname: str) -> None:
    other = f"{qname}-free"
    queue.enqueue_many([{"queue": q, "payload": i} for q in (qname, other) for i in range(3)])
    queue.set_rate_limit(qname, 1, 60)
    assert len(queue.claim(qname, "w", limit=10)) == 1
    assert len(queue.claim(other, "w", limit=10)) == 3


def test_rate_and_running_limits_combine(queue: portq.Queue, qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(10)])
    queue.set_rate_limit(qname, 5, 60)
    queue.set_concurrency_limit(qname, 2)
    first = queue.claim(qname, "w", limit=10)
    assert len(first) == 2
    assert all(queue.complete(j) for j in first)
    assert len(queue.claim(qname, "w", limit=10)) == 2
    assert queue.claim(qname, "w", limit=10) == []  # running limit
    queue.set_concurrency_limit(qname, None)
    assert len(queue.claim(qname, "w", limit=10)) == 1  # the rate's fifth job


def test_bad_rate_limits_are_refused(queue: portq.Queue, qname: str) -> None:
    for limit, per in ((0, 1.0), (-1, 1.0), ("2", 1.0), (True, 1.0), (5, None), (5, 0),
                       (5, -1), (5, 0.001), (10**7, 1.0)):
        with pytest.raises(portq.ConfigurationError):
            queue.set_rate_limit(qname, limit, per)  # type: ignore[arg-type]
    with pytest.raises(portq.ConfigurationError, match="per_seconds"):
        queue.set_rate_limit(qname, None, 1.0)


@pytest.mark.slow
@pytest.mark.serial  # its pace is bounded below: a busy machine slows every claim
def test_worker_processes_never_exceed_the_rate_limit(
        engine_url: str, queue: portq.Queue, qname: str, tmp_path: Path) -> None:
    """Eight worker processes, 50 jobs per 2 s: in every sliding 2-second window of the
    handlers' own start times at most 50 started; and the limit was reached (the test
    fails if the queue ran too fast or far too slowly). A job given back unstarted (its
    claim's ``start_by`` passed) spent its place in the window, so the pace is reckoned
    over the jobs claimed: those that started and those given back."""
    n, limit, period = 300, 50, 2.0
    queue.set_rate_limit(qname, limit, period)
    spans = spans_of_workers(engine_url, queue, qname, tmp_path,
                             [{"queue": qname, "payload": i} for i in range(n)],
                             processes_n=8, concurrency=4, sleep=0.02, idle_max="0.1s",
                             timeout=120)
    starts = [s["start"] for s in spans]
    assert most_in_window(starts, period) <= limit, most_in_window(starts, period)
    # reached the limit: full windows, and no slower than 1.6x the limit's pace
    assert most_in_window(starts, period) >= 0.8 * limit, most_in_window(starts, period)
    took = max(starts) - min(starts)
    log = (tmp_path / "worker.log").read_text()
    released = log.count("job.released")
    ordered = sorted(starts)
    widest_gap = max(b - a for a, b in pairwise(ordered))
    assert took <= 1.6 * ((n + released) / limit - 1) * period, (
        f"{took:.2f} s, {released} given back, widest gap between starts "
        f"{widest_gap:.2f} s", log[-3000:])


def test_a_rate_limited_claim_sets_when_its_jobs_must_start(
        queue: portq.Queue, qname: str) -> None:
    """A rate-limited claim's jobs carry ``start_by``: the guard after the claim read the
    database clock (so no later than the guard after the call returned); an unlimited
    claim's jobs carry none."""
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(4)])
    assert all(j.start_by is None for j in queue.claim(qname, "w", limit=2))
    queue.set_rate_limit(qname, 5, 2.0)
    before = time.monotonic()
    jobs = queue.claim(qname, "w", limit=2)
    after = time.monotonic()
    guard = rate_guard_ms(2000) / 1000
    assert len(jobs) == 2 and len({j.start_by for j in jobs}) == 1
    assert jobs[0].start_by is not None
    assert before + guard <= jobs[0].start_by <= after + guard


def stalled_after_claims(queue: portq.Queue, stall: float) -> Callable[..., list[Job]]:
    """``queue.claim`` whose first claim that returns jobs is followed by ``stall``
    seconds: a worker process paused after its claim committed, before any handler ran."""
    claim, stalled = queue.claim, list[list[Job]]()

    def stalled_claim(*args: Any, **kwargs: Any) -> list[Job]:
        jobs = claim(*args, **kwargs)
        if jobs and not stalled:
            stalled.append(jobs)
            time.sleep(stall)
        return jobs
    return stalled_claim


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_job_not_started_within_the_guard_is_given_back(
        engine_url: str, queue: portq.Queue, qname: str, kind: str) -> None:
    """A worker stalled between a rate-limited claim's commit and its handlers (0.3 s;
    the guard of 3 per 1 s is 50 ms) gives those jobs back unstarted, their attempt too:
    no handler starts later than its claim's guard, so the limit holds in every window of
    start times, and every job still runs once, in a later claim (a loaded machine may
    give a later claim's jobs back too: each release is counted and gives its attempt
    back)."""
    n = 3
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(n)])
    queue.set_rate_limit(qname, n, 1.0)
    starts: list[tuple[int, int, float, float | None]] = []

    def handler(job: Job) -> None:
        starts.append((job.id, job.attempt, time.monotonic(), job.start_by))

    options: dict[str, Any] = {"concurrency": n, "burst": True, "idle_min": 0.01,
                               "idle_max": 0.05, "reap_interval": None,
                               "prune_interval": None}
    if kind == "Worker":
        queue.claim = stalled_after_claims(queue, 0.3)  # type: ignore[method-assign]
        try:
            counters = quiet_worker(queue, qname, handler, **options).run()
        finally:
            del queue.claim
    else:
        async def main() -> WorkerCounters:
            async with await aio.connect(engine_url, prefix=queue.backend.prefix) as q:
                q.queue.claim = stalled_after_claims(  # type: ignore[method-assign]
                    q.queue, 0.3)
                worker = aio.AsyncWorker(q, qname, handler, **options)
                return await asyncio.wait_for(worker.run(), 60)
        counters = asyncio.run(main())
    late = [s for s in starts if s[3] is None or s[2] > s[3]]
    assert late == [], late
    # the stalled claim's jobs were all given back; a later claim's may be too, when a
    # loaded machine keeps its handlers from starting within the 50 ms guard
    assert counters.succeeded == n and counters.released >= n, counters
    assert counters.claimed == counters.released + counters.succeeded, counters
    done = {j.id: j for j in queue.jobs("succeeded", queue=qname)}
    assert len(done) == n and counts(queue, qname)["succeeded"] == n
    given_back = {i: j.attempts - 1 for i, j in done.items()}
    assert min(given_back.values()) >= 1 and sum(given_back.values()) == counters.released
    # each released attempt given back (25 + releases), and each job ran once, in the
    # generation after its last release
    assert all(j.max_attempts == 25 + given_back[i] for i, j in done.items()), done
    assert sorted((s[0], s[1]) for s in starts) == sorted(
        (i, j.attempts) for i, j in done.items()), (starts, done)


def test_portq_limit_sets_and_clears_the_rate_limit(
        engine_url: str, queue: portq.Queue, qname: str) -> None:
    """``portq limit URL QUEUE --rate N/PERIOD`` sets the rate the claim enforces and
    ``portq stats`` shows it; ``--rate none`` clears it; bad values are one-line errors
    (exit 2), not tracebacks."""
    prefix = queue.backend.prefix
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(4)])
    out = run_portq("limit", engine_url, qname, "--rate", "1/1m", "--prefix", prefix)
    assert "1 jobs started per 1m" in out.stdout, out.stdout
    assert len(queue.claim(qname, "w1", limit=10)) == 1
    assert queue.claim(qname, "w1", limit=10) == []
    stats = run_portq("stats", engine_url, "--queue", qname, "--prefix", prefix)
    assert "1/1m" in stats.stdout, stats.stdout
    js = run_portq("stats", engine_url, "--queue", qname, "--prefix", prefix, "--json")
    assert '"rate_limit": 1' in js.stdout and '"rate_period_s": 60.0' in js.stdout
    run_portq("limit", engine_url, qname, "--rate", "none", "--prefix", prefix)
    assert len(queue.claim(qname, "w2", limit=10)) == 3
    for bad in ("0/1s", "5", "5/0s", "x/1m", "5/1y", "-1/1s", "5/1ms"):
        proc = run_portq("limit", engine_url, qname, "--rate", bad, "--prefix",
                         prefix, check=False)
        assert proc.returncode == 2 and "--rate" in proc.stderr, (bad, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert len(run_portq("limit", engine_url, qname, "--rate", "50/2s", "--prefix",
                         prefix).stdout.splitlines()) == 1
    assert [s.rate_limit for s in queue.stats(qname)] == [50]
    assert [s.rate_period_s for s in queue.stats(qname)] == [2.0]
