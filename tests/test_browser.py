"""The dashboard in a real headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright) against the real `portq dashboard` server, on every reachable engine: the live
overview, filtering jobs, a job's error history and retry, a bulk cancel, hostile user data
that must not execute, the CSRF refusal, and read-only mode.

Needs ``pip install 'portq[browser]'`` and ``apt-get install chromium``; skips, naming what
is missing, otherwise. Never downloads a browser (no ``playwright install``).
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("PORTQ_CHROMIUM", "/usr/bin/chromium")
# .ci/run sets PORTQ_REQUIRE_BROWSER=1: there a missing piece fails instead of skipping
REQUIRED = os.environ.get("PORTQ_REQUIRE_BROWSER") == "1"


def _missing(reason: str) -> None:
    if REQUIRED:
        raise RuntimeError(f"PORTQ_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason, allow_module_level=True)


try:
    from playwright import sync_api
except ImportError:
    _missing("browser tests need Playwright: pip install 'portq[browser]' (it downloads "
             "no browser)")
if not os.path.exists(CHROMIUM):
    _missing(f"browser tests need Chromium at {CHROMIUM}: apt-get install chromium")
pytest.importorskip("starlette", reason="the dashboard needs portq[web]")

from webdata import (  # noqa: E402
    EVIL_ATTR,
    EVIL_QUEUE,
    EVIL_SCRIPT,
    dashboard,
    failed_twice,
    finished_over_the_last_hour,
    plant_xss,
)

import portq  # noqa: E402
from portq.conformance.helpers import free_port, wait_until  # noqa: E402
from portq.job import WorkerInfo  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def browser() -> Iterator[Any]:
    """A Chromium per test: Playwright's sync API keeps an asyncio loop running in this
    thread while it is open, which would break every later test that calls asyncio.run()."""
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(engine_url: str) -> Iterator[str]:
    with dashboard(engine_url) as base:
        yield base


class Watch:
    """A page plus what it did that it must not: dialogs, page errors, outside requests."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.outside: list[str] = []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: None if r.url.startswith(base) or r.url.startswith(
            "data:") else self.outside.append(r.url))

    def clean(self) -> None:
        assert self.dialogs == [] and self.errors == [] and self.outside == [], \
            (self.dialogs, self.errors, self.outside)
        assert self.page.evaluate("typeof window.__pwned") == "undefined"


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[Watch]:
    context = browser.new_context(base_url=server)
    watch = Watch(context.new_page(), server)
    yield watch
    watch.clean()
    context.close()


def _state(queue: portq.Queue, job_id: int) -> str:
    record = queue.job(job_id)
    assert record is not None
    return record.state


def test_overview_shows_queues_and_refreshes_live(page: Watch, queue: portq.Queue,
                                                  qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(2)])
    p = page.page
    p.goto("/")
    cell = p.locator(f'tr[data-queue="{qname}"] td[data-field="ready"]')
    assert cell.inner_text() == "2"
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    sync_api.expect(cell).to_have_text("5", timeout=15_000)  # polled /api/overview
    assert p.locator(f'tr[data-queue="{qname}"] svg.chart').count() == 1


def test_filter_jobs_by_queue_and_state(page: Watch, queue: portq.Queue, qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    dead = failed_twice(queue, qname)
    p = page.page
    p.goto("/jobs")
    p.fill('input[name="queue"]', qname)
    p.select_option('select[name="state"]', "dead")
    p.click('#filters button[type="submit"]')
    p.wait_for_url("**/jobs?*state=dead*")
    rows = p.locator("#jobs tbody tr")
    assert rows.count() == 1
    assert rows.first.locator("td.n a").first.inner_text() == str(dead)
    p.fill('input[name="text"]', "CHARGE card")
    p.click('#filters button[type="submit"]')
    assert p.locator("#jobs tbody tr").count() == 1


def test_job_error_history_then_retry(page: Watch, queue: portq.Queue, qname: str) -> None:
    job_id = failed_twice(queue, qname)
    p = page.page
    p.goto(f"/jobs/{job_id}")
    errors = p.locator("#errors li")
    assert errors.count() == 2
    assert "attempt 1: card declined" in errors.nth(0).inner_text()
    assert "attempt 2: card declined" in errors.nth(1).inner_text()
    assert '"order": 42' in p.inner_text("#payload")
    sync_api.expect(p.locator("#state")).to_have_text("dead")
    p.click("#action-retry")
    sync_api.expect(p.locator("#state")).to_have_text("ready")
    sync_api.expect(p.locator("#notice")).to_contain_text("Job retried")
    assert _state(queue, job_id) == "ready"


def test_bulk_cancel_confirms_then_cancels(page: Watch, queue: portq.Queue,
                                           qname: str) -> None:
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(6)])
    p = page.page
    p.goto(f"/jobs?queue={qname}&state=ready")
    p.click("#bulk a.cancel")
    sync_api.expect(p.locator("#count")).to_have_text("6")
    assert all(_state(queue, i) == "ready" for i in ids), "the confirmation page acted"
    p.click("#confirm")
    sync_api.expect(p.locator("#notice")).to_contain_text("6 jobs changed")
    assert all(_state(queue, i) == "cancelled" for i in ids)


