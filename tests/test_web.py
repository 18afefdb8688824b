"""The dashboard's HTTP surface (Starlette test client, no browser) on every reachable engine:
pages, escaping, CSRF, read-only, the access token, bulk actions in bounded batches, paging,
mounting under a prefix, and `portq dashboard`'s refusal to serve beyond loopback."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("starlette", reason="the dashboard needs portq[web]")
pytest.importorskip("httpx", reason="Starlette's test client needs httpx")

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient
from webdata import (
    CSRF,
    EVIL_ATTR,
    EVIL_QUEUE,
    EVIL_SCRIPT,
    failed_twice,
    plant_xss,
)

import portq
import portq.web
from portq.conformance.helpers import run_portq
from portq.conformance.plugin import TEST_PREFIX
from portq.web import app as web_app

TOKEN = "t0ken-for-the-dashboard-tests"


@pytest.fixture
def client(queue: portq.Queue) -> Iterator[TestClient]:
    with TestClient(portq.web.app(queue), base_url="http://127.0.0.1") as c:
        yield c


def csrf_of(client: TestClient, path: str) -> str:
    match = CSRF.search(client.get(path).text)
    assert match, f"no CSRF token on {path}"
    return match.group(1)


def test_every_page_renders_and_escapes_user_data(client: TestClient, queue: portq.Queue,
                                                  qname: str) -> None:
    ids = plant_xss(queue, qname)
    pages = ["/", f"/jobs?queue={qname}", f"/jobs/{ids['job']}",
             "/jobs", "/workers", "/schedules", f"/jobs/{ids['evil_queue_job']}"]
    for path in pages:
        r = client.get(path)
        assert r.status_code == 200, path
        body = r.text
        for raw in (EVIL_SCRIPT, EVIL_ATTR, EVIL_QUEUE, "<img src=x"):
            assert raw not in body, f"{path} holds unescaped {raw!r}"
    job_page = client.get(f"/jobs/{ids['job']}").text
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in job_page
    assert "&#34;&gt;&lt;img src=x onerror=&#34;window.__pwned = 2&#34;&gt;" in job_page
    api = client.get("/api/overview")  # JSON carries it as data, never sniffed as HTML
    assert api.headers["content-type"] == "application/json"
    assert api.headers["x-content-type-options"] == "nosniff"
    assert EVIL_QUEUE in [q["queue"] for q in api.json()["queues"]]
    assert "script-src 'self'" in client.get("/").headers["content-security-policy"]


def test_job_page_shows_every_fact_and_the_error_history(client: TestClient,
                                                        queue: portq.Queue, qname: str) -> None:
    job_id = failed_twice(queue, qname)
    page = client.get(f"/jobs/{job_id}").text
    for fact in ("attempts / max", "generation", "lease deadline", "priority", "run_at",
                 "created", "finished", "&#34;order&#34;: 42"):
        assert fact in page, fact
    assert page.count("card declined") >= 2 and "worker-1" in page and "worker-2" in page
    assert client.get("/jobs/999999999").status_code == 404


def test_actions_need_post_and_the_csrf_token(client: TestClient, queue: portq.Queue,
                                              qname: str) -> None:
    job_id = failed_twice(queue, qname)
    assert client.get(f"/jobs/{job_id}/retry").status_code == 405, "GET must not act"
    for form in ({}, {"csrf": "0" * 64}, {"csrf": csrf_of(client, "/") + "0"}):
        r = client.post(f"/jobs/{job_id}/retry", data=form)
        assert r.status_code == 403 and "CSRF" in r.text
    other = TestClient(web_app(queue), base_url="http://127.0.0.1")  # another session
    r = other.post(f"/jobs/{job_id}/retry", data={"csrf": csrf_of(client, "/")})
    assert r.status_code == 403, "a CSRF token of another session was accepted"
    assert queue.job(job_id).state == "dead"  # type: ignore[union-attr]
    r = client.post(f"/jobs/{job_id}/retry", data={"csrf": csrf_of(client, f"/jobs/{job_id}")})
    assert r.status_code == 200 and "Job retried" in r.text
    assert queue.job(job_id).state == "ready"  # type: ignore[union-attr]
    r = client.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf_of(client, "/")})
    assert "Job cancelled" in r.text and queue.job(job_id).state == "cancelled"  # type: ignore[union-attr]
    r = client.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf_of(client, "/")})
    assert "Nothing changed" in r.text
    r = client.post(f"/jobs/{job_id}/delete", data={"csrf": csrf_of(client, "/")})
    assert "Job deleted" in r.text and queue.job(job_id) is None


def test_read_only_hides_and_refuses_actions(queue: portq.Queue, qname: str) -> None:
    job_id = failed_twice(queue, qname)
    with TestClient(web_app(queue, read_only=True), base_url="http://127.0.0.1") as c:
        page = c.get(f"/jobs/{job_id}").text
        assert "read-only" in page and 'action="' not in page.split("</header>")[1] \
            .replace('action="/jobs"', "")
        assert "all…" not in c.get(f"/jobs?queue={qname}&state=dead").text
        token = csrf_of(c, "/")
        assert c.post(f"/jobs/{job_id}/retry", data={"csrf": token}).status_code == 403
        assert c.get(f"/bulk?action=retry&queue={qname}&state=dead").status_code == 403
        r = c.post("/bulk", data={"csrf": token, "action": "retry", "queue": qname,
                                  "state": "dead", "count": "1"})
        assert r.status_code == 403
    assert queue.job(job_id).state == "dead"  # type: ignore[union-attr]


def test_bulk_action_confirms_the_count_and_runs_in_bounded_batches(
        client: TestClient, queue: portq.Queue, qname: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import portq.web.actions as web
    monkeypatch.setattr(web, "BULK_BATCH", 3)
    calls: list[int] = []
    real = queue.cancel_many

    def counting(name: str | None, *, states: list[str], limit: int) -> int:
        calls.append(limit)
        return real(name, states=states, limit=limit)
    monkeypatch.setattr(queue, "cancel_many", counting)
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(8)])
    listing = client.get(f"/jobs?queue={qname}&state=ready").text
    assert "Cancel all…" in listing and "Retry all…" not in listing
    confirm = client.get(f"/bulk?action=cancel&queue={qname}&state=ready").text
    assert 'id="count">8<' in confirm
    queue.enqueue(qname, "arrived after the confirmation")
    r = client.post("/bulk", data={"csrf": CSRF.findall(confirm)[0], "action": "cancel",
                                   "queue": qname, "state": "ready", "count": "8"})
    assert r.status_code == 200 and "8 jobs changed" in r.text
    assert calls == [3, 3, 2], "not bounded batches up to the confirmed count"
    stats = {s.queue: s for s in queue.stats(qname)}[qname]
    assert (stats.cancelled, stats.ready) == (8, 1)
    assert client.get(f"/bulk?action=retry&queue={qname}&state=ready").status_code == 400


def test_jobs_page_filters_and_pages_by_key(client: TestClient, queue: portq.Queue,
                                            qname: str) -> None:
    ids = queue.enqueue_many([{"queue": qname, "payload": {"n": i, "tag": "even" if i % 2
                                                             else "odd"}}
                              for i in range(120)])
    seen: list[int] = []
    path = f"/jobs?queue={qname}&order=id"
    pages = 0
    while path:
        page = client.get(path).text
        pages += 1
        seen += [int(i) for i in re.findall(r'<a href="/jobs/(\d+)">', page)]
        nxt = re.search(r'href="(/jobs\?[^"]+)" id="next"', page)
        path = nxt.group(1).replace("&amp;", "&") if nxt else ""
        assert "OFFSET" not in page
    assert seen == ids and pages == 3
    found = client.get(f"/jobs?queue={qname}&text=EVEN").text
    assert len(re.findall(r'<a href="/jobs/(\d+)">', found)) == 50
    bad = client.get(f"/jobs?queue={qname}&order=sideways")
    assert bad.status_code == 400 and "order must be one of" in bad.text


def test_no_password_in_any_page(queue: portq.Queue, engine_url: str, qname: str) -> None:
    if not engine_url.startswith("postgresql://postgres@"):
        pytest.skip("needs the PostgreSQL test server, whose trust auth ignores a password")
    secret = "Sup3r-s3cret-pw"
    url = engine_url.replace("postgres@", f"postgres:{secret}@", 1)
    job_id = failed_twice(queue, qname)
    with portq.connect(url, prefix=TEST_PREFIX) as q, \
            TestClient(web_app(q), base_url="http://127.0.0.1") as c:
        for path in ("/", "/api/overview", "/jobs", f"/jobs/{job_id}", "/workers",
                     "/schedules", "/jobs/999999999", "/bulk?action=x"):
            r = c.get(path)
            assert secret not in r.text and secret not in str(r.headers), path


def test_access_token_is_required(queue: portq.Queue) -> None:
    with TestClient(web_app(queue, token=TOKEN), base_url="http://127.0.0.1",
                    follow_redirects=False) as c:
        assert c.get("/").status_code == 303 and c.get("/").headers["location"] == "/login"
        assert c.get("/api/overview").status_code == 401
        assert c.get("/static/app.css").status_code == 200
        login = csrf_of(c, "/login")
        assert c.post("/login", data={"csrf": login, "token": TOKEN + "x"}).status_code == 403
        assert c.post("/login", data={"csrf": "0" * 64, "token": TOKEN}).status_code == 403
        assert c.get("/").status_code == 303
        r = c.post("/login", data={"csrf": login, "token": TOKEN})
        assert r.status_code == 303
        assert c.get("/").status_code == 200 and TOKEN not in c.get("/").text
    with TestClient(web_app(queue, token=TOKEN), base_url="http://127.0.0.1") as c:
        assert c.get("/api/overview", headers={"Authorization": f"Bearer {TOKEN}"}) \
            .status_code == 200
        assert c.get("/api/overview", headers={"Authorization": "Bearer nope"}) \
            .status_code == 401
    with pytest.raises(portq.ConfigurationError):
        web_app(queue, token="short")


def test_mounted_under_a_prefix_links_stay_inside_it(queue: portq.Queue, qname: str) -> None:
    job_id = failed_twice(queue, qname)
    host = Starlette(routes=[Mount("/ops/portq", app=web_app(queue))])
    with TestClient(host, base_url="http://127.0.0.1") as c:
        page = c.get(f"/ops/portq/jobs/{job_id}").text
        assert 'href="/ops/portq/static/app.css"' in page
        assert f'action="/ops/portq/jobs/{job_id}/retry"' in page
        assert c.get("/ops/portq/static/app.js").status_code == 200
        r = c.post(f"/ops/portq/jobs/{job_id}/retry",
                   data={"csrf": csrf_of(c, "/ops/portq/")})
        assert r.status_code == 200 and str(r.url).endswith(f"/ops/portq/jobs/{job_id}"
                                                            "?done=retried")


def test_dashboard_refuses_a_public_host_without_a_token(engine_url: str) -> None:
    proc = run_portq("dashboard", engine_url, "--host", "0.0.0.0", check=False,
                     env={"PORTQ_DASHBOARD_TOKEN": None})
    assert proc.returncode == 2 and "without an access token" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_overview_counts_are_shared_between_polls(queue: portq.Queue, qname: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """However many browsers poll, the table is recounted at most once per half refresh,
    in the background: a poll never waits for a recount once a snapshot exists."""
    from portq.conformance.helpers import wait_until
    calls = []
    real = queue.stats
    gate = threading.Event()
    gate.set()

    def counting(name: str | None = None) -> list[portq.QueueStats]:
        calls.append(name)
        assert gate.wait(30)
        return real(name)
    monkeypatch.setattr(queue, "stats", counting)
    with TestClient(web_app(queue, poll_seconds=1.0), base_url="http://127.0.0.1") as c:
        for _ in range(5):
            assert c.get("/api/overview").status_code == 200
        assert c.get("/").status_code == 200
        assert len(calls) == 1
        queue.enqueue(qname, "new")
        time.sleep(0.6)
        gate.clear()  # the next recount blocks until released
        started = time.monotonic()
        stale = c.get("/api/overview").json()  # served at once, recount in the background
        assert time.monotonic() - started < 5 and len(calls) == 2
        assert not [q for q in stale["queues"] if q["queue"] == qname]
        assert c.get("/api/overview").status_code == 200 and len(calls) == 2, \
            "a second recount started while one was running"
        gate.set()

        def fresh() -> bool:
            rows = [q for q in c.get("/api/overview").json()["queues"] if q["queue"] == qname]
            return bool(rows) and rows[0]["ready"] == 1
        assert wait_until(fresh, timeout=10)



def test_workers_and_schedules_pages_show_the_registry(client: TestClient, queue: portq.Queue,
                                                       qname: str) -> None:
    from portq.job import WorkerInfo
    wid = f"dash-{qname}"
    queue.backend.beat_worker(WorkerInfo(
        wid, "host-b", 77, (qname,), 6, 2,
        ({"name": f"{qname}-nightly", "queue": qname, "cron": "0 3 * * *",
          "next_due": "2030-01-02T03:00:00+00:00",
          "last_enqueued": "2030-01-01T03:00:00+00:00"},)), 60_000)
    try:
        workers = client.get("/workers").text
        assert wid in workers and "host-b" in workers and ">6<" in workers
        schedules = client.get("/schedules").text
        assert f"{qname}-nightly" in schedules and "0 3 * * *" in schedules
        assert "2030-01-02 03:00:00 UTC" in schedules and "2030-01-01 03:00:00 UTC" in schedules
    finally:
        queue.backend.deregister_worker(wid)


def test_stats_before_the_registry_migration(tmp_path: object) -> None:
    """A database still at schema 2: `portq stats` works, its workers column shows '-',
    and the dashboard refuses to start with the one-line migrate advice."""
    import sqlite3
    from pathlib import Path
    db = Path(str(tmp_path)) / "old.db"
    url = f"sqlite:///{db}"
    with portq.connect(url) as q:
        q.migrate()
        q.enqueue("old", 1)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE portq_worker")
        conn.execute("DELETE FROM portq_schema_version WHERE version >= 3")
    out = run_portq("stats", url).stdout.splitlines()
    header, row = out[0].split(), out[1].split()
    assert row[header.index("workers")] == "-"
    proc = run_portq("dashboard", url, "--port", "1", check=False)
    assert proc.returncode == 2 and "portq migrate" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_job_page_shows_progress_and_its_api_refreshes_it(client: TestClient,
                                                          queue: portq.Queue,
                                                          qname: str) -> None:
    job_id = queue.enqueue(qname, {"n": 1})
    (job,) = queue.claim(qname, "web-w", limit=1)
    assert queue.set_progress(job, 0.4, "resized <b>40</b> of 100")
    page = client.get(f"/jobs/{job_id}").text
    assert 'data-running="1"' in page and '<progress id="progress-bar" max="1" value="0.4">' \
        in page
    assert "40% resized &lt;b&gt;40&lt;/b&gt; of 100" in page
    live = client.get(f"/api/jobs/{job_id}")
    assert live.headers["content-type"] == "application/json"
    assert live.json() | {"progress_at": None} == {
        "id": job_id, "state": "running", "attempts": 1, "max_attempts": 25,
        "worker_id": "web-w", "progress": 0.4, "progress_note": "resized <b>40</b> of 100",
        "progress_at": None, "progress_text": "40% resized <b>40</b> of 100"}
    assert queue.complete(job)
    done = client.get(f"/jobs/{job_id}").text
    assert 'data-running="0"' in done and "40% resized" in done
    assert client.get("/api/jobs/999999999").status_code == 404


def test_job_page_shows_the_workflow_graph_bounded(client: TestClient, queue: portq.Queue,
                                                   qname: str) -> None:
    """A job's dependencies and dependents, each a link to its page with its state; a
    10,000-job fan-in's callback shows the first 50 and counts the rest by state."""
    from portq.web.pages import WORKFLOW_SHOWN
    a, b = queue.enqueue(qname, "a"), queue.enqueue(qname, "b")
    c = queue.enqueue(qname, "c", depends_on=[a, b])
    d = queue.enqueue(qname, "d", depends_on=[c])
    (claimed,) = [j for j in queue.claim(qname, "web-w", limit=2) if j.id == a]
    assert queue.complete(claimed)
    page = client.get(f"/jobs/{c}").text
    assert 'id="workflow"' in page
    deps = page[page.index('id="dependencies"'):page.index('id="dependents"')]
    assert re.findall(r'<a href="/jobs/(\d+)" class="wf-node state (\w+)"', deps) == \
        [(str(a), "succeeded"), (str(b), "running")]
    assert "2 jobs · 1 running · 1 succeeded" in deps
    after = page[page.index('id="dependents"'):]
    assert re.findall(r'<a href="/jobs/(\d+)" class="wf-node state (\w+)"', after) == \
        [(str(d), "waiting")]
    assert 'id="workflow"' not in client.get(
        f"/jobs/{queue.enqueue(qname, 'alone')}").text
    fan = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(10_000)])
    callback = queue.enqueue(qname, "callback", depends_on=fan)
    started = time.monotonic()
    page = client.get(f"/jobs/{callback}").text
    took = time.monotonic() - started
    nodes = re.findall(r'<a href="/jobs/(\d+)" class="wf-node', page)
    assert nodes == [str(i) for i in sorted(fan)[:WORKFLOW_SHOWN]]
    assert f"and {10_000 - WORKFLOW_SHOWN} more not shown" in page
    assert "10000 jobs · 10000 ready" in page
    assert took < 5, f"the callback's page took {took:.1f}s"
    first = client.get(f"/jobs/{fan[0]}").text
    assert re.findall(r'<a href="/jobs/(\d+)" class="wf-node state (\w+)"',
                      first[first.index('id="dependents"'):]) == [(str(callback), "waiting")]
