"""Handler threads without the chain of wake-ups: when jobs are much shorter than a
thread's wake-up, the awake handler thread takes them one after another and the others
sleep; a long job among them must not hold the rest back (the claim loop wakes another
thread once none was taken for NUDGE_S)."""

from __future__ import annotations

import time

import portq
from portq.conformance.helpers import running, wait_until
from portq.job import Job
from portq.runtime.claiming import NUDGE_S
from portq.worker import Worker


def test_a_long_job_among_short_ones_does_not_hold_the_others_back(
        queue: portq.Queue, qname: str) -> None:
    """2,000 no-op jobs turn the chain off; then one job of 1.5 s, claimed first
    (highest priority) together with 40 short ones: every short one ends while the long
    one still runs, although only one handler thread was awake when it began."""
    queue.enqueue_many([{"queue": qname, "payload": {"n": i}} for i in range(2000)])
    ended: dict[str, float] = {}
    chain_when_long_began: list[bool] = []
    worker: Worker | None = None

    def handler(job: Job) -> None:
        kind = job.payload.get("kind") if isinstance(job.payload, dict) else None
        if kind == "long":
            assert worker is not None
            chain_when_long_began.append(worker.runtime.line.chain)
            time.sleep(1.5)
        if kind is not None:
            ended[f"{kind}-{job.id}"] = time.monotonic()
    worker = Worker(queue, qname, handler, concurrency=4, batch=41, idle_min=0.01,
                    idle_max=0.05, registry_interval=None, reap_interval=None,
                    prune_interval=None)
    with running(worker):
        assert wait_until(lambda: worker.counters.succeeded == 2000, 30, 0.01)
        assert not worker.runtime.line.chain, "no-op jobs should turn the chain off"
        queue.enqueue_many([{"queue": qname, "payload": {"kind": "long"}, "priority": 9}]
                           + [{"queue": qname, "payload": {"kind": "short"}}
                              for _ in range(40)])
        worker.wake()
        assert wait_until(lambda: len(ended) == 41, 30, 0.01), ended
    assert chain_when_long_began == [False]
    long_end = max(t for k, t in ended.items() if k.startswith("long"))
    short_end = max(t for k, t in ended.items() if k.startswith("short"))
    assert short_end < long_end - 1.0, (
        f"the short jobs ended {short_end - long_end + 1.5:.2f}s after the long one began "
        f"(NUDGE_S {NUDGE_S})")
