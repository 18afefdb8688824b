"""Invariant 9: claim cost stays flat as the table grows. Timing is noisy, so this proves
the cause instead: with many ready jobs in the claimed queue and in other queues, the
engine's plan for the claim walks the ready index in order for one queue and stops after
``limit`` rows: no Sort node (PostgreSQL), no temp B-tree (SQLite), no filesort
(MySQL/MariaDB). ``portq bench URL --scenario claim-latency`` measures the times.

A plan depends on the planner's statistics, so each case fills a table set of its own
(prefix ``portqc<hex>_``, dropped after) and takes them at a defined moment: never
(``fresh-stats``: a new table, as after ``portq migrate`` and before autovacuum's first
ANALYZE), before the claimed queue filled (``stale-stats``: a burst into a queue the
statistics have not seen), or after the fill (``analyzed``). Statistics left behind by
other tests on a shared table (which made the PostgreSQL fresh-stats case pick a bitmap
scan and a sort one run in four) play no part."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

import portq
from portq import bench
from portq.url import parse_url

READY = 20_000  # in the claimed queue
OTHER_READY = 5_000  # in each of two other queues
FINISHED = 10_000
STATS = ("fresh-stats", "stale-stats", "analyzed")


@pytest.fixture
def own_tables(engine_url: str) -> Iterator[portq.Queue]:
    """A Queue on a new, migrated table set that only this test fills."""
    engine = parse_url(engine_url).engine
    if engine not in bench.PLANNED_ENGINES:
        pytest.skip(f"portq bench has no table filler / plan reader for {engine} yet")
    queue = portq.connect(engine_url, prefix=f"portqc{uuid.uuid4().hex[:6]}_")
    try:
        queue.migrate()
        yield queue
    finally:
        bench.drop_tables(queue.backend)
        queue.close()


@pytest.mark.parametrize("stats", STATS)
def test_claim_walks_the_ready_index_in_order(own_tables: portq.Queue, qname: str,
                                              stats: str) -> None:
    backend = own_tables.backend
    busy, finished = f"{qname}-b", f"{qname}-c"
    bench.fill_jobs(backend, busy, OTHER_READY)
    bench.fill_jobs(backend, finished, OTHER_READY)
    bench.fill_jobs(backend, finished, FINISHED, state="succeeded")
    if stats == "stale-stats":
        bench.analyze_table(backend)
    bench.fill_jobs(backend, qname, READY)
    if stats == "analyzed":
        bench.analyze_table(backend)
    plan = bench.explain_claim(backend, qname, limit=bench.CLAIM_LIMIT, analyze=False)
    assert plan.ordered_walk, f"{backend.engine} claim plan is not an ordered index walk:\n" \
        f"{plan.nodes}\n{plan.text}"
    # the claim itself takes the first jobs of that order, from that queue only
    params = bench.claim_params(qname)
    with backend.transaction(commit=False) as cur:
        rows = backend.claim_rows(cur, params)
    assert len(rows) == bench.CLAIM_LIMIT
    assert {row[1] for row in rows} == {qname}
    assert all(int(row[3]) == 2 for row in rows)  # the highest priority the fill gives
