"""Scoped uniqueness: a plain key is unique across every queue; a key scoped per queue,
for a period or by states returns the existing job only while it is live in its scope,
under concurrent enqueues too, and in the caller's transaction."""

from __future__ import annotations

import json
import time

import pytest

import portq
from portq.conformance.helpers import counts, on_own_connections, run_portq
from portq.conformance.plugin import raw_connection
from portq.job import EnqueueResult


def test_a_plain_key_is_global_across_queues(queue: portq.Queue, qname: str) -> None:
    first = queue.enqueue_result(f"{qname}-a", "a", key=f"{qname}-k")
    other_queue = queue.enqueue_result(f"{qname}-b", "b", key=f"{qname}-k")
    assert first.created and not other_queue.created and other_queue.id == first.id
    assert counts(queue, f"{qname}-b")["ready"] == 0


def test_a_key_scoped_per_queue(queue: portq.Queue, qname: str) -> None:
    key = f"{qname}-k"
    a1 = queue.enqueue_result(f"{qname}-a", 1, key=key, unique_per_queue=True)
    b1 = queue.enqueue_result(f"{qname}-b", 2, key=key, unique_per_queue=True)
    a2 = queue.enqueue_result(f"{qname}-a", 3, key=key, unique_per_queue=True)
    plain = queue.enqueue_result(f"{qname}-a", 4, key=key)  # plain keys live apart
    assert (a1.created, b1.created, a2.created, plain.created) == (True, True, False, True)
    assert a2.id == a1.id != b1.id
    assert counts(queue, f"{qname}-a")["ready"] == 2 and counts(queue, f"{qname}-b")["ready"] == 1
    job = queue.job(a1.id)
    assert job is not None and job.key is None  # a scoped key is not the job's key


def test_a_key_unique_for_a_period(queue: portq.Queue, qname: str) -> None:
    key = f"{qname}-p"
    first = queue.enqueue_result(qname, 1, key=key, unique_for=1.5)
    within = queue.enqueue_result(qname, 2, key=key, unique_for=1.5)
    assert first.created and not within.created and within.id == first.id
    time.sleep(1.8)  # measured by the database clock against the job's created_at
    after = queue.enqueue_result(qname, 3, key=key, unique_for=1.5)
    again = queue.enqueue_result(qname, 4, key=key, unique_for=1.5)
    assert after.created and after.id != first.id
    assert not again.created and again.id == after.id
    assert counts(queue, qname)["ready"] == 2


def test_a_key_unique_while_ready_or_running(queue: portq.Queue, qname: str) -> None:
    key, states = f"{qname}-s", ("ready", "running")
    first = queue.enqueue_result(qname, 1, key=key, unique_states=states)
    assert not queue.enqueue_result(qname, 2, key=key, unique_states=states).created
    (job,) = queue.claim(qname, "w1", limit=5)
    running = queue.enqueue_result(qname, 3, key=key, unique_states=states)
    assert not running.created and running.id == first.id
    assert queue.complete(job)
    after = queue.enqueue_result(qname, 4, key=key, unique_states=states)
    assert after.created and after.id != first.id
    # only while ready: a running job no longer holds the key
    ready_only = f"{qname}-r"
    one = queue.enqueue_result(qname, 5, key=ready_only, unique_states="ready")
    assert not queue.enqueue_result(qname, 6, key=ready_only, unique_states="ready").created
    claimed = queue.claim(qname, "w2", limit=5)
    assert {j.id for j in claimed} == {after.id, one.id}
    assert queue.enqueue_result(qname, 7, key=ready_only, unique_states="ready").created


def test_pruning_the_job_frees_its_scoped_key(queue: portq.Queue, qname: str) -> None:
    key = f"{qname}-prune"
    first = queue.enqueue_result(qname, 1, key=key, unique_per_queue=True)
    (job,) = queue.claim(qname, "w", limit=1)
    assert queue.complete(job)
    assert not queue.enqueue_result(qname, 2, key=key, unique_per_queue=True).created
    time.sleep(0.05)  # finished more than 0 s ago
    assert queue.prune(0, queue=qname) == 1
    again = queue.enqueue_result(qname, 3, key=key, unique_per_queue=True)
    assert again.created and again.id != first.id


