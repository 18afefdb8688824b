"""The dashboard in a real headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright) against the real `portq dashboard` server, on every reachable engine: the live
overview, filtering jobs, a job's error history and retry, a bulk cancel, hostile user data
that must not execute, the CSRF refusal, and read-only mode.

Needs ``pip install 'portq[browser]'`` and ``apt-get install chromium``; skips, naming what
is missing, otherwise. Never downloads a browser (no ``playwright install``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
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
    failed_twice,
    finished_over_the_last_hour,
    plant_xss,
)

import portq  # noqa: E402
from portq.conformance.helpers import free_port, wait_until  # noqa: E402
from portq.conformance.plugin import TEST_PREFIX  # noqa: E402
from portq.job import WorkerInfo  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run"]


@contextmanager
def dashboard(url: str, *extra: str, prefix: str = TEST_PREFIX) -> Iterator[str]:
    """`portq dashboard URL` in a subprocess on a free port; yields its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "portq.cli", "dashboard", url, "--prefix", prefix,
         "--port", str(port), "--refresh", "1s", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"portq dashboard exited: {proc.stderr.read()}")  # type: ignore[union-attr]
        try:
            with urllib.request.urlopen(base + "/static/app.css", timeout=2):
                return True
        except OSError:
            return False
    try:
        assert wait_until(up, timeout=30), "portq dashboard did not start"
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


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
    assert rows.first.locator("td").first.inner_text() == str(dead)
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
        status = p.evaluate(
            """async (id) => {
                 const csrf = document.querySelector('meta[name=csrf-token]').content;
                 const r = await fetch('/jobs/' + id + '/retry', {method: 'POST',
                   headers: {'Content-Type': 'application/x-www-form-urlencoded'},
                   body: 'csrf=' + csrf});
                 return r.status; }""", job_id)
        assert status == 403
        watch.clean()
        context.close()
    assert _state(queue, job_id) == "dead"


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
