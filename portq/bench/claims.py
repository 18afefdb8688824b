"""Claim cost as the table grows: the real claim timed in rolled-back transactions, plain,
under a queue limit and with per-key limits, and its plan."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from portq.backends.base import SqlBackend
from portq.bench.plans import explain_claim
from portq.bench.table import CLAIM_LIMIT, QUEUE_COUNT, analyze_table, claim_params, fill_jobs
from portq.queue import Queue

#: (ready jobs in each of the 3 queues, total rows; None = just the ready ones)
DEFAULT_SIZES: tuple[tuple[int, int | None], ...] = (
    (1_000, None), (10_000, None), (100_000, None), (100_000, 1_000_000))
#: the concurrency limit the limited claim timing sets: high enough that it claims a full
#: batch, so the two timings differ only by the limit's extra statements
LIMITED_MAX_RUNNING = 1_000_000
#: jobs with a per-key limit put at the head of the second queue for keyed_claim_ms, and
#: their number of keys (each claim of 20 takes jobs of every key: 10 recounts)
KEYED_JOBS, KEYS = 100, 10


def time_claim(backend: SqlBackend, queue: str, *, limit: int = CLAIM_LIMIT,
               runs: int = 5, limited: bool = False, keyed: bool = False
               ) -> tuple[float, int]:
    """Median wall time (ms) of the real claim in rolled-back transactions, and the
    number of jobs it claimed; ``limited``: the claim of a queue with a concurrency or rate
    limit (its portq_queue row locked, running jobs counted or its rate log read, then the
    claim); ``keyed``: the claim followed by the per-key settle (queue row made and locked,
    each claimed key's running jobs recounted)."""
    params = claim_params(queue, limit)

    def settled(cur: Any, p: dict[str, Any]) -> list[Any]:
        return backend.settle_keys(cur, p, backend.claim_rows(cur, p), locked=False)
    claim = backend.claim_within_limit if limited else settled if keyed else \
        backend.claim_rows
    times: list[float] = []
    claimed = 0
    for _ in range(runs + 1):  # the first run warms the cache and is not counted
        with backend.transaction(commit=False) as cur:
            started = time.perf_counter()
            claimed = len(claim(cur, params))
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times[1:]), claimed


def claim_latency(queue: Queue, sizes: Sequence[tuple[int, int | None]] = DEFAULT_SIZES
                  ) -> list[dict[str, Any]]:
    """Claim cost at each (ready per queue, total rows) size; the table grows in place."""
    backend = queue.backend
    names = [f"bench-claim-{i}" for i in range(QUEUE_COUNT)]
    ready_now = finished_now = 0
    keyed_now = False
    results = []
    for ready, total in sorted(sizes, key=lambda s: (s[0], s[1] or 0)):
        fill_started = time.perf_counter()
        if ready > ready_now:
            for name in names:
                fill_jobs(backend, name, ready - ready_now, offset=ready_now)
            ready_now = ready
        finished = max(0, (total or 0) - QUEUE_COUNT * ready_now)
        if finished > finished_now:
            fill_jobs(backend, names[-1], finished - finished_now, state="succeeded",
                      offset=finished_now)
            finished_now = finished
        analyze_table(backend)
        fill_s = time.perf_counter() - fill_started
        plan = explain_claim(backend, names[0])
        claim_ms, claimed = time_claim(backend, names[0])
        backend.set_concurrency_limit(names[0], LIMITED_MAX_RUNNING)
        try:
            limited_ms, _ = time_claim(backend, names[0], limited=True)
        finally:
            backend.set_concurrency_limit(names[0], None)
        backend.set_rate_limit(names[0], LIMITED_MAX_RUNNING, 60_000)
        try:
            rate_ms, _ = time_claim(backend, names[0], limited=True)
        finally:
            backend.set_rate_limit(names[0], None, None)
        if not keyed_now:  # keyed jobs at the head of the second queue (10 keys)
            queue.enqueue_many([{"queue": names[1], "payload": i, "priority": 1,
                                 "concurrency_key": f"bench-key-{i % KEYS}",
                                 "concurrency_limit": LIMITED_MAX_RUNNING}
                                for i in range(KEYED_JOBS)])
            keyed_now = True
        keyed_ms, _ = time_claim(backend, names[1], keyed=True)
        results.append({
            "engine": backend.engine, "ready": ready, "total": QUEUE_COUNT * ready_now +
            finished_now, "queues": QUEUE_COUNT, "limit": CLAIM_LIMIT, "claimed": claimed,
            "claim_ms": round(claim_ms, 3), "limited_claim_ms": round(limited_ms, 3),
            "rate_claim_ms": round(rate_ms, 3), "keyed_claim_ms": round(keyed_ms, 3),
            "server_ms": None if plan.server_ms is None else round(plan.server_ms, 3),
            "buffers": plan.buffers, "ordered_walk": plan.ordered_walk,
            "nodes": plan.nodes, "fill_s": round(fill_s, 2)})
    return results
