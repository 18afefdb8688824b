"""Handlers for the worker processes that the conformance suite starts and kills.

They are configured by environment variables, so that ``portq worker --handler
portq.conformance.worker_handlers:NAME`` can run them:

- ``PORTQT_RECORD``: a file; each handler call appends one JSON line with the job's
  claim (job id, generation, worker id, lease end).
- ``PORTQT_SLEEP``: seconds :func:`record` sleeps after recording (default 0).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from portq.job import Claim, Job

_write_lock = threading.Lock()


def claim_record(job: Job) -> dict[str, Any]:
    """The job's fencing token as a JSON-ready dict."""
    assert job.claim is not None
    return {"job_id": job.id, "generation": job.claim.generation,
            "worker_id": job.claim.worker_id, "lease_until": job.claim.lease_until.isoformat(),
            "queue": job.queue, "pid": os.getpid(), "at": time.time()}


def claim_from_record(record: dict[str, Any]) -> Claim:
    """The :class:`Claim` written by :func:`claim_record`."""
    from datetime import datetime
    return Claim(int(record["job_id"]), int(record["generation"]), str(record["worker_id"]),
                 datetime.fromisoformat(record["lease_until"]))


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every complete line written to ``path`` (a process killed mid-write leaves at most
    one partial last line, which is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _append(job: Job, **extra: Any) -> None:
    line = json.dumps({**claim_record(job), **extra}) + "\n"
    with _write_lock:
        fd = os.open(os.environ["PORTQT_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def record(job: Job) -> None:
    """Record the claim, sleep ``PORTQT_SLEEP`` seconds, succeed."""
    _append(job)
    time.sleep(float(os.environ.get("PORTQT_SLEEP", "0")))


def block(job: Job) -> None:
    """Record the claim, then hang (until the process is stopped or killed)."""
    _append(job)
    time.sleep(3600)


def span(job: Job) -> None:
    """Sleep ``PORTQT_SLEEP`` seconds, then record the job with its handler's own start and
    end times (``start``, ``end``: time.time()) and its concurrency key, for limits checked
    from handlers' clocks."""
    start = time.time()
    time.sleep(float(os.environ.get("PORTQT_SLEEP", "0")))
    _append(job, start=start, end=time.time(), concurrency_key=job.concurrency_key)


def until_cancelled(job: Job) -> str:
    """Record the claim, then check ``job.cancelled()`` every 10 ms (for at most 120 s);
    record when it became true (``cancelled_at``) and return a value (never stored: the
    job is cancelled)."""
    _append(job)
    deadline = time.monotonic() + 120
    while not job.cancelled() and time.monotonic() < deadline:
        time.sleep(0.01)
    _append(job, cancelled_at=time.time(), seen=job.cancelled())
    return "finished after all"


def ignore_cancel(job: Job) -> dict[str, Any]:
    """Record the claim, sleep ``PORTQT_SLEEP`` seconds whatever happens, record whether
    the job was cancelled meanwhile, and return a value as if it had succeeded."""
    _append(job)
    time.sleep(float(os.environ.get("PORTQT_SLEEP", "0")))
    _append(job, returned_at=time.time(), seen=job.cancelled())
    return {"ignored": "the cancel"}


async def async_until_cancelled(job: Job) -> str:
    """Record the claim, then await a 120 s sleep; record when its task is cancelled
    (``task_cancelled_at``) and let the cancellation propagate."""
    import asyncio
    _append(job)
    try:
        await asyncio.sleep(120)
    except asyncio.CancelledError:
        _append(job, task_cancelled_at=time.time(), seen=job.cancelled())
        raise
    return "slept"


def workflow_step(job: Job) -> dict[str, Any]:
    """Record the claim, read the dependencies' results, sleep ``PORTQT_SLEEP`` seconds and
    return the job's id with the ids whose results it read (job dependencies)."""
    _append(job)
    seen = sorted(job.dependency_results())
    time.sleep(float(os.environ.get("PORTQT_SLEEP", "0")))
    return {"id": job.id, "seen": seen}