def test_hostile_user_data_never_executes(page: Watch, queue: portq.Queue,
                                          qname: str) -> None:
    ids = plant_xss(queue, qname)
    p = page.page
    for path in ("/", f"/jobs?queue={qname}", "/jobs", f"/jobs/{ids['job']}",
                 f"/jobs/{ids['evil_queue_job']}"):
        p.goto(path)
        assert p.locator('img[src="x"]').count() == 0, path
        page.clean()
    p.goto(f"/jobs/{ids['job']}")
    shown = p.inner_text("#payload")
    assert EVIL_SCRIPT in shown and json.dumps(EVIL_ATTR) in shown
    assert EVIL_ATTR in p.inner_text("#key")
    assert EVIL_SCRIPT in p.inner_text("#errors") and EVIL_ATTR in p.inner_text("#errors")
    p.goto("/")  # app.js re-renders the rows from JSON: the queue name must stay text
    refreshed = "document.body.getAttribute('data-refreshed')"
    before = p.evaluate(refreshed)
    assert wait_until(lambda: p.evaluate(refreshed) != before, timeout=15)
    assert EVIL_QUEUE in p.inner_text("#queues")
    assert p.locator('img[src="x"]').count() == 0


def test_a_forged_csrf_token_is_refused(page: Watch, queue: portq.Queue, qname: str) -> None:
    job_id = failed_twice(queue, qname)
    p = page.page
    p.goto(f"/jobs/{job_id}")
    p.evaluate("document.querySelectorAll('input[name=csrf]')"
               ".forEach(function (i) { i.value = '0'.repeat(64); })")
    with p.expect_response(lambda r: r.request.method == "POST") as posted:
        p.click("#action-retry")
    assert posted.value.status == 403
    sync_api.expect(p.locator("#message")).to_contain_text("CSRF")
    assert _state(queue, job_id) == "dead"


def post_with_csrf(p: Any, path: str) -> int:
    """The status of a POST to ``path`` that the page's own script sends, with the CSRF
    token of the page's session."""
    return int(p.evaluate(
        """async (path) => {
             const csrf = document.querySelector('meta[name=csrf-token]').content;
             const r = await fetch(path, {method: 'POST',
               headers: {'Content-Type': 'application/x-www-form-urlencoded'},
               body: 'csrf=' + csrf});
             return r.status; }""", path))


def test_read_only_mode_hides_and_refuses_actions(browser: Any, engine_url: str,
                                                  queue: portq.Queue, qname: str) -> None:
    job_id = failed_twice(queue, qname)
    with dashboard(engine_url, "--read-only") as base:
        context = browser.new_context(base_url=base)
        watch = Watch(context.new_page(), base)
        p = watch.page
        p.goto(f"/jobs/{job_id}")
        sync_api.expect(p.locator("#read-only")).to_be_visible()
        assert p.locator("#actions").count() == 0 and p.locator("button").count() == 0
        p.goto(f"/jobs?queue={qname}&state=dead")
        assert p.locator("#bulk").count() == 0
        assert post_with_csrf(p, f"/jobs/{job_id}/retry") == 403
        watch.clean()
        context.close()
    assert _state(queue, job_id) == "dead"


EVIL_HOST = "rebind.evil.example"


