"""The operator's views and controls in headless Chromium against `portq dashboard`, on
every reachable engine: a job's result and exception line, the scheduled view, pausing,
resuming and limiting a queue (with confirmation, refused in read-only mode), the pager's
footer. Needs what tests/test_browser.py needs; skips the same way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("playwright", reason="browser tests need portq[browser]")

from test_browser import (
    Watch,
    _state,
    browser,
    page,
    post_with_csrf,
    server,
    sync_api,
)
from webdata import dashboard, failed_twice

import portq
from portq.conformance.helpers import wait_until
from portq.conformance.plugin import TEST_PREFIX

__all__ = ["browser", "page", "server"]   # fixtures used by name below
TRACEBACK = ('Traceback (most recent call last):\n  File "app.py", line 3, in handle\n'
             '    charge(card)\nValueError: card 4242 declined\n')


def test_a_job_shows_its_result_and_exception_line(page: Watch, queue: portq.Queue,
                                                   qname: str) -> None:
    done = queue.enqueue(qname, {"order": 7}, priority=10)
    (job,) = queue.claim(qname, "w", limit=1)
    assert job.id == done
    assert queue.store_result(job, {"receipt": "R-7", "total": 12.5})
    assert queue.complete(job)
    dead = queue.enqueue(qname, {"order": 8}, max_attempts=1, priority=10)
    (job,) = queue.claim(qname, "w", limit=1)
    assert job.id == dead and queue.fail(job, TRACEBACK)
    p = page.page
    p.goto(f"/jobs/{done}")
    assert '"receipt": "R-7"' in p.inner_text("#result")
    p.goto(f"/jobs/{dead}")
    sync_api.expect(p.locator("#last-error")).to_have_text("ValueError: card 4242 declined")
    assert p.locator("#result").count() == 0
    p.goto(f"/jobs?queue={qname}&state=dead")
    cell = p.locator("#jobs tbody tr td.err").first
    assert cell.inner_text() == "ValueError: card 4242 declined"
    assert "most recent call" not in p.inner_text("#jobs")
    assert "50 per page at most" in p.inner_text(".pager")


def test_scheduled_jobs_are_a_view_of_their_own(page: Watch, queue: portq.Queue,
                                                qname: str) -> None:
    due = queue.enqueue(qname, "due")
    later = queue.enqueue(qname, "later", delay=3600)
    p = page.page
    p.goto("/")
    p.locator(f'tr[data-queue="{qname}"] td[data-field="scheduled"] a').click()
    p.wait_for_url("**state=scheduled**")
    rows = p.locator("#jobs tbody tr")
    sync_api.expect(rows).to_have_count(1)
    assert rows.first.locator("td.n a").first.inner_text() == str(later)
    assert rows.first.locator(".state").inner_text() == "scheduled"
    assert p.locator('select[name="state"] option[value="scheduled"]').count() == 1
    p.goto(f"/jobs?queue={qname}&state=ready")
    shown = {r.locator("td.n a").first.inner_text(): r.locator(".state").inner_text()
             for r in p.locator("#jobs tbody tr").all()}
    assert shown == {str(due): "ready", str(later): "scheduled"}
    p.goto(f"/jobs/{later}")
    sync_api.expect(p.locator("#state")).to_have_text("scheduled")


def test_pause_resume_and_limit_a_queue_from_the_browser(page: Watch, queue: portq.Queue,
                                                         qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    p = page.page
    p.goto("/")
    p.locator(f'tr[data-queue="{qname}"] td a').first.click()
    p.wait_for_url(f"**/queues/{qname}")
    sync_api.expect(p.locator("#claims")).to_have_text("active")
    p.click("#pause")
    sync_api.expect(p.locator("#confirm")).to_be_visible()
    assert qname not in queue.paused_queues(), "the confirmation page acted"
    p.click("#confirm")
    sync_api.expect(p.locator("#notice")).to_contain_text("Queue paused")
    sync_api.expect(p.locator("#paused")).to_be_visible()
    assert qname in queue.paused_queues()
    p.goto("/")
    limits = p.locator(f'tr[data-queue="{qname}"] td[data-field="limits"]')
    sync_api.expect(limits).to_contain_text("paused")
    p.goto(f"/queues/{qname}")
    p.fill('#limit-form input[name="running"]', "3")
    p.fill('#limit-form input[name="rate"]', "50/2s")
    p.click("#set-limits")
    sync_api.expect(p.locator("#new-running")).to_have_text("3")
    sync_api.expect(p.locator("#new-rate")).to_have_text("50 / 2s")
    p.click("#confirm")
    sync_api.expect(p.locator("#notice")).to_contain_text("Limits saved")
    sync_api.expect(p.locator("#running-limit")).to_have_text("3")
    sync_api.expect(p.locator("#rate-limit")).to_have_text("50/2s")
    stats = {s.queue: s for s in queue.stats(qname)}[qname]
    assert (stats.concurrency_limit, stats.rate_limit, stats.rate_period_s) == (3, 50, 2)
    p.goto("/")   # the overview, rendered and then refreshed by app.js, shows the limits
    sync_api.expect(limits).to_contain_text("≤ 3 running")
    refreshed = "document.body.getAttribute('data-refreshed')"
    p.wait_for_function(f"{refreshed} !== null", timeout=15_000)
    sync_api.expect(limits).to_contain_text("50 / 2s")
    p.goto(f"/queues/{qname}")
    p.fill('#limit-form input[name="rate"]', "fifty")
    p.click("#set-limits")
    sync_api.expect(p.locator("#message")).to_contain_text("is not a rate")
    p.goto(f"/queues/{qname}")
    p.click("#resume")
    p.click("#confirm")
    sync_api.expect(p.locator("#notice")).to_contain_text("Queue resumed")
    assert qname not in queue.paused_queues()


def test_queue_controls_are_absent_and_refused_when_read_only(
        browser: Any, engine_url: str, queue: portq.Queue, qname: str) -> None:
    job_id = failed_twice(queue, qname)
    with dashboard(engine_url, "--read-only") as base:
        context = browser.new_context(base_url=base)
        watch = Watch(context.new_page(), base)
        p = watch.page
        p.goto(f"/queues/{qname}")
        sync_api.expect(p.locator("#queue-facts")).to_be_visible()
        assert p.locator("#queue-actions").count() == 0
        assert p.locator("#limit-form").count() == 0
        p.goto(f"/queues/{qname}/confirm?action=pause")
        sync_api.expect(p.locator("#message")).to_contain_text("read-only")
        assert post_with_csrf(p, f"/queues/{qname}/pause") == 403
        watch.clean()
        context.close()
    assert qname not in queue.paused_queues() and _state(queue, job_id) == "dead"



def test_every_page_fits_a_390_pixel_phone(browser: Any, server: str, queue: portq.Queue,
                                           qname: str) -> None:
    job_id = failed_twice(queue, qname)
    queue.enqueue_many([{"queue": qname, "payload": {"note": "x" * 300, "i": i}}
                        for i in range(5)])
    context = browser.new_context(base_url=server, viewport={"width": 390, "height": 844})
    p = context.new_page()
    for path in ("/", f"/jobs?queue={qname}", "/jobs", f"/jobs/{job_id}", "/workers",
                 "/schedules", "/throughput?window=7d", f"/queues/{qname}",
                 f"/queues/{qname}/confirm?action=pause"):
        p.goto(path)
        width = p.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width} px wide at a 390 px viewport"
    context.close()


def test_act_on_the_jobs_ticked(page: Watch, queue: portq.Queue, qname: str) -> None:
    dead = [failed_twice(queue, qname) for _ in range(3)]
    p = page.page
    p.goto(f"/jobs?queue={qname}&state=dead")
    for job_id in dead[:2]:
        p.check(f'#select-form input[name="id"][value="{job_id}"]')
    p.click("#select-retry")
    sync_api.expect(p.locator("#selected-ids")).to_have_text(f"{dead[1]}, {dead[0]}")
    assert all(_state(queue, i) == "dead" for i in dead), "the confirmation page acted"
    p.click("#confirm")
    sync_api.expect(p.locator("#notice")).to_contain_text("Selected jobs: 2 changed")
    p.wait_for_url(f"**queue={qname}**state=dead**")
    assert [_state(queue, i) for i in dead] == ["ready", "ready", "dead"]
    # select every row shown, then cancel: the dead one is left as it was
    p.goto(f"/jobs?queue={qname}")
    p.check("#select-all")
    assert p.locator('#select-form input[name="id"]:checked').count() == 3
    p.click("#select-cancel")
    p.click("#confirm")
    sync_api.expect(p.locator("#notice")).to_contain_text(
        "2 changed, 1 left as they were")
    assert [_state(queue, i) for i in dead] == ["cancelled", "cancelled", "dead"]
    p.goto("/selected?action=retry")   # nothing ticked
    sync_api.expect(p.locator("#message")).to_contain_text("select from 1 to 100 jobs")


def test_workers_page_counts_running_jobs_and_flags_a_killed_worker(
        page: Watch, engine_url: str, queue: portq.Queue, qname: str,
        tmp_path: Path) -> None:
    """A real `portq worker` holding 3 slow jobs: the page shows 3 running jobs (read from
    the job table, not the heartbeat's snapshot); killed with SIGKILL, it is flagged gone
    at once (same host, its pid no longer exists). A row whose heartbeats stopped on
    another host is flagged stale once half its lifetime has passed."""
    from portq.job import WorkerInfo
    (tmp_path / "slow_handler.py").write_text(
        "import time\ndef handle(job):\n    time.sleep(60)\n")
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "portq.cli", "worker", engine_url, "--prefix", TEST_PREFIX,
         "--queue", qname, "--handler", "slow_handler:handle", "--concurrency", "4"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = page.page
    try:
        assert wait_until(lambda: queue.stats(qname)[0].running == 3, timeout=30)
        worker_id = str(queue.jobs("running", queue=qname)[0].worker_id)
        row = p.locator(f'tr[data-worker="{worker_id}"]')
        p.goto("/workers")
        sync_api.expect(row.locator('td[data-field="running"]')).to_have_text("3")
        sync_api.expect(row.locator('td[data-field="status"]')).to_have_text("live")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        p.goto("/workers")
        gone = row.locator('td[data-field="status"]')
        sync_api.expect(gone.locator(".badge")).to_have_text("gone")
        sync_api.expect(gone).to_contain_text("no longer runs on this host")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    far = f"far-{qname}"
    queue.backend.beat_worker(WorkerInfo(far, "another-host", 4242, (qname,), 2), 3000)
    try:
        time.sleep(2)
        p.goto("/workers")
        status = p.locator(f'tr[data-worker="{far}"] td[data-field="status"]')
        sync_api.expect(status.locator(".badge")).to_have_text("stale")
        sync_api.expect(status).to_contain_text("no heartbeat for")
    finally:
        queue.backend.deregister_worker(far)


def test_per_key_limits_show_on_the_job_and_queue_pages(page: Watch, queue: portq.Queue,
                                                        qname: str) -> None:
    ids = queue.enqueue_many([
        {"queue": qname, "payload": i, "concurrency_key": key, "concurrency_limit": n}
        for i, (key, n) in enumerate([("account:<b>7</b>", 2), ("account:<b>7</b>", 2),
                                      ("account:9", 1), ("account:9", 1)])])
    plain = queue.enqueue(qname, "no key")
    assert len(queue.claim(qname, "w", limit=10)) == 4   # account:9 runs one at a time
    p = page.page
    p.goto(f"/jobs/{ids[0]}")
    sync_api.expect(p.locator("#key-limit")).to_have_text(
        "at most 2 running with key account:<b>7</b>")
    p.goto(f"/jobs/{plain}")
    sync_api.expect(p.locator("#key-limit")).to_have_text("-")
    p.goto(f"/queues/{qname}")
    rows = p.locator("#key-limits tbody tr")
    sync_api.expect(rows).to_have_count(2)
    assert [r.locator("td").all_inner_texts() for r in rows.all()] == [
        ["account:<b>7</b>", "2", "2"], ["account:9", "1", "1"]]
    assert p.locator("#key-limits b").count() == 0


def test_the_jobs_list_and_a_running_job_refresh_themselves(
        page: Watch, queue: portq.Queue, qname: str) -> None:
    job_id = queue.enqueue(qname, {"step": 1})
    p = page.page
    p.goto(f"/jobs/{job_id}")
    sync_api.expect(p.locator("#state")).to_have_text("ready")
    (job,) = queue.claim(qname, "w-live", limit=1)
    sync_api.expect(p.locator("#state")).to_have_text("running", timeout=15_000)
    assert queue.store_result(job, {"done": True}) and queue.complete(job)
    sync_api.expect(p.locator("#state")).to_have_text("succeeded", timeout=15_000)
    assert '"done": true' in p.inner_text("#result")
    refreshed = p.evaluate("document.body.getAttribute('data-refreshed')")
    p.wait_for_timeout(2500)   # a finished job's page stops polling
    assert p.evaluate("document.body.getAttribute('data-refreshed')") == refreshed
    p.goto(f"/jobs?queue={qname}")
    sync_api.expect(p.locator("#jobs tbody tr")).to_have_count(1)
    second = queue.enqueue(qname, {"step": 2})
    sync_api.expect(p.locator("#jobs tbody tr")).to_have_count(2, timeout=15_000)
    assert p.locator("#jobs tbody tr td.n a").first.inner_text() == str(second)
    p.check(f'#select-form input[name="id"][value="{second}"]')   # a ticked row: no swap
    queue.enqueue(qname, {"step": 3})
    p.wait_for_timeout(2500)
    sync_api.expect(p.locator("#jobs tbody tr")).to_have_count(2)
    assert p.locator('#select-form input[name="id"]:checked').count() == 1
