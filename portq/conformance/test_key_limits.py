"""Per-key concurrency limits (``enqueue(concurrency_key=, concurrency_limit=)``): at most
that many running jobs of a queue with one key, across every worker process; a full key
never blocks the jobs behind it. Checked from the handlers' own start and end times."""

from __future__ import annotations

from pathlib import Path

import pytest

import portq
from portq.conformance.helpers import counts, on_own_connections
from portq.conformance.test_limits import most_at_once, spans_of_workers


def keyed(qname: str, key: str, limit: int, n: int, **extra: object) -> list[dict[str, object]]:
    return [{"queue": qname, "payload": i, "concurrency_key": key, "concurrency_limit": limit,
             **extra} for i in range(n)]


def test_a_full_key_is_skipped_not_waited_on(queue: portq.Queue, qname: str) -> None:
    """One claim takes one job of a limit-1 key and the unkeyed jobs behind it; the other
    jobs of the key stay ready (attempt not spent) until the running one ends."""
    ids = queue.enqueue_many(keyed(qname, "account:42", 1, 3))
    free = queue.enqueue_many([{"queue": qname, "payload": "free"} for _ in range(2)])
    jobs = queue.claim(qname, "w1", limit=10)
    assert sorted(j.id for j in jobs) == sorted([ids[0], *free])
    assert [j.concurrency_key for j in jobs if j.id == ids[0]] == ["account:42"]
    waiting = [r for r in queue.jobs(queue=qname) if r.id in ids[1:]]
    assert [(r.state, r.attempts, r.worker_id) for r in waiting] == [("ready", 0, None)] * 2
    assert queue.claim(qname, "w2", limit=10) == []
    first = next(j for j in jobs if j.id == ids[0])
    assert queue.complete(first)
    assert [j.id for j in queue.claim(qname, "w2", limit=10)] == [ids[1]]


def test_keys_are_separate_and_exact(queue: portq.Queue, qname: str) -> None:
    """Limit 2 lets two run; keys differing in case or a trailing space are other keys;
    the same key in another queue is another key."""
    queue.enqueue_many(keyed(qname, "k", 2, 3) + keyed(qname, "K", 1, 2)
                       + keyed(qname, "k ", 1, 2) + keyed(f"{qname}-b", "k", 1, 2))
    got = [j.concurrency_key for j in queue.claim(qname, "w", limit=20)]
    assert sorted(str(k) for k in got) == ["K", "k", "k", "k "]
    assert [j.concurrency_key for j in queue.claim(f"{qname}-b", "w", limit=20)] == ["k"]


def test_concurrent_claimers_never_exceed_a_key(engine_url: str, queue: portq.Queue,
                                                qname: str) -> None:
    """Eight claimers at once on their own connections: the claim filter races, the
    recount under the queue row's lock puts the excess back."""
    queue.enqueue_many(keyed(qname, "hot", 1, 20) + keyed(qname, "warm", 3, 20))
    got: list[str | None] = []

    def claim(q: portq.Queue, i: int) -> None:
        got.extend(j.concurrency_key for j in q.claim(qname, f"w{i}", limit=5))
    on_own_connections(engine_url, queue.backend.prefix, 8, claim)
    assert got.count("hot") == 1 and got.count("warm") == 3, got
    c = counts(queue, qname)
    assert (c["running"], c["ready"]) == (4, 36)


def test_enqueue_paths_store_the_key(queue: portq.Queue, qname: str) -> None:
    """enqueue, enqueue_many (bulk statements) and a task's options all store it."""
    queue.enqueue(qname, 1, concurrency_key="one", concurrency_limit=1)
    queue.enqueue_many(keyed(qname, "bulk", 1, 3) + [{"queue": qname, "payload": "x"}] * 2)

    @portq.task(queue=qname, name=f"{qname}.keyed")
    def work() -> None:
        """A task enqueued with a per-key limit."""
    work.options(concurrency_key="task", concurrency_limit=1).enqueue_result(using=queue)
    work.options(concurrency_key="task", concurrency_limit=1).enqueue_result(using=queue)
    got = sorted(str(j.concurrency_key) for j in queue.claim(qname, "w", limit=50))
    assert got == ["None", "None", "bulk", "one", "task"]


def test_bad_key_limits_are_refused(queue: portq.Queue, qname: str) -> None:
    bad: list[dict[str, object]] = [
        {"concurrency_key": "k"}, {"concurrency_limit": 1},
        {"concurrency_key": "k", "concurrency_limit": 0},
        {"concurrency_key": "k", "concurrency_limit": True},
        {"concurrency_key": "k", "concurrency_limit": "1"},
        {"concurrency_key": "", "concurrency_limit": 1},
        {"concurrency_key": "x" * 256, "concurrency_limit": 1},
        {"concurrency_key": 5, "concurrency_limit": 1}]
    for options in bad:
        with pytest.raises(portq.ConfigurationError, match="concurrency"):
            queue.enqueue(qname, 1, **options)  # type: ignore[arg-type]
        with pytest.raises(portq.ConfigurationError, match="concurrency"):
            queue.enqueue_many([{"queue": qname, **options}])
    assert counts(queue, qname)["ready"] == 0


@pytest.mark.slow
def test_worker_processes_never_exceed_a_key_limit(
        engine_url: str, queue: portq.Queue, qname: str, tmp_path: Path) -> None:
    """Four worker processes of three threads; keys with limits 1 and 2 enqueued before
    unkeyed jobs: by the handlers' own times no key ever ran more than its limit at once,
    the limit-2 key did run two at once, and the unkeyed jobs behind the keyed ones all
    started before the limit-1 key's last job (no head-of-line blocking)."""
    jobs = keyed(qname, "one", 1, 8) + keyed(qname, "two", 2, 10) + \
        [{"queue": qname, "payload": i} for i in range(20)]
    spans = spans_of_workers(engine_url, queue, qname, tmp_path, jobs, processes_n=4,
                             concurrency=3, sleep=0.3, idle_max="0.1s")
    by_key = {k: [s for s in spans if s["concurrency_key"] == k] for k in ("one", "two")}
    assert most_at_once(by_key["one"]) == 1, most_at_once(by_key["one"])
    assert most_at_once(by_key["two"]) == 2, most_at_once(by_key["two"])
    unkeyed = [s["start"] for s in spans if s["concurrency_key"] is None]
    assert max(unkeyed) < max(s["start"] for s in by_key["one"])