@contextmanager
def attacker_site(html: str, forward_to: str) -> Iterator[int]:
    """An HTTP server on another loopback port, yielding its port: /evil.html is the
    attacker's page; every other request goes on, Host header and body unchanged, to
    ``forward_to`` (the dashboard), exactly as the browser's requests would reach it once
    the attacker's DNS answer changes to 127.0.0.1."""
    body = html.encode()
    target = forward_to.split("//", 1)[1]

    class Handler(http.server.BaseHTTPRequestHandler):
        def _forward(self) -> None:
            if self.path.startswith("/evil.html"):
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            length = int(self.headers.get("Content-Length") or 0)
            conn = http.client.HTTPConnection(target, timeout=30)
            conn.request(self.command, self.path, self.rfile.read(length) if length else None,
                         headers=dict(self.headers.items()))
            answer = conn.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

        do_GET = do_POST = _forward  # noqa: N815 - http.server's names

        def log_message(self, *args: Any) -> None:
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


ATTACK = """<!doctype html><html><body><script>
window.results = {};
const target = document.location.search.slice(1);
if (target) {
  fetch(target + "/api/overview", {credentials: "include"})
    .then(r => r.text()).then(t => { window.results.read = t; })
    .catch(e => { window.results.read = "blocked: " + e; });
  const f = document.createElement("form");
  f.method = "POST"; f.action = target + "/jobs/" + location.hash.slice(1) + "/retry";
  const i = document.createElement("input");
  i.name = "csrf"; i.value = "0".repeat(64); f.appendChild(i);
  document.body.appendChild(f);
}
</script></body></html>"""
STEAL = """async (id) => {
    const page = await fetch('/jobs/' + id);
    const text = await page.text();
    const post = await fetch('/jobs/' + id + '/retry', {method: 'POST',
      headers: {'Content-Type': 'application/x-www-form-urlencoded'},
      body: 'csrf=' + (text.match(/[0-9a-f]{64}/) || ['x'])[0]});
    return {status: page.status, text: text, post: post.status}; }"""


def test_a_page_of_another_origin_cannot_read_or_drive_the_dashboard(
        engine_url: str, queue: portq.Queue, qname: str) -> None:
    """DNS rebinding as Chromium meets it (``rebind.evil.example`` resolves to 127.0.0.1
    through --host-resolver-rules; the attacker's page reads the dashboard "same-origin"),
    and a page on another local port (same site, so the SameSite cookie goes along)
    submitting a form and fetching the API. Neither may read a page or change a job."""
    job_id = failed_twice(queue, qname)
    rule = f"--host-resolver-rules=MAP {EVIL_HOST} 127.0.0.1"
    with dashboard(engine_url) as base, sync_api.sync_playwright() as pw, \
            attacker_site(ATTACK, base) as port:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                               args=[*LAUNCH_ARGS, rule])
        context = b.new_context()
        p = context.new_page()
        p.goto(f"{base}/jobs/{job_id}")   # the operator's session on the dashboard
        sync_api.expect(p.locator("#state")).to_have_text("dead")
        # 1. rebinding: requests on the attacker's name reach the dashboard
        p.goto(f"http://{EVIL_HOST}:{port}/evil.html")
        stolen = p.evaluate(STEAL, job_id)
        assert stolen["status"] == 421 and stolen["post"] == 421, stolen
        assert "charge card" not in stolen["text"]
        assert not re.search(r"[0-9a-f]{64}", stolen["text"]), "a CSRF token leaked"
        assert _state(queue, job_id) == "dead"
        # 2. another origin (another loopback port): cross-origin read and form POST
        p.goto(f"http://127.0.0.1:{port}/evil.html?{base}#{job_id}")
        p.wait_for_function("window.results.read !== undefined")
        assert p.evaluate("window.results.read").startswith("blocked"), \
            "a cross-origin page read the dashboard's API"
        with p.expect_response(lambda r: r.request.method == "POST") as posted:
            p.evaluate("document.forms[0].submit()")
        assert posted.value.status == 403
        assert "another" in p.inner_text("#message")
        assert _state(queue, job_id) == "dead"
        # the operator's own page still acts
        p.goto(f"{base}/jobs/{job_id}")
        p.click("#action-retry")
        sync_api.expect(p.locator("#state")).to_have_text("ready")
        context.close()
        b.close()


