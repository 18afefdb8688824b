"""A job given back by a graceful shutdown (``Queue.release``) shows its real attempt budget
(``released``: given_back + snoozes): 0/25 after a release, not 1/26, in the API, ``portq job``,
``portq jobs`` and the dashboard, on every reachable engine; SQL Server and Oracle parse."""

from __future__ import annotations

import json
from typing import Any

import pytest

from portq.conformance.helpers import run_portq
from portq.conformance.plugin import TEST_PREFIX
from portq.engines import NAMES
from portq.sql import load_queries

P = ["--prefix", TEST_PREFIX]


def test_a_released_job_shows_its_real_budget(engine_url: str, queue: Any,
                                              qname: str) -> None:
    job_id = queue.enqueue(qname, 1, max_attempts=25)
    (job,) = queue.claim(qname, "w1", limit=1)
    assert queue.release(job)
    record = queue.job(job_id)
    assert (record.attempts, record.max_attempts, record.released) == (1, 26, 1)
    assert (record.attempts_spent, record.attempts_allowed) == (0, 25)
    (job,) = queue.claim(qname, "w2", limit=1)
    assert queue.fail(job, "boom", retry_in=0)
    listed = {r.id: r for r in queue.jobs(queue=qname)}[job_id]
    assert (listed.attempts_spent, listed.attempts_allowed, listed.released) == (1, 25, 1)
    for order in ("-id", "run_at"):
        assert queue.jobs(queue=qname, order=order)[0].released == 1
    shown = run_portq("job", engine_url, *P, str(job_id)).stdout
    assert "attempts     1/25 (1 given back)" in shown
    assert "generation   2" in shown
    data = json.loads(run_portq("job", engine_url, *P, str(job_id), "--json").stdout)
    assert data["released"] == 1 and data["max_attempts"] == 26
    table = run_portq("jobs", engine_url, *P, "--queue", qname).stdout.splitlines()
    assert " 1/25 " in table[1]
    pytest.importorskip("starlette", reason="the dashboard needs portq[web]")
    from starlette.testclient import TestClient

    from portq.web import app as web_app
    with TestClient(web_app(queue), base_url="http://127.0.0.1") as c:
        page = c.get(f"/jobs/{job_id}").text
        assert "1 / 25" in page and "1 given back" in page
        assert ">1/25<" in c.get(f"/jobs?queue={qname}").text


@pytest.mark.parametrize("engine", NAMES)
def test_release_counts_the_given_back_attempts_and_listings_show_them(engine: str) -> None:
    """release counts an attempt it gives back in given_back (a Snooze in snoozes); every
    job listing returns both added up as ``released``."""
    queries = load_queries(engine)
    assert "given_back = given_back + CASE WHEN" in queries["release"]
    assert "snoozes = snoozes + 1" in queries["snooze"]
    for name in ("job", "jobs", "jobs_newest", "jobs_by_run_at"):
        assert "given_back + snoozes AS released" in " ".join(queries[name].split()), name
