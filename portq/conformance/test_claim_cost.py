"""Invariant 9: claim cost stays flat as the table grows. Timing is noisy, so this proves
the cause instead: with many ready jobs in the claimed queue and in other queues, the
engine's plan for the claim walks the ready index in order for one queue and stops after
``limit`` rows: no Sort node (PostgreSQL), no temp B-tree (SQLite), no filesort
(MySQL/MariaDB). ``portq bench URL --scenario claim-latency`` measures the times."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import portq
from portq import bench

READY = 20_000  # in the claimed queue
OTHER_READY = 5_000  # in each of two other queues
FINISHED = 10_000


@pytest.fixture
def crowded_queue(queue: portq.Queue, qname: str) -> Iterator[str]:
    """``qname`` with READY ready jobs, beside two other busy queues and finished jobs."""
    backend = queue.backend
    if backend.engine not in bench.PLANNED_ENGINES:
        pytest.skip(f"portq bench has no table filler / plan reader for {backend.engine} yet")
    names = [qname, f"{qname}-b", f"{qname}-c"]
    try:
        bench.fill_jobs(backend, names[0], READY)
        for other in names[1:]:
            bench.fill_jobs(backend, other, OTHER_READY)
        bench.fill_jobs(backend, names[2], FINISHED, state="succeeded")
        yield qname
    finally:
        backend.run("cleanup", lambda cur: backend.execute(
            cur, f"DELETE FROM {backend.prefix}job WHERE queue IN (:names)",
            {"names": tuple(names)}))


@pytest.mark.parametrize("analyzed", [False, True], ids=["fresh-stats", "analyzed"])
def test_claim_walks_the_ready_index_in_order(queue: portq.Queue, crowded_queue: str,
                                              analyzed: bool) -> None:
    backend = queue.backend
    if analyzed:
        bench.analyze_table(backend)
    plan = bench.explain_claim(backend, crowded_queue, limit=bench.CLAIM_LIMIT, analyze=False)
    assert plan.ordered_walk, f"{backend.engine} claim plan is not an ordered index walk:\n" \
        f"{plan.nodes}\n{plan.text}"
    # the claim itself takes the first jobs of that order, from that queue only
    params = bench.claim_params(crowded_queue)
    with backend.transaction(commit=False) as cur:
        rows = backend.claim_rows(cur, params)
    assert len(rows) == bench.CLAIM_LIMIT
    assert {row[1] for row in rows} == {crowded_queue}
    assert all(int(row[3]) == 2 for row in rows)  # the highest priority the fill gives