def test_screenshots_of_the_overview_and_a_job(browser: Any, tmp_path: Path) -> None:
    """Pictures for the README, from a fresh SQLite database with an hour of history.
    Written to docs/ when PORTQ_WRITE_SCREENSHOTS=1, else only to a temporary folder."""
    url = f"sqlite:///{tmp_path / 'shots.db'}"
    with portq.connect(url) as q:
        q.migrate()
        for name, n in (("emails", 160), ("reports", 40), ("webhooks", 90)):
            finished_over_the_last_hour(q, name, n)
        q.enqueue_many([{"queue": "emails", "payload": {"to": f"user{i}@example.com"}}
                        for i in range(37)])
        q.enqueue_many([{"queue": "reports", "payload": {"report": "weekly"}, "delay": 3600}
                        for _ in range(4)])
        job_id = failed_twice(q, "webhooks")
        q.enqueue_many([{"queue": "webhooks", "payload": {"event": "invoice.paid"}}] * 2)
        q.claim("webhooks", "web-1:4121:1a2b3c4d", limit=1)  # a running job
        q.backend.beat_worker(WorkerInfo("web-1:4121:1a2b3c4d", "web-1", 4121,
                                         ("emails", "webhooks"), 8, 1), 60_000)
        with dashboard(url, prefix="portq_") as base:
            context = browser.new_context(base_url=base, viewport={"width": 1280,
                                                                   "height": 560})
            p = context.new_page()
            p.goto("/")
            overview = tmp_path / "dashboard-overview.png"
            p.screenshot(path=str(overview), full_page=True)
            p.goto(f"/jobs/{job_id}")
            job = tmp_path / "dashboard-job.png"
            p.set_viewport_size({"width": 1280, "height": 900})
            p.screenshot(path=str(job), full_page=True)
            context.close()
    for shot in (overview, job):
        assert shot.stat().st_size > 10_000
        if os.environ.get("PORTQ_WRITE_SCREENSHOTS") == "1":
            shutil.copy(shot, ROOT / "docs" / shot.name)


def test_job_page_refreshes_progress_while_the_job_runs(page: Watch, queue: portq.Queue,
                                                        qname: str) -> None:
    job_id = queue.enqueue(qname, None)
    (job,) = queue.claim(qname, "browser-w", limit=1, lease=60)
    assert queue.set_progress(job, 0.1, "started")
    p = page.page
    p.goto(f"/jobs/{job_id}")
    text = p.locator("#progress-text")
    assert text.inner_text() == "10% started"
    assert queue.set_progress(job, 0.7, "resized 70 of 100")
    sync_api.expect(text).to_have_text("70% resized 70 of 100", timeout=15_000)
    assert p.locator("#progress-bar").evaluate("b => b.value") == 0.7
    assert queue.complete(job)
    sync_api.expect(p.locator("#state")).to_have_text("succeeded", timeout=15_000)


def test_job_page_shows_the_workflow_graph_and_links_its_nodes(page: Watch, queue: portq.Queue,
                                                               qname: str) -> None:
    """A fan-in's callback: its dependencies (the first 50 drawn, the rest counted) left of
    the job, its dependent right of it, each node a link to that job's page."""
    from portq.web.pages import WORKFLOW_SHOWN
    fan = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(120)])
    callback = queue.enqueue(qname, "callback", depends_on=fan)
    after = queue.enqueue(qname, "after", depends_on=[callback])
    p = page.page
    p.goto(f"/jobs/{callback}")
    nodes = p.locator("#dependencies a.wf-node")
    assert nodes.count() == WORKFLOW_SHOWN
    assert nodes.first.inner_text() == f"job {fan[0]} · ready"
    assert p.locator("#dependencies-more").is_visible()
    assert f"and {120 - WORKFLOW_SHOWN} more" in p.locator("#dependencies-more").inner_text()
    left, right = (p.locator(s).bounding_box() for s in ("#dependencies", "#dependents"))
    assert left is not None and right is not None and left["x"] < right["x"]
    p.locator(f'#dependents a.wf-node[data-job="{after}"]').click()
    p.wait_for_url(f"**/jobs/{after}")
    assert p.locator("#state").inner_text() == "waiting"
    p.locator(f'#dependencies a.wf-node[data-job="{callback}"]').click()
    p.wait_for_url(f"**/jobs/{callback}")
    p.locator(f'#dependencies a.wf-node[data-job="{fan[0]}"]').click()
    p.wait_for_url(f"**/jobs/{fan[0]}")
    assert p.locator("#dependencies").inner_text().count("none") == 1
    assert p.locator(f'#dependents a.wf-node[data-job="{callback}"]').inner_text() == \
        f"job {callback} · waiting"
