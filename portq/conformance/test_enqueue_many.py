"""enqueue_many keeps enqueue's semantics when an engine inserts a batch in one statement
(PostgreSQL): ids in the order given, existing and repeated keys return the first id,
a JSON null payload stays null, per-job options are kept."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import portq
from portq.conformance.helpers import counts


def test_enqueue_many_ids_keys_and_options(queue: portq.Queue, qname: str) -> None:
    existing = queue.enqueue(qname, "old", key=f"{qname}-a")
    later = datetime.now(UTC) + timedelta(hours=1)
    ids = queue.enqueue_many([
        {"queue": qname, "payload": {"text": "é\"'"}},
        {"queue": qname, "payload": 2, "key": f"{qname}-a"},
        {"queue": qname, "payload": 3, "key": f"{qname}-b"},
        {"queue": qname, "payload": 4, "key": f"{qname}-b"},
        {"queue": qname, "payload": None, "run_at": later},
        {"queue": qname, "payload": [1], "priority": 7, "max_attempts": 2},
    ])
    assert ids[1] == existing and ids[3] == ids[2]
    fresh = [ids[0], ids[2], ids[4], ids[5]]
    assert fresh == sorted(fresh) and len(set(fresh)) == 4 and existing not in fresh
    c = counts(queue, qname)
    assert (c["ready"], c["scheduled"]) == (4, 1)
    records = {r.id: r for r in queue.jobs("ready", queue=qname)}
    assert records[ids[0]].payload == {"text": "é\"'"}
    assert records[existing].payload == "old" and records[ids[2]].payload == 3
    scheduled = records[ids[4]]
    assert scheduled.payload is None and scheduled.run_at is not None
    assert abs((scheduled.run_at - later).total_seconds()) < 1
    assert (records[ids[5]].priority, records[ids[5]].max_attempts) == (7, 2)
    first = queue.claim(qname, "w", limit=1)
    assert [j.id for j in first] == [ids[5]]  # highest priority first


def test_concurrent_bulk_enqueues_return_each_rows_own_id(queue: portq.Queue,
                                                          qname: str) -> None:
    """Several enqueue_many calls at once, each one multi-row INSERT where the engine has
    it: every id returned names the row of the job given at that place (an engine that
    works ids out from the first one and the step must not mix up two statements' ids)."""
    threads, calls, size = 4, 3, 250
    returned: dict[int, list[int]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def enqueue(t: int) -> None:
        try:
            start.wait()
            for c in range(calls):
                ids = queue.enqueue_many([{"queue": qname, "payload": [t, c, i]}
                                          for i in range(size)])
                returned.update({job_id: [t, c, i] for i, job_id in enumerate(ids)})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=enqueue, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert errors == []
    assert len(returned) == threads * calls * size  # no id returned twice
    stored: dict[int, object] = {}
    after = 0
    while page := queue.jobs("ready", queue=qname, limit=1000, after_id=after):
        stored.update({r.id: r.payload for r in page})
        after = page[-1].id
    assert stored == returned
