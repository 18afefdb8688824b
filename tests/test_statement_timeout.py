"""``statement_timeout_ms`` (an option of :func:`portq.connect`, set by ``portq dashboard
--query-timeout``): the database itself stops a statement that runs too long, on every
reachable engine, with one :class:`portq.StatementTimeout`; the connection stays usable.
And the dashboard: a slow listing is a readable 503, and payload searches never take every
connection (a job page still loads while they run)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import portq
from portq.conformance.plugin import TEST_PREFIX
from portq.errors import StatementTimeout

#: 10^8 rows of a cross join of ten-row tables: seconds on every engine, stopped sooner
_DIGITS = " UNION ALL ".join(f"SELECT {d} AS d" for d in range(10))
SLOW_SQL = "SELECT COUNT(*) FROM " + ", ".join(f"({_DIGITS}) t{i}" for i in range(8))


def test_a_long_statement_is_stopped_by_the_database(engine_url: str, queue: portq.Queue,
                                                     qname: str) -> None:
    with portq.connect(engine_url, prefix=TEST_PREFIX, statement_timeout_ms=300) as q:
        backend = q.backend
        started = time.monotonic()
        with pytest.raises(StatementTimeout, match="statement_timeout_ms=300") as caught:
            backend.run("probe", lambda cur: backend.execute(cur, SLOW_SQL).fetchall(),
                        write=False)
        took = time.monotonic() - started
        assert took < 5, f"stopped only after {took:.1f}s"
        assert "\n" not in str(caught.value)
        # the pooled connection still works, and ordinary operations are unaffected
        job_id = q.enqueue(qname, {"n": 1})
        assert q.job(job_id) is not None and q.stats(qname)[0].ready == 1
    with portq.connect(engine_url, prefix=TEST_PREFIX) as q:   # no limit: it would run
        assert q.backend.statement_timeout_ms is None


@pytest.mark.parametrize("bad", [0, -5, 1.5, "100", True, 3_600_001])
def test_a_bad_statement_timeout_is_one_clear_error(engine_url: str, bad: Any) -> None:
    with pytest.raises(portq.ConfigurationError, match="statement_timeout_ms"):
        portq.connect(engine_url, prefix=TEST_PREFIX, statement_timeout_ms=bad)


pytest.importorskip("starlette", reason="the dashboard needs portq[web]")


def test_searches_never_take_every_connection(queue: portq.Queue, qname: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Two searches held running: a third is told to wait (503 at once), while job pages
    and the overview still answer at once."""
    from starlette.testclient import TestClient

    from portq.web import app as web_app
    job_id = queue.enqueue(qname, {"note": "needle"})
    gate, inside = threading.Event(), threading.Semaphore(0)
    real = queue.jobs

    def slow_search(*args: Any, **kw: Any) -> Any:
        if kw.get("text"):
            inside.release()
            assert gate.wait(30)
        return real(*args, **kw)
    monkeypatch.setattr(queue, "jobs", slow_search)
    with TestClient(web_app(queue), base_url="http://127.0.0.1") as c:
        answers: list[int] = []
        threads = [threading.Thread(target=lambda: answers.append(
            c.get(f"/jobs?queue={qname}&text=needle").status_code)) for _ in range(2)]
        for t in threads:
            t.start()
        assert inside.acquire(timeout=10) and inside.acquire(timeout=10)
        started = time.monotonic()
        third = c.get(f"/jobs?queue={qname}&text=needle")
        assert third.status_code == 503 and "searches are running" in third.text
        assert c.get(f"/jobs/{job_id}").status_code == 200
        assert c.get(f"/jobs?queue={qname}").status_code == 200
        assert time.monotonic() - started < 5
        gate.set()
        for t in threads:
            t.join(30)
        assert answers == [200, 200]


def test_a_listing_the_database_stops_is_a_readable_503(engine_url: str, queue: portq.Queue,
                                                        qname: str) -> None:
    """A real statement timeout on the Jobs page: 1 ms stops a search through 3000
    payloads on every engine (SQLite checks its deadline every 10,000 VM steps)."""
    from starlette.testclient import TestClient

    from portq.web import app as web_app
    queue.enqueue_many([{"queue": qname, "payload": {"text": "x" * 2000, "i": i}}
                        for i in range(3000)])
    with portq.connect(engine_url, prefix=TEST_PREFIX, statement_timeout_ms=1) as q, \
            TestClient(web_app(q), base_url="http://127.0.0.1") as c:
        r = c.get(f"/jobs?queue={qname}&text=no-such-needle")
        assert r.status_code == 503, r.text[:500]
        assert "stopped this listing after 0.001 s" in r.text
        assert "Traceback" not in r.text


def test_a_stopped_listing_keeps_its_message_when_the_pages_other_reads_stop_too(
        engine_url: str, queue: portq.Queue, qname: str) -> None:
    """After a stopped listing the Jobs page still reads the workers' registry (its queue
    filter's choices); a loaded database stopped that read too and the page became the
    generic "database unavailable" 503 (seen in CI). Here a registry of 2,000 workers with
    long queue lists makes that read outlast 1 ms every time: the page keeps the
    listing's own message and offers no queue names."""
    from starlette.testclient import TestClient

    from portq.job import WorkerInfo
    from portq.web import app as web_app
    queue.enqueue_many([{"queue": qname, "payload": {"text": "x" * 2000, "i": i}}
                        for i in range(3000)])
    served = tuple(f"{qname}-{n}" for n in range(60))
    ids = [f"{qname}-w{n}" for n in range(2000)]
    for worker_id in ids:
        queue.backend.beat_worker(WorkerInfo(worker_id, "host", 1, served, 4), 600_000)
    try:
        with portq.connect(engine_url, prefix=TEST_PREFIX, statement_timeout_ms=1) as q:
            with pytest.raises(StatementTimeout):
                q.workers()  # the registry's read alone outlasts the timeout
            with TestClient(web_app(q), base_url="http://127.0.0.1") as c:
                r = c.get(f"/jobs?queue={qname}&text=no-such-needle")
        assert r.status_code == 503, r.text[:500]
        assert "stopped this listing after 0.001 s" in r.text
        assert served[0] not in r.text.replace(f"value=\"{qname}\"", "")
    finally:
        for worker_id in ids:
            queue.backend.deregister_worker(worker_id)
