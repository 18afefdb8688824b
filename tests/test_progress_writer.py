"""A worker's progress writer (portq.runtime.progress): its thread runs from the worker's
start, so that no ``job.progress()`` waits for a thread to start (the first report did,
when it started the thread: up to 9 ms beside six busy processes on 2 cores, over the
conformance suite's 50 ms under CI's load), and it ends with the worker. Outside a worker
the first report starts it, and it still writes."""

from __future__ import annotations

import threading
from typing import Any

import portq
from portq.conformance.helpers import quiet_worker, wait_until
from portq.job import Job
from portq.runtime.progress import ProgressWriter

#: every test here runs on both worker fronts (Worker, AsyncWorker): see plugin.FRONTS
WORKER_FRONTS = True


def progress_thread(writer: ProgressWriter | None) -> threading.Thread | None:
    """The writer's thread while it runs."""
    thread = None if writer is None else writer._thread
    return thread if thread is not None and thread.is_alive() else None


def report_and_wait(job: Job, writer: ProgressWriter | None, fraction: float,
                    note: str) -> None:
    """In a handler: report, then wait until the writer has sent it (a report still
    waiting when the handler returns is dropped)."""
    assert writer is not None
    before = writer.batches
    job.progress(fraction, note)
    assert wait_until(lambda: writer.batches > before, timeout=10, interval=0.01)


def test_a_workers_progress_thread_runs_before_any_report_and_ends_with_it(
        queue: portq.Queue, qname: str) -> None:
    seen: dict[str, Any] = {}

    def handler(job: Job) -> None:
        writer = worker.runtime.handler.progress
        seen["before"] = progress_thread(writer)
        report_and_wait(job, writer, 0.5, "half")
        seen["after"] = progress_thread(writer)

    job_id = queue.enqueue(qname, None)
    worker = quiet_worker(queue, qname, handler, burst=True)
    worker.run()
    assert seen["before"] is not None, "no progress thread ran before the first report"
    assert seen["after"] is seen["before"]  # the report started no other (nor ended it)
    writer = worker.runtime.handler.progress
    assert writer is not None and writer.written == 1
    record = queue.job(job_id)
    assert record is not None and record.state == "succeeded"
    assert (record.progress, record.progress_note) == (0.5, "half")
    # the worker's shutdown ended it (the thread of a report outside a worker idles 30 s)
    assert wait_until(lambda: not seen["before"].is_alive(), timeout=5)
    assert progress_thread(writer) is None


def test_outside_a_worker_the_first_report_starts_the_writer(queue: portq.Queue,
                                                             qname: str) -> None:
    writer = ProgressWriter(queue.backend, interval=0.05)
    job_id = queue.enqueue(qname, None)
    [job] = queue.claim(qname, "progress-test", lease=30)
    assert progress_thread(writer) is None
    writer.report(job, 0.25, "a quarter")
    assert progress_thread(writer) is not None
    assert wait_until(lambda: writer.written == 1, timeout=5)
    record = queue.job(job_id)
    assert record is not None and (record.progress, record.progress_note) == (0.25, "a quarter")
    writer.close()
    assert wait_until(lambda: progress_thread(writer) is None, timeout=5)
