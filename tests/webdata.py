"""Jobs the dashboard tests (tests/test_web.py, tests/test_browser.py) plant in a queue."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import portq
from portq.conformance.helpers import free_port, raw_update, wait_until
from portq.conformance.plugin import TEST_PREFIX

# Each would run script if any page put it into the HTML unescaped, or app.js wrote it as
# HTML: window.__pwned would be set, an <img src=x> would exist.
EVIL_SCRIPT = "<script>window.__pwned = 1</script>"
EVIL_ATTR = '"><img src=x onerror="window.__pwned = 2">'
EVIL_QUEUE = "<img src=x onerror=window.__pwned=3>"  # bypasses validate_queue via raw SQL
CSRF = re.compile(r'name="csrf(?:" value|-token" content)="([0-9a-f]{64})"')


def plant_xss(queue: portq.Queue, qname: str) -> dict[str, int]:
    """A dead job whose payload, key, error, worker id and queue name are all hostile."""
    job_id = queue.enqueue(qname, {"html": EVIL_SCRIPT, "attr": EVIL_ATTR},
                           key=f"{qname}{EVIL_ATTR}", max_attempts=1)
    (job,) = queue.claim(qname, EVIL_ATTR, limit=1)
    assert queue.fail(job, f"failed: {EVIL_SCRIPT} {EVIL_ATTR}")
    other = queue.enqueue(qname, "queue name")
    assert raw_update(queue, "UPDATE portq_job SET queue = :q WHERE job_id = :id",
                      {"q": EVIL_QUEUE, "id": other}) is None
    return {"job": job_id, "evil_queue_job": other}


def failed_twice(queue: portq.Queue, qname: str) -> int:
    """A dead job with two failed attempts in its error history."""
    job_id = queue.enqueue(qname, {"order": 42, "note": "charge card"}, max_attempts=2,
                           priority=1000)  # claimed before any other job of qname
    for attempt in (1, 2):
        (job,) = queue.claim(qname, f"worker-{attempt}", limit=1)
        assert queue.fail(job, f"Traceback: attempt {attempt}: card declined", retry_in=0)
    record = queue.job(job_id)
    assert record is not None and record.state == "dead"
    return job_id


def finished_over_the_last_hour(queue: portq.Queue, qname: str, n: int = 120) -> None:
    """``n`` jobs finished at spread times of the last hour (for the per-minute chart);
    finished_at is written through the backend's own time conversion."""
    ids = queue.enqueue_many([{"queue": qname, "payload": {"i": i}, "max_attempts": 1}
                              for i in range(n)])
    jobs = queue.claim(qname, "chart-worker", limit=n)
    now = datetime.now(UTC)
    for i, job in enumerate(jobs):
        if i % 11 == 0:
            assert queue.fail(job, "permanent failure")
        else:
            assert queue.complete(job)
    params: list[dict[str, Any]] = []
    for i, job_id in enumerate(ids):
        minute = (i * 7919) % 60 if i % 3 else i % 10  # the last ten minutes busier
        params.append({"t": queue.backend.to_db_time(now - timedelta(minutes=minute,
                                                                     seconds=5)),
                       "id": job_id})
    backend = queue.backend
    with backend.transaction() as cur:
        for p in params:
            backend.execute(cur, f"UPDATE {backend.prefix}job SET finished_at = :t "
                                 "WHERE job_id = :id", p)


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
