"""A burst worker exits while another session holds a lock on a ready row (PostgreSQL and
MariaDB: their `pending` probe skips locked rows as the claim does; SQL Server's reads
with READPAST; SQLite has no row locks: a writer blocks the whole file, and the claim
waits for it). Issue 29, item 12."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

import portq
from portq.engines import ENGINES
from portq.worker import Worker

#: the engines with a server here: their test URL (portq/engines.py)
URLS = {e.name: os.environ.get(e.test_url_env, e.default_test_url)
        for e in ENGINES if e.live_here and e.test_url_env and e.default_test_url}


@pytest.fixture(params=sorted(URLS))
def queue(request: pytest.FixtureRequest) -> Iterator[portq.Queue]:
    try:
        q = portq.connect(URLS[request.param])
        q.migrate()
    except portq.errors.CannotConnect as exc:
        if request.param in os.environ.get("PORTQ_REQUIRE_ENGINES", ""):
            raise
        pytest.skip(f"{request.param} not reachable: {exc}")
    yield q
    q.close()


def test_burst_exits_while_another_session_locks_a_ready_row(queue: portq.Queue) -> None:
    name = f"burst-lock-{uuid.uuid4().hex[:8]}"
    locked = queue.enqueue(name, "locked")
    free = queue.enqueue(name, "free")
    other = queue.backend.open_connection()  # another session, holding the row lock
    try:
        cur = other.cursor()
        if queue.backend.engine == "mysql":
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute("START TRANSACTION")
        table = f"{queue.backend.prefix}job"
        cur.execute(f"SELECT job_id FROM {table} WHERE job_id = {int(locked)} FOR UPDATE")
        cur.fetchall()
        assert queue.backend.pending(name) == (True, False)  # the free row
        ran: list[object] = []
        worker = Worker(queue, name, lambda job: ran.append(job.payload), burst=True,
                        concurrency=1, idle_min=0.01, idle_max=0.05)
        done = threading.Event()
        thread = threading.Thread(target=lambda: (worker.run(), done.set()), daemon=True)
        started = time.monotonic()
        thread.start()
        exited = done.wait(20)
        if not exited:
            worker.stop()
        assert exited, "the burst worker waited for the other session's lock"
        assert time.monotonic() - started < 20 and ran == ["free"]
        assert queue.backend.pending(name) == (False, False)  # the locked row is skipped
        record = queue.job(locked)
        assert record is not None and record.state == "ready"
        other.rollback()
        assert queue.backend.pending(name) == (True, False)  # seen again once released
        free_record = queue.job(free)
        assert free_record is not None and free_record.state == "succeeded"
    finally:
        other.close()
        queue.cancel(locked)
