"""Invariant 6: the table itself rejects malformed rows, whatever code writes them."""

from __future__ import annotations

import pytest

import portq
from portq.backends.contract import ErrorKind
from portq.conformance.helpers import counts, raw_update

MALFORMED = {
    "running without a worker or lease": "state = 'running'",
    "running without a lease": "state = 'running', worker_id = 'w'",
    "succeeded without finished_at": "state = 'succeeded'",
    "ready with finished_at": "finished_at = created_at",
    "unknown state": "state = 'exploded'",
    # a PAD SPACE comparison (MySQL/MariaDB utf8mb4_bin, SQL Server) would let it pass
    "state with a trailing space": "state = 'ready '",
    "empty queue name": "queue = ''",
    "negative attempts": "attempts = -1",
    "attempts over max_attempts": "attempts = max_attempts + 1",
    "zero max_attempts": "max_attempts = 0, attempts = 0",
}


@pytest.mark.parametrize("change", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_state_is_rejected(queue: portq.Queue, qname: str, change: str) -> None:
    job_id = queue.enqueue(qname, "x")
    kind = raw_update(queue, f"UPDATE portq_job SET {change} WHERE job_id = :job_id",
                      {"job_id": job_id})
    assert kind is ErrorKind.CHECK
    assert counts(queue, qname)["ready"] == 1, "the row changed despite the violation"


def test_duplicate_key_is_rejected_by_the_schema(queue: portq.Queue, qname: str) -> None:
    queue.enqueue(qname, "a", key=qname + "-k1")
    other = queue.enqueue(qname, "b", key=qname + "-k2")
    # the key is copied from the other row, so the engine's key type never matters (SQL
    # Server stores keys as VARBINARY); the derived table lets MySQL read the updated table
    first = queue.jobs("ready", queue=qname)[0].id
    kind = raw_update(queue, "UPDATE portq_job SET job_key = (SELECT k.job_key FROM "
                      "(SELECT job_key FROM portq_job WHERE job_id = :first) k) "
                      "WHERE job_id = :job_id", {"first": first, "job_id": other})
    assert kind is ErrorKind.UNIQUE


def test_migrate_is_idempotent(queue: portq.Queue) -> None:
    version = queue.migrate()
    assert version == queue.migrate() == queue.backend.latest_version()
    queue.backend.check_schema()