@pytest.mark.parametrize("key_row", ["new", "released"])
def test_concurrent_enqueues_of_a_scoped_key_create_one_job(engine_url: str,
                                                            queue: portq.Queue,
                                                            qname: str, key_row: str) -> None:
    """Eight connections enqueue one scoped key at once: one job. ``released``: the key's
    row exists and names a finished job, so only its row lock makes them take turns."""
    scope = {"key": f"{qname}-c", "unique_per_queue": True, "unique_states": ["ready"]}
    if key_row == "released":
        queue.enqueue(qname, "old", **scope)  # type: ignore[arg-type]
        (old,) = queue.claim(qname, "w", limit=1)
        assert queue.complete(old)
    results: list[EnqueueResult] = []

    def enqueue(q: portq.Queue, n: int) -> None:
        for i in range(5):
            results.append(q.enqueue_result(qname, [n, i], **scope))  # type: ignore[arg-type]

    on_own_connections(engine_url, queue.backend.prefix, 8, enqueue)
    assert len(results) == 40 and sum(r.created for r in results) == 1
    assert len({r.id for r in results}) == 1
    assert counts(queue, qname)["ready"] == 1


def test_a_scoped_enqueue_in_the_callers_transaction(queue: portq.Queue, qname: str) -> None:
    key = f"{qname}-t"
    conn = raw_connection(queue)
    try:
        first = queue.enqueue_result(qname, 1, key=key, unique_for=60, conn=conn)
        same = queue.enqueue_result(qname, 2, key=key, unique_for=60, conn=conn)
        conn.rollback()
        kept = queue.enqueue_result(qname, 3, key=key, unique_for=60, conn=conn)
        conn.commit()
    finally:
        conn.close()
    assert first.created and same.id == first.id and not same.created
    assert kept.created
    assert [j.payload for j in queue.claim(qname, "w", limit=5)] == [3]


@pytest.mark.parametrize(("options", "problem"), [
    ({"unique_for": 60}, "give key= too"),
    ({"key": "k", "unique_states": ["ready", "nope"]}, "unique_states must be some of"),
    ({"key": "k", "unique_for": -1}, "unique_for must be > 0"),
    ({"key": "k", "unique_per_queue": "yes"}, "unique_per_queue must be True or False"),
])
def test_bad_scopes_are_refused(queue: portq.Queue, qname: str, options: dict[str, object],
                                problem: str) -> None:
    with pytest.raises(portq.ConfigurationError, match=problem):
        queue.enqueue(qname, 1, **options)  # type: ignore[arg-type]
    assert counts(queue, qname)["ready"] == 0


def test_cli_enqueue_says_existing_with_the_id(engine_url: str, qname: str,
                                               table_prefix: str) -> None:
    """``portq enqueue --key`` says whether it created the job or found the live one, in
    words and in ``--json``."""
    def enqueue(*extra: str) -> dict[str, object]:
        out = run_portq("enqueue", engine_url, "--prefix", table_prefix, "--queue", qname,
                        "--payload", "1", "--json", *extra).stdout
        return json.loads(out)  # type: ignore[no-any-return]

    first = enqueue("--key", f"{qname}-cli")
    assert first["created"] is True and isinstance(first["id"], int)
    again = enqueue("--key", f"{qname}-cli")
    assert (again["id"], again["created"]) == (first["id"], False)
    scope = ("--key", f"{qname}-cli", "--unique-per-queue", "--unique-for", "1h",
             "--unique-states", "ready,running")
    scoped = enqueue(*scope)
    assert scoped["created"] is True and scoped["id"] != first["id"]
    assert (enqueue(*scope)["id"], enqueue(*scope)["created"]) == (scoped["id"], False)
    text = run_portq("enqueue", engine_url, "--prefix", table_prefix, "--queue", qname,
                     "--payload", "1", *scope).stdout.strip()
    assert text == f"existing job {scoped['id']} (key {qname}-cli)"
    bad = run_portq("enqueue", engine_url, "--prefix", table_prefix, "--queue", qname,
                    "--key", "k", "--unique-states", "ready,bogus", check=False)
    assert bad.returncode == 2 and "unique_states must be some of" in bad.stderr
    assert "Traceback" not in bad.stderr
