"""The Throughput page in headless Chromium against `portq dashboard` on every reachable
engine: per-queue finished counts, failure rate and wait/run percentiles over 1 h, 24 h and
7 d, refreshing itself; the Jobs list and a running job refresh too; a page on another
origin cannot read the statistics. Needs what tests/test_browser.py needs."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

pytest.importorskip("playwright", reason="browser tests need portq[browser]")

from test_browser import Watch, browser, page, server, sync_api

import portq
from portq.conformance.helpers import wait_until

__all__ = ["browser", "page", "server"]   # fixtures used by name below


def _finish(queue: portq.Queue, qname: str, ok: int, dead: int) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i, "max_attempts": 1}
                        for i in range(ok + dead)])
    jobs = queue.claim(qname, "browser-w", limit=ok + dead)
    assert all(queue.complete_many(jobs[:ok]))
    for job in jobs[ok:]:
        assert queue.fail(job, "boom")


def test_throughput_page_shows_each_window_and_refreshes(page: Watch, queue: portq.Queue,
                                                         qname: str) -> None:
    _finish(queue, qname, ok=3, dead=1)
    p = page.page
    p.goto("/throughput")
    row = p.locator(f'#throughput tr[data-queue="{qname}"]')
    sync_api.expect(row.locator('td[data-field="succeeded"]')).to_have_text("3")
    assert row.locator('td[data-field="dead"]').inner_text() == "1"
    assert row.locator('td[data-field="failure_rate"]').inner_text() == "25.0%"
    assert row.locator('td[data-field="wait_p50"]').inner_text().endswith(("ms", "s"))
    assert row.locator("svg.chart rect").count() >= 1
    for window in ("24h", "7d"):
        p.click(f'#windows a:text-is("{window}")')
        sync_api.expect(p.locator("#throughput")).to_have_attribute("data-window", window)
        assert p.locator(f'#throughput tr[data-queue="{qname}"] '
                         'td[data-field="succeeded"]').inner_text() == "3"
    p.goto("/throughput?window=1h")
    _finish(queue, qname, ok=2, dead=0)   # the page refetches itself (poll 1 s)
    sync_api.expect(row.locator('td[data-field="succeeded"]')).to_have_text(
        "5", timeout=20_000)
    p.goto("/throughput?window=forever")   # an unknown window falls back to 1 h
    assert p.locator("#throughput").get_attribute("data-window") == "1h"


def test_throughput_json_and_its_cross_origin_refusal(server: str, queue: portq.Queue,
                                                      qname: str) -> None:
    _finish(queue, qname, ok=1, dead=0)

    def mine() -> list[dict[str, Any]]:
        # the 1 h window is recounted every poll (1 s); a stale one is served meanwhile
        with urllib.request.urlopen(f"{server}/api/throughput", timeout=10) as r:
            data = json.load(r)
        assert data["window"] == "1h"
        return [q for q in data["queues"] if q["queue"] == qname]
    assert wait_until(mine, timeout=15)
    (row,) = mine()
    assert row["bucket_s"] == 60 and row["succeeded"] == 1
    assert len(row["series"]["succeeded"]) == 60
    request = urllib.request.Request(f"{server}/api/throughput", headers={
        "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403


def test_jobs_list_and_a_running_job_refresh_themselves(page: Watch, queue: portq.Queue,
                                                        qname: str) -> None:
    p = page.page
    first = queue.enqueue(qname, "one")
    p.goto(f"/jobs?queue={qname}")
    sync_api.expect(p.locator(f'#jobs a:text-is("{first}")')).to_have_count(1)
    second = queue.enqueue(qname, "two")
    sync_api.expect(p.locator(f'#jobs a:text-is("{second}")')).to_have_count(
        1, timeout=20_000)
    (job,) = queue.claim(qname, "browser-w", limit=1)
    p.goto(f"/jobs/{job.id}")
    sync_api.expect(p.locator("#state")).to_have_text("running")
    assert queue.complete(job)
    sync_api.expect(p.locator("#state")).to_have_text("succeeded", timeout=20_000)
