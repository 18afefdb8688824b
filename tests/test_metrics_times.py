"""Wait and run time histograms (a middleware the metrics add to the worker), on real
engines and both worker fronts; the counters are unchanged."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import portq
from portq.conformance.helpers import quiet_worker
from portq.job import Job
from portq.metrics import WorkerMetrics

#: every test here runs on both worker fronts (Worker, AsyncWorker)
WORKER_FRONTS = True
SAMPLE = re.compile(r'^(portq_\w+)\{queue="([^"]+)"(?:,le="([^"]+)")?\} (\S+)$')


def samples(text: str, qname: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m and m.group(2) == qname:
            out[m.group(1) + (f"[{m.group(3)}]" if m.group(3) else "")] = float(m.group(4))
    return out


def test_wait_and_run_time_histograms_per_queue(queue: portq.Queue, qname: str) -> None:
    def handler(job: Job) -> None:
        time.sleep(0.2)

    queue.enqueue(qname, "due two seconds ago",
                  run_at=datetime.now(UTC) - timedelta(seconds=2))
    queue.enqueue(qname, "now")
    worker = quiet_worker(queue, qname, handler, burst=True, concurrency=2)
    metrics = WorkerMetrics(queue, worker)
    worker.run()
    got = samples(metrics.render(), qname)
    assert got["portq_jobs_succeeded_total"] == 2  # the counters, as before
    assert got["portq_job_run_seconds_count"] == 2
    assert 0.4 <= got["portq_job_run_seconds_sum"] < 5
    assert got["portq_job_run_seconds_bucket[0.1]"] == 0
    assert got["portq_job_run_seconds_bucket[0.25]"] == 2 or \
        got["portq_job_run_seconds_bucket[0.5]"] == 2
    assert got["portq_job_wait_seconds_count"] == 2
    # the job due 2 s ago waited at least that long (database clock), the other less
    assert got["portq_job_wait_seconds_bucket[1.0]"] == 1
    assert got["portq_job_wait_seconds_bucket[+Inf]"] == 2
    assert 2.0 <= got["portq_job_wait_seconds_sum"] < 30
