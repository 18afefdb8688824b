"""Names and keys compare exactly, whatever the engine's default collation; the empty
string is refused as a key or queue name everywhere (Oracle would store it as NULL); and
operator reads never wait for an application's uncommitted enqueue."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import portq
from portq.conformance.helpers import counts
from portq.conformance.plugin import raw_connection


def test_keys_differing_in_case_or_trailing_space_are_distinct(queue: portq.Queue,
                                                               qname: str) -> None:
    keys = [f"{qname}-k", f"{qname}-K", f"{qname}-k ", f"{qname}-k  ", f"{qname}-é",
            f"{qname}-e"]
    ids = [queue.enqueue(qname, i, key=k) for i, k in enumerate(keys)]
    assert len(set(ids)) == len(keys), "two different keys returned the same job"
    assert [queue.enqueue(qname, "again", key=k) for k in keys] == ids
    assert {r.key: r.payload for r in queue.jobs("ready", queue=qname)} == \
        {k: i for i, k in enumerate(keys)}


def test_queue_names_differing_in_case_are_distinct(queue: portq.Queue, qname: str) -> None:
    lower, upper = f"{qname}-mail", f"{qname}-Mail"
    queue.enqueue(lower, "lower")
    queue.enqueue(upper, "upper")
    queue.enqueue(upper, "upper again")
    assert counts(queue, lower)["ready"] == 1 and counts(queue, upper)["ready"] == 2
    assert {s.queue: s.ready for s in queue.stats() if s.queue in (lower, upper)} == \
        {lower: 1, upper: 2}
    (job,) = queue.claim(lower, "w", limit=5)
    assert job.payload == "lower" and job.queue == lower
    assert [r.payload for r in queue.jobs("ready", queue=lower)] == []
    assert sorted(r.payload for r in queue.jobs("ready", queue=upper)) == \
        ["upper", "upper again"]


@pytest.mark.parametrize("call", [
    lambda q, name: q.enqueue(name, 1, key=""),
    lambda q, name: q.enqueue_many([{"queue": name, "payload": 1},
                                    {"queue": name, "payload": 2, "key": ""}]),
], ids=["enqueue", "enqueue_many"])
def test_empty_key_is_refused_and_nothing_is_written(queue: portq.Queue, qname: str,
                                                     call: Any) -> None:
    with pytest.raises(portq.ConfigurationError, match="non-empty"):
        call(queue, qname)
    assert counts(queue, qname)["ready"] == 0


def test_empty_queue_name_is_refused(queue: portq.Queue) -> None:
    for call in (lambda: queue.enqueue("", 1), lambda: queue.claim("", "w"),
                 lambda: queue.stats(""), lambda: queue.jobs("ready", queue="")):
        with pytest.raises(portq.InvalidQueueName):
            call()


def test_empty_strings_inside_payloads_round_trip(queue: portq.Queue, qname: str) -> None:
    payloads = ["", {"": ""}, ["", [""]]]
    ids = [queue.enqueue(qname, p) for p in payloads]
    got = {j.id: j.payload for j in queue.claim(qname, "w", limit=5)}
    assert [got[i] for i in ids] == payloads


def test_operator_reads_do_not_wait_for_an_uncommitted_enqueue(queue: portq.Queue,
                                                               qname: str) -> None:
    """On SQL Server with READ_COMMITTED_SNAPSHOT OFF a plain SELECT waits for the
    application's transaction to end; stats, jobs and job_errors must not."""
    done = queue.enqueue(qname, "committed")
    (job,) = queue.claim(qname, "w", limit=1)
    assert queue.fail(job, "boom", retry_in=3600)
    conn = raw_connection(queue)
    try:
        queue.enqueue(qname, "uncommitted", conn=conn)
        results: dict[str, Any] = {}

        def read() -> None:
            results["stats"] = counts(queue, qname)
            results["jobs"] = [r.payload for r in queue.jobs("ready", queue=qname)]
            results["errors"] = queue.job_errors(done)
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout=15)
        assert not reader.is_alive(), "an operator read waited for the open transaction"
        assert results["jobs"] == ["committed"]
        assert results["stats"]["scheduled"] == 1 and results["stats"]["ready"] == 0
        assert [e for _, _, e in results["errors"]] == ["boom"]
    finally:
        conn.rollback()
        conn.close()
    assert [r.payload for r in queue.jobs("ready", queue=qname)] == ["committed"]
