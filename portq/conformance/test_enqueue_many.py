"""enqueue_many keeps enqueue's semantics when an engine inserts a batch in one statement
(PostgreSQL): ids in the order given, existing and repeated keys return the first id,
a JSON null payload stays null, per-job options are kept."""

from __future__ import annotations

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
