"""Prometheus metrics for a worker, in the text exposition format (no dependency).

The format is small and stable (``# HELP``/``# TYPE`` lines, then ``name{labels} value``),
so portq writes it itself rather than requiring ``prometheus_client``. Counters come from
:class:`portq.worker.WorkerCounters`, one series per queue (the outcomes as written: a
middleware sees what a handler did, not whether fencing let it be recorded); claim latency
is a histogram per queue fed by the worker's ``counters.claim_observers``; wait time (due
→ handler start) and run time are histograms per queue fed by a middleware the metrics add
to the worker (:class:`JobTimes`, :meth:`portq.Worker.use`); queue depth and the oldest
ready job's age are read from :meth:`portq.Queue.stats` at scrape time (by the database
clock). A :class:`portq.Worker` or a :class:`portq.aio.AsyncWorker` (with its
``AsyncQueue``) is served the same way::

    server = serve_metrics(queue, worker, port=9464)   # http://127.0.0.1:9464/metrics
    server = serve_metrics(queue, worker, 9464, host="0.0.0.0")   # every interface
    ...
    server.close()
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from portq.job import Job
from portq.queue import Queue
from portq.worker import WorkerCounters

log = logging.getLogger("portq.metrics")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: seconds a job waits or runs: milliseconds to an hour
JOB_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
               300.0, 900.0, 3600.0)
# (metric suffix, WorkerCounters field, help)
COUNTERS = (
    ("claimed", "claimed", "Jobs claimed by this worker."),
    ("succeeded", "succeeded", "Jobs this worker completed."),
    ("failed", "retried", "Failed attempts this worker scheduled for a retry."),
    ("dead", "dead", "Jobs this worker moved to dead (attempts spent or permanent error)."),
    ("lost", "lost", "Jobs whose ownership this worker lost (fencing refused its write)."),
    ("cancelled", "cancelled", "Jobs an operator cancelled while this worker ran them."),
    ("released", "released", "Unfinished jobs this worker released at shutdown."),
)


class Histogram:
    """A cumulative, thread-safe histogram of seconds."""

    def __init__(self, buckets: Sequence[float] = CLAIM_BUCKETS) -> None:
        self.buckets = tuple(sorted(buckets))
        self.counts = [0] * (len(self.buckets) + 1)   # last slot: above every bound
        self.total = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(self.buckets, seconds)] += 1
            self.total += seconds

    def lines(self, name: str, labels: str = "") -> list[str]:
        """Sample lines; ``labels`` (e.g. ``queue="q"``) go before ``le``."""
        with self._lock:
            counts, total = list(self.counts), self.total
        out, running = [], 0
        sep = "," if labels else ""
        for bound, n in zip((*self.buckets, float("inf")), counts, strict=True):
            running += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{{labels}{sep}le="{le}"}} {running}')
        tail = f"{{{labels}}}" if labels else ""
        out += [f"{name}_sum{tail} {total!r}", f"{name}_count{tail} {running}"]
        return out


class ServedWorker(Protocol):
    """What metrics read of a worker (:class:`portq.Worker` or ``portq.aio.AsyncWorker``)."""

    queues: list[str]

    @property
    def counters(self) -> WorkerCounters: ...

    @property
    def lease(self) -> float: ...

    def use(self, middleware: Any) -> None: ...

    @property
    def inflight(self) -> int: ...


class WorkerMetrics:
    """Renders one worker's counters and its queues' stats as Prometheus text."""

    def __init__(self, queue: Queue, worker: ServedWorker) -> None:
        self.queue = queue
        self.worker = worker
        self.claim_latency = {name: Histogram() for name in worker.queues}
        for qname, seconds in list(worker.counters.claims):  # claims before metrics started
            self._observe(seconds, qname)
        worker.counters.claim_observers.append(self._observe)
        self.times = JobTimes(worker.queues, worker.lease)
        worker.use(self.times)

    def _observe(self, seconds: float, queue: str) -> None:
        histogram = self.claim_latency.get(queue)
        if histogram is not None:
            histogram.observe(seconds)

    def render(self) -> str:
        counters: WorkerCounters = self.worker.counters
        per_queue = {name: dict(counters.by_queue.get(name, {})) for name in self.worker.queues}
        lines: list[str] = []
        for suffix, field_name, help_ in COUNTERS:
            name = f"portq_jobs_{suffix}_total"
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} counter"]
            lines += [f'{name}{{queue="{_escape(q)}"}} {per.get(field_name, 0)}'
                      for q, per in per_queue.items()]
        name = "portq_claim_duration_seconds"
        lines += [f"# HELP {name} Time one claim statement took (empty claims included).",
                  f"# TYPE {name} histogram"]
        for q, histogram in self.claim_latency.items():
            lines += histogram.lines(name, f'queue="{_escape(q)}"')
        for name, help_, histograms in (
                ("portq_job_wait_seconds", "Time from when a job was due (enqueued, or its "
                 "retry time) to when its handler started, by the database clock.",
                 self.times.wait),
                ("portq_job_run_seconds", "Time one attempt's handler ran (with the "
                 "middleware inside the metrics').", self.times.run)):
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
            for q, histogram in histograms.items():
                lines += histogram.lines(name, f'queue="{_escape(q)}"')
        lines += ["# HELP portq_worker_inflight Jobs this worker is running now.",
                  "# TYPE portq_worker_inflight gauge",
                  f"portq_worker_inflight {self.worker.inflight}"]
        lines += self._queue_lines()
        return "\n".join(lines) + "\n"

    def _queue_lines(self) -> list[str]:
        gauges: dict[str, list[str]] = {"ready": [], "running": [], "scheduled": [],
                                        "dead": [], "oldest_ready_age_seconds": []}
        up = 1
        for qname in self.worker.queues:
            try:
                stats = self.queue.stats(qname)
            except Exception as exc:  # noqa: BLE001 - report the scrape as degraded
                log.warning("metrics.stats_error queue=%s error=%s", qname, exc)
                up = 0
                continue
            s = stats[0] if stats else None
            label = f'{{queue="{_escape(qname)}"}}'
            gauges["ready"].append(f"{label} {s.ready if s else 0}")
            gauges["running"].append(f"{label} {s.running if s else 0}")
            gauges["scheduled"].append(f"{label} {s.scheduled if s else 0}")
            gauges["dead"].append(f"{label} {s.dead if s else 0}")
            age = s.oldest_ready_age_s if s and s.oldest_ready_age_s is not None else 0.0
            gauges["oldest_ready_age_seconds"].append(f"{label} {age!r}")
        helps = {"ready": "Due ready jobs (queue depth).", "running": "Running jobs.",
                 "scheduled": "Ready jobs whose run_at is in the future.",
                 "dead": "Dead jobs.",
                 "oldest_ready_age_seconds": "Age of the oldest due ready job (0 if none)."}
        lines = ["# HELP portq_stats_up 1 if the last queue stats query succeeded.",
                 "# TYPE portq_stats_up gauge", f"portq_stats_up {up}"]
        for key, samples in gauges.items():
            name = f"portq_queue_{key}"
            lines += [f"# HELP {name} {helps[key]}", f"# TYPE {name} gauge"]
            lines += [name + sample for sample in samples]
        return lines


class JobTimes:
    """A worker middleware observing, per queue, each job's wait (from its ``run_at`` to
    its handler's start: the claim's database time, ``lease_until`` minus the lease, plus
    the local time since the claim was sent) and each attempt's run time. ``run_at``, not
    ``created_at``: the time a due job waited for a worker, without a delay it was
    scheduled with or a retry's backoff, which no worker could have shortened."""

    def __init__(self, queues: Sequence[str], lease: float) -> None:
        self.lease = lease
        self.wait = {name: Histogram(JOB_BUCKETS) for name in queues}
        self.run = {name: Histogram(JOB_BUCKETS) for name in queues}

    def waited(self, job: Job) -> float | None:
        """Seconds from ``job``'s due time to now (None where the claim did not say)."""
        if job.run_at is None or job.claim is None:
            return None
        claimed = job.claim.lease_until - timedelta(seconds=self.lease)
        since = 0.0 if job.leased_at is None else time.monotonic() - job.leased_at
        return max(0.0, (claimed - job.run_at).total_seconds() + since)

    def __call__(self, job: Job, call_next: Callable[[], Any]) -> Any:
        started = self._started(job)
        try:
            return call_next()
        finally:
            self._ran(job, started)

    async def acall(self, job: Job, call_next: Callable[[], Awaitable[Any]]) -> Any:
        started = self._started(job)
        try:
            return await call_next()
        finally:
            self._ran(job, started)

    def _started(self, job: Job) -> float:
        waited = self.waited(job)
        histogram = self.wait.get(job.queue)
        if waited is not None and histogram is not None:
            histogram.observe(waited)
        return time.perf_counter()

    def _ran(self, job: Job, started: float) -> None:
        histogram = self.run.get(job.queue)
        if histogram is not None:
            histogram.observe(time.perf_counter() - started)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class MetricsServer:
    """An HTTP server on ``host:port`` answering ``GET /metrics`` in a daemon thread."""

    def __init__(self, metrics: WorkerMetrics, port: int, host: str = "127.0.0.1") -> None:
        render = metrics.render

        class _Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404, "try /metrics")
                    return
                body = render().encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("metrics.request " + format, *args)

        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.host, self.port = host, int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        name="portq-metrics", daemon=True)
        self._thread.start()
        log.info("metrics.serving url=http://%s:%d/metrics", self.host, self.port)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve_metrics(queue: Any, worker: ServedWorker, port: int,
                  host: str = "127.0.0.1") -> MetricsServer:
    """Serve ``worker``'s metrics at ``http://host:port/metrics`` (port 0: any free port;
    host ``0.0.0.0``: every interface). ``queue`` is the worker's :class:`portq.Queue` or
    ``portq.aio.AsyncQueue``; stats are read through the sync one on the server's thread."""
    sync_queue = queue if isinstance(queue, Queue) else queue.queue
    return MetricsServer(WorkerMetrics(sync_queue, worker), port, host)
