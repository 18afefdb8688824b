"""Job statistics (``Queue.job_stats``, ``portq stats``, the dashboard's Throughput page):
counts per bucket and state over 1 h / 24 h / 7 d, wait and run time percentiles, counted
by the database over the window's rows."""

from __future__ import annotations

import asyncio
import time

import pytest

import portq
from portq.aio import AsyncQueue


def _finish(queue: portq.Queue, qname: str, *, wait: float, run: float, ok: int,
            dead: int) -> None:
    """Enqueue ``ok + dead`` jobs, let them wait ``wait`` s, claim them, let them run
    ``run`` s, then complete ``ok`` and fail ``dead`` for good."""
    queue.enqueue_many([{"queue": qname, "payload": i, "max_attempts": 1}
                        for i in range(ok + dead)])
    time.sleep(wait)
    jobs = queue.claim(qname, "w", limit=ok + dead)
    assert len(jobs) == ok + dead
    time.sleep(run)
    assert all(queue.complete_many(jobs[:ok]))
    for job in jobs[ok:]:
        assert queue.fail(job, "boom")


def test_job_stats_count_finished_jobs_per_bucket_and_state(queue: portq.Queue,
                                                            qname: str) -> None:
    _finish(queue, qname, wait=0, run=0, ok=4, dead=2)
    queue.cancel(queue.enqueue(qname, "never ran"))
    for window, buckets in (("1h", 60), ("24h", 96), ("7d", 168)):
        (stats,) = queue.job_stats(window, queue=qname)
        assert stats.queue == qname and len(stats.succeeded) == buckets
        assert stats.bucket_s * buckets == {"1h": 3600, "24h": 86400, "7d": 604800}[window]
        # everything finished in the current bucket (or the one before, at its edge)
        assert sum(stats.succeeded[-2:]) == sum(stats.succeeded) == 4
        assert sum(stats.dead) == 2 and sum(stats.cancelled) == 1
        assert stats.failure_rate == pytest.approx(2 / 6)
    assert queue.job_stats("1h", queue=f"{qname}-none") == []
    assert qname in {s.queue for s in queue.job_stats()}


def test_job_stats_wait_and_run_percentiles_follow_the_jobs_times(queue: portq.Queue,
                                                                  qname: str) -> None:
    slow, quick = f"{qname}-slow", f"{qname}-quick"
    _finish(queue, slow, wait=0.6, run=0.5, ok=3, dead=0)
    _finish(queue, quick, wait=0, run=0, ok=3, dead=0)
    (s,) = queue.job_stats("1h", queue=slow)
    (q,) = queue.job_stats("1h", queue=quick)
    # the database's times of each step are at least the sleeps between them; a bucket is
    # at most 19 % wide, the estimate lies inside it
    assert s.wait_ms["p50"] is not None and 0.81 * 600 <= s.wait_ms["p50"] < 60_000
    assert s.run_ms["p50"] is not None and 0.81 * 500 <= s.run_ms["p50"] < 60_000
    assert s.run_ms["p50"] <= s.run_ms["p95"] <= s.run_ms["p99"]  # type: ignore[operator]
    assert q.run_ms["p50"] is not None and q.run_ms["p50"] < s.run_ms["p50"]
    # a cancelled job that never started has no wait or run time and changes nothing
    queue.cancel(queue.enqueue(slow, "never ran"))
    (again,) = queue.job_stats("1h", queue=slow)
    assert again.wait_ms == s.wait_ms and sum(again.cancelled) == 1


def test_job_stats_of_the_async_queue_and_bad_windows(queue: portq.Queue,
                                                      qname: str) -> None:
    _finish(queue, qname, wait=0, run=0, ok=2, dead=0)

    async def read() -> list[portq.JobStats]:
        return await AsyncQueue(queue).job_stats("24h", queue=qname)
    (stats,) = asyncio.run(read())
    assert sum(stats.succeeded) == 2 and stats.bucket_s == 900
    for bad in ("30s", "32d", -1, "soon", "1 h"):
        with pytest.raises(portq.ConfigurationError, match="window"):
            queue.job_stats(bad)
    with pytest.raises(portq.ConfigurationError):
        queue.job_stats("1h", queue="")
