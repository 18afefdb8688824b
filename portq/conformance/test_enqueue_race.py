"""Idempotent enqueue under contention: ``EnqueueResult.created`` is True for exactly one
caller per key, however many processes enqueue it at once (code that does a side effect
only when ``created`` must do it once)."""

from __future__ import annotations

from collections import Counter, defaultdict

import portq
from portq.conformance.helpers import counts, enqueue_keys_in_processes

PROCESSES, KEYS = 8, 300


def test_concurrent_enqueues_of_a_key_report_created_once(engine_url: str,
                                                          queue: portq.Queue,
                                                          qname: str) -> None:
    """8 processes enqueue the same 300 keys at once, in the same order: per key one job,
    every caller gets its id, and exactly one caller was told ``created``."""
    results = enqueue_keys_in_processes(engine_url, queue.backend.prefix, qname, PROCESSES, KEYS)
    created: Counter[int] = Counter()
    ids: defaultdict[int, set[int]] = defaultdict(set)
    for rows in results:
        assert len(rows) == KEYS
        for key, job_id, was_created in rows:
            created[key] += was_created
            ids[key].add(job_id)
    twice = sorted(k for k in range(KEYS) if created[k] != 1)
    assert not twice, (f"{len(twice)} of {KEYS} keys had created=True for "
                       f"{[created[k] for k in twice[:5]]} callers (keys {twice[:5]})")
    assert all(len(ids[k]) == 1 for k in range(KEYS))
    assert len({i for s in ids.values() for i in s}) == KEYS
    assert counts(queue, qname)["ready"] == KEYS
